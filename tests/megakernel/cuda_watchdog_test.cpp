// The megakernel on small hand-made programs. The watchdog: a program with an event that can never fire
// ends with an error that names the stuck task, its op and tile, the event, its counter and its target,
// within the bound; never a hang; in launch and in resident mode. The trace: every task of a chain that
// alternates CTAs is recorded once, on its queue's CTA, after the task it waits for. Skipped without a GPU.
#include <gtest/gtest.h>

#include <chrono>

#include "megakernel/cuda/cuda_executor.h"
#include "tests/common/cuda_device.h"
#include "ops/noop.h"

namespace tilefire::testing {
namespace {

// Two noop tasks on two CTAs; task 0 waits on event 0, which nothing signals when `stuck` (the validator
// would refuse such a program; the executor is handed it directly). Otherwise task 1 signals it.
Program two_task_program(uint32_t workers, bool stuck) {
  Program p;
  p.nodes.push_back({OpParams::make(OpCode::noop, 0, NoopParams{2}), 0, 2, kNoSlot});
  p.events.push_back({1});
  TaskDesc waiter;
  waiter.op = OpCode::noop;
  waiter.tile_begin = 0;
  waiter.tile_end = 1;
  waiter.wait_begin = 0;
  waiter.wait_count = 1;
  p.waits.push_back(0);
  TaskDesc signaller;
  signaller.op = OpCode::noop;
  signaller.tile_begin = 1;
  signaller.tile_end = 2;
  signaller.tile_index = 1;
  if (!stuck) {
    signaller.signal_begin = 0;
    signaller.signal_count = 1;
    p.signals.push_back(0);
  }
  p.tasks = {waiter, signaller};
  p.queues.resize(workers);
  p.queues[0].push_back(0);
  p.queues[1 % workers].push_back(1);
  p.workers = workers;
  return p;
}

void expect_watchdog_error(bool resident) {
  CudaOptions options;
  options.watchdog_ms = 300;
  options.resident = resident;
  CudaExecutor cuda(options);
  ASSERT_GE(cuda.workers(), 2u);
  const Program stuck = two_task_program(cuda.workers(), true);
  CudaProgramPtr loaded = cuda.load(stuck, {});
  const int32_t token = 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    cuda.run_step(*loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow);
    FAIL() << "a step with an event that never fires returned";
  } catch (const DeviceError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("watchdog"), std::string::npos) << message;
    EXPECT_NE(message.find("task 0 (noop, layer 0, tile [0, 1))"), std::string::npos) << message;
    EXPECT_NE(message.find("event 0 (counter 0, target 1)"), std::string::npos) << message;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0) << "the watchdog fired late";
  // The executor refuses to go on; a new one on the same device works.
  EXPECT_THROW(cuda.run_step(*loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow), DeviceError);
}

TEST(CudaWatchdog, AnEventThatNeverFiresEndsTheStepWithAnError) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_watchdog_error(false);
}

TEST(CudaWatchdog, AnEventThatNeverFiresEndsAResidentStepWithAnError) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_watchdog_error(true);
}

// The same program with its signal runs, step after step, in both modes (grow-only counters).
TEST(CudaWatchdog, TheSameProgramWithItsSignalRunsManySteps) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (bool resident : {false, true}) {
    CudaOptions options;
    options.watchdog_ms = 2000;
    options.resident = resident;
    CudaExecutor cuda(options);
    const Program good = two_task_program(cuda.workers(), false);
    CudaProgramPtr loaded = cuda.load(good, {});
    const int32_t token = 0;
    for (int s = 0; s < 50; ++s) {
      cuda.run_step(*loaded, StepInputs{&token, 1, 0}, s % 3 == 2 ? ScheduleMode::bsp : ScheduleMode::dataflow);
    }
  }
}

TEST(CudaTrace, EveryTaskOnceOnItsCtaAfterTheTaskItWaitsFor) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (bool resident : {false, true}) {
    CudaOptions options;
    options.resident = resident;
    CudaExecutor cuda(options);
    const Program chain = noop_program(64, true, cuda.workers());  // task t on CTA t % workers, waiting for t - 1
    CudaProgramPtr loaded = cuda.load(chain, {});
    const int32_t token = 0;
    cuda.run_step(*loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow);  // untraced, then traced
    for (int traced_step = 0; traced_step < 2; ++traced_step) {
      std::vector<TaskTiming> trace;
      cuda.run_step(*loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow, &trace);
      ASSERT_EQ(trace.size(), chain.tasks.size()) << (resident ? "resident" : "launch");
      for (uint32_t t = 0; t < trace.size(); ++t) {
        EXPECT_EQ(trace[t].task, t);
        EXPECT_EQ(trace[t].worker, t % cuda.workers()) << "task " << t;
        EXPECT_LE(trace[t].start_ns, trace[t].end_ns) << "task " << t;
        if (t > 0) {
          EXPECT_GE(trace[t].start_ns, trace[t - 1].end_ns) << "task " << t << " began before task " << t - 1 << " ended";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tilefire::testing
