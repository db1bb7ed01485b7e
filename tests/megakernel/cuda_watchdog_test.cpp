// The megakernel on small hand-made programs. The watchdog: a program with an event that can never fire
// ends with an error that names the stuck task, its op and tile, the event, its counter and its target,
// within the bound; never a hang; in launch and in resident mode; and a step stopped while weights sit in
// the shared-memory stages leaves the device usable. The trace: every task of a chain that
// alternates CTAs is recorded once, on its queue's CTA, after the task it waits for. The host's deadline:
// a step past it ends with an error and a GPU kept held until its kernel ends, a tensor-parallel group's
// windows there kept too. Skipped without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "megakernel/cpu/cpu_executor.h"
#include "megakernel/cuda/cuda_executor.h"
#include "ops/dtype.h"
#include "ops/noop.h"
#include "scheduler/validator.h"
#include "tests/common/compare.h"
#include "tests/common/cuda_device.h"
#include "tilefire/engine.h"
#include "transport/device_windows.h"

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

// How long a stopped step may take, load and stop together: the watchdog waits 300 ms. Under
// ThreadSanitizer the emulated kernel's spinning workers run several times slower, and on a loaded 2-core
// machine a step took 10.9 s (2026-12-05): the bound there only tells a stop from a hang.
#if defined(__SANITIZE_THREAD__)
constexpr double kMostStopSeconds = 60.0;
#else
constexpr double kMostStopSeconds = 10.0;
#endif

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
  EXPECT_LT(seconds, kMostStopSeconds) << "the watchdog fired late";
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

// The pair of tasks with the signal and in bsp order: the signaller (task 0) is node 0, the waiter
// (task 1) node 1; the waiter on CTA 0, the signaller on CTA 1. (With both tasks in one node, as
// two_task_program has them, a bsp step is refused: bsp_order_violation.)
Program signalled_pair_program(uint32_t workers) {
  Program p;
  p.nodes.push_back({OpParams::make(OpCode::noop, 0, NoopParams{1}), 0, 1, kNoSlot});
  p.nodes.push_back({OpParams::make(OpCode::noop, 0, NoopParams{1}), 1, 1, kNoSlot});
  p.events.push_back({1});
  TaskDesc signaller;
  signaller.op = OpCode::noop;
  signaller.tile_end = 1;
  signaller.signal_count = 1;
  TaskDesc waiter;
  waiter.op = OpCode::noop;
  waiter.node = 1;
  waiter.tile_end = 1;
  waiter.wait_count = 1;
  p.signals.push_back(0);
  p.waits.push_back(0);
  p.tasks = {signaller, waiter};
  p.queues.resize(workers);
  p.queues[0].push_back(1);
  p.queues[1 % workers].push_back(0);
  p.workers = workers;
  return p;
}

// The pair with its signal runs, step after step, in both modes, every third step bsp (grow-only
// counters).
// Steps of the program below: under ThreadSanitizer a step of the emulated kernel took about 0.9 s
// (2026-12-06, 50 steps in each mode were 92 s, the longest case of CI's TSan run); 12 still cross
// dataflow and bsp steps four times, with every counter grown past its first step's target.
#if defined(__SANITIZE_THREAD__)
constexpr int kManySteps = 12;
#else
constexpr int kManySteps = 50;
#endif

TEST(CudaWatchdog, TheSameProgramWithItsSignalRunsManySteps) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (bool resident : {false, true}) {
    CudaOptions options;
    options.watchdog_ms = 2000;
    options.resident = resident;
    CudaExecutor cuda(options);
    const Program good = signalled_pair_program(cuda.workers());
    ASSERT_NO_THROW(validate_program(good));
    ASSERT_EQ(bsp_order_violation(good), "");
    CudaProgramPtr loaded = cuda.load(good, {});
    const int32_t token = 0;
    for (int s = 0; s < kManySteps; ++s) {
      cuda.run_step(*loaded, StepInputs{&token, 1, 0}, s % 3 == 2 ? ScheduleMode::bsp : ScheduleMode::dataflow);
    }
  }
}

// The host's deadline (docs/CUDA.md): a kernel still waiting when the host's bound on the step passes
// (here long before its watchdog would stop it, standing for a hang no watchdog sees). The host gives up
// with the mailbox's words; the executor refuses to go on; its GPU stays held (no new executor, no device
// memory there), and destroying the executor and its program waits for nothing. When the kernel ends
// (launch: its watchdog at 5 s; resident: that, or, when the emulated grid has not begun the step yet,
// the shutdown the host raised as it gave up), the GPU is released and runs a step again.
void expect_host_gives_up(bool resident) {
  const char* mode = resident ? "resident" : "launch";
  ASSERT_EQ(CudaExecutor::hung_kernels_running(), 0u);
  CudaOptions options;
  options.watchdog_ms = 5000;
  options.step_deadline_ms = 250;
  options.resident = resident;
  const int32_t token = 0;
  auto executor = std::make_unique<CudaExecutor>(options);
  const Program stuck = two_task_program(executor->workers(), true);
  CudaProgramPtr loaded = executor->load(stuck, {});
  const auto start = std::chrono::steady_clock::now();
  try {
    executor->run_step(*loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow);
    FAIL() << mode << ": a step with an event that never fires returned";
  } catch (const DeviceError& e) {
    const std::string message = e.what();
    for (const char* part : {"the host gave up after ", resident ? "waiting for step 1 of the resident megakernel"
                                                                  : "waiting for step 1 of the megakernel",
                             "--step-deadline-ms 250", "the mailbox reads done 0, doorbell ", "error code 0.",
                             "CUDA device 0 stays held"})
      EXPECT_NE(message.find(part), std::string::npos) << mode << ": no '" << part << "' in: " << message;
  }
  const double gave_up = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(gave_up, 0.9 * options.watchdog_ms / 1000.0) << mode << ": the host gave up after the watchdog's bound";
  EXPECT_EQ(CudaExecutor::hung_kernels_running(), 1u) << mode;
  EXPECT_THROW(executor->run_step(*loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow), DeviceError) << mode;
  try {
    CudaExecutor another(options);
    FAIL() << mode << ": an executor started on a GPU a hung kernel holds";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device 0 is still held by a megakernel the host gave up"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(DeviceBuffer(1024), DeviceError) << mode;

  const auto teardown = std::chrono::steady_clock::now();
  loaded.reset();  // its device buffers are kept until the kernel ends: cudaFree would wait for it
  executor.reset();
  const double teardown_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - teardown).count();
  EXPECT_LT(teardown_seconds, 0.5 * options.watchdog_ms / 1000.0) << mode << ": the teardown waited for the kernel";

  // The kernel ends (above); the record then frees what it held.
  const auto released_by = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (CudaExecutor::hung_kernels_running() != 0 && std::chrono::steady_clock::now() < released_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(CudaExecutor::hung_kernels_running(), 0u) << mode << ": the kernel never ended";
  CudaOptions fresh_options;
  fresh_options.resident = resident;
  CudaExecutor fresh(fresh_options);
  const Program good = signalled_pair_program(fresh.workers());
  CudaProgramPtr good_loaded = fresh.load(good, {});
  EXPECT_NO_THROW(fresh.run_step(*good_loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow)) << mode;
}

TEST(CudaHostDeadline, TheHostGivesUpOnAStepPastItsDeadlineAndKeepsTheGpuHeld) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_host_gives_up(false);
}

TEST(CudaHostDeadline, TheHostGivesUpOnAResidentStepPastItsDeadlineAndKeepsTheGpuHeld) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_host_gives_up(true);
}

// A tensor-parallel group's windows and flags (transport/, allocated outside the executors) on a GPU that
// a kernel the host gave up on holds: the group's teardown hands them to the record instead of freeing
// them (cudaFree there would wait for the kernel: until its 5 s watchdog here, for ever on a hang), an
// engine with a new group there is refused, and when the kernel ends the record frees them: the device
// has as much free memory as before the group (on a GPU, within half a window: the driver's own use may
// move a little; measured after a step has run, so that the kernel's code is loaded both times). (The
// emulation has one GPU: the group's two ranks share it.)
TEST(CudaHostDeadline, ATensorParallelGroupsWindowsOnAHeldGpuAreKeptNotWaitedFor) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  ASSERT_EQ(CudaExecutor::hung_kernels_running(), 0u);
  CudaOptions options;
  options.watchdog_ms = 5000;
  options.step_deadline_ms = 250;
  const int32_t token = 0;
  const auto free_memory_after_a_step = [&] {
    CudaExecutor warm{CudaOptions{}};
    const Program good = signalled_pair_program(warm.workers());
    CudaProgramPtr good_loaded = warm.load(good, {});
    warm.run_step(*good_loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow);
    return int64_t(warm.free_memory_bytes());
  };
  constexpr uint64_t kWindowBytes = uint64_t(1) << 20;
  const int64_t free_before = free_memory_after_a_step();
  auto group = std::make_unique<DeviceWindowGroup>(std::vector<int>{0, 0}, kWindowBytes, 16, 1000,
                                                   &CudaExecutor::keep_if_group_held);
  auto executor = std::make_unique<CudaExecutor>(options);
  const Program stuck = two_task_program(executor->workers(), true);
  CudaProgramPtr loaded = executor->load(stuck, {});
  EXPECT_THROW(executor->run_step(*loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow), DeviceError);
  ASSERT_EQ(CudaExecutor::hung_kernels_running(), 1u);
  EngineOptions tensor_parallel;
  tensor_parallel.preset = "tiny";
  tensor_parallel.backend = Backend::cuda;
  tensor_parallel.tp = 2;
  tensor_parallel.max_context = 64;
  try {
    Engine refused(tensor_parallel);
    ADD_FAILURE() << "an engine with a new group on the held GPU was not refused";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device 0 is still held"), std::string::npos) << e.what();
  }

  const auto teardown = std::chrono::steady_clock::now();
  group.reset();
  loaded.reset();
  executor.reset();
  const double teardown_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - teardown).count();
  EXPECT_LT(teardown_seconds, 0.5 * options.watchdog_ms / 1000.0) << "the group's teardown waited for the kernel";

  const auto released_by = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (CudaExecutor::hung_kernels_running() != 0 && std::chrono::steady_clock::now() < released_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(CudaExecutor::hung_kernels_running(), 0u) << "the kernel never ended";
  EXPECT_NO_THROW(CudaExecutor::prepare_for_allocation(0));
  const int64_t lost = free_before - free_memory_after_a_step();
  EXPECT_LT(lost, int64_t(kWindowBytes / 2)) << "the kept windows were not freed: " << lost << " bytes less free";
}

// A chain of two LM-head nodes (rows of 4 KiB in bf16, staged on Hopper) and its buffers: the norm, the
// activations between the nodes, the weights. Node n reads activation n and writes activation n + 1.
// 8192 rows make tiles of 16 rows on 132 CTAs, two 32 KiB chunks each, so a CTA's stream of node 1 is
// longer than its ring of stages: when the step stops, its producer is blocked waiting for a stage.
struct StagedChain {
  static constexpr uint32_t kRows = 8192, kCols = 2048, kWidth = kRows;  // activations: the widest of both
  std::vector<std::vector<unsigned char>> tensors;  // in slot order: norm, activations 0..2, weights 0..1
  StagedChain() {
    std::vector<float> norm(kWidth, 1.0f), first(kWidth, 0.0f), activation(kWidth, 0.0f);
    for (uint32_t i = 0; i < kCols; ++i) first[i] = float(int(i * 37 % 101) - 50) * 0.01f;
    auto bytes_of = [](const std::vector<float>& v) {
      std::vector<unsigned char> b(v.size() * 4);
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    };
    tensors = {bytes_of(norm), bytes_of(first), bytes_of(activation), bytes_of(activation)};
    for (uint32_t m = 0; m < 2; ++m) {
      std::vector<unsigned char> w(uint64_t(kRows) * kCols * 2);  // [kRows, kCols] bf16
      uint64_t state = 0x9e3779b97f4a7c15ull * (m + 1);
      for (uint64_t i = 0; i < uint64_t(kRows) * kCols; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const uint16_t h = f32_to_bf16(float(int64_t(state >> 40) % 2001 - 1000) * 5e-5f);
        std::memcpy(w.data() + i * 2, &h, 2);
      }
      tensors.push_back(std::move(w));
    }
  }
  static Program program(uint32_t workers) {
    return matrix_chain_program({{kRows, kCols}, {kRows, kCols}}, 64 * 1024, workers, DType::bf16);
  }
};

// The watchdog stops a step whose tiles' weights the producer warp has already streamed into the shared
// memory stages (node 1 waits for a done event of node 0 that can never fire, while its rows stage
// ahead). Every CTA must still exit cleanly, with no bulk copy left landing (megakernel.cu,
// drain_weight_stages): a new executor on the device then runs the chain, in agreement with the cpu
// backend.
TEST(CudaWatchdog, AStepStoppedWithWeightsInTheStagesLeavesTheDeviceUsable) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
#if defined(__SANITIZE_THREAD__)
  // 64 MiB of weights through the emulation under ThreadSanitizer outlast the 300 ms watchdog and the
  // 10 s bound on the stop: the test is about time, which the sanitizer's slowdown takes away.
  GTEST_SKIP() << "its time bounds do not hold under ThreadSanitizer";
#endif
  const StagedChain chain;
  const int32_t token = 0;
  std::vector<std::vector<unsigned char>> host = chain.tensors;
  std::vector<void*> host_slots;
  for (auto& t : host) host_slots.push_back(t.data());
  const Program cpu_program = StagedChain::program(2);
  CpuExecutor cpu(2);
  ProgramInstance instance(cpu_program, host_slots);
  cpu.run_step(instance, StepInputs{&token, 1, 0}, StepOptions{});
  std::vector<float> want(StagedChain::kRows);
  std::memcpy(want.data(), host[3].data(), want.size() * 4);

  for (bool resident : {false, true}) {
    const char* mode = resident ? "resident" : "launch";
    CudaOptions options;
    options.watchdog_ms = 300;
    options.resident = resident;
    auto run = [&](bool stuck) {
      CudaExecutor cuda(options);
      Program program = StagedChain::program(cuda.workers());
      if (stuck) program.events[0].trigger_count += 1;  // one signal more than node 0's tiles give
      std::vector<DeviceBuffer> buffers;
      std::vector<void*> slots;
      for (const auto& t : chain.tensors) {
        buffers.push_back(cuda.upload(t.data(), t.size()));
        slots.push_back(buffers.back().get());
      }
      CudaProgramPtr loaded = cuda.load(program, slots);
      std::vector<float> out(StagedChain::kRows);
      cuda.run_step(*loaded, StepInputs{&token, 1, 0}, ScheduleMode::dataflow);
      cuda.download(out.data(), buffers[3].get(), out.size() * 4);
      return out;
    };
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(run(true), DeviceError) << mode;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), kMostStopSeconds)
        << mode << ": the stopped step took long to end";
    std::vector<float> got;
    ASSERT_NO_THROW(got = run(false)) << mode << ": the device did not run a step after the stopped one";
    const Mismatches m = compare_close(got.data(), want.data(), got.size(), 1e-4, 1e-3);
    EXPECT_EQ(m.count, 0u) << mode << ": the chain's output differs from the cpu backend's in " << m.count << " values:\n"
                           << m.first;
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
