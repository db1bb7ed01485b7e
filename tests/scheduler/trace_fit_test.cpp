// Fitting a device to an observed step (scheduler/trace_fit.h): on timelines whose figures are known
// (the simulator's own, on a known device; hand-made ones with set gaps), the fit gives them back; a
// timeline that does not fit the program is refused.
#include <gtest/gtest.h>

#include "graph/compile.h"
#include "graph/model_spec.h"
#include "ops/noop.h"
#include "scheduler/trace_fit.h"

namespace tilefire::testing {
namespace {

// tiny's decode program in bf16 for `workers` workers, attention unsplit.
Program tiny_decode_program(uint32_t workers) {
  CompileOptions compile;
  compile.workers = workers;
  compile.kv_splits = 1;
  return compile_model(preset_spec("tiny", DType::bf16), compile);
}

// The simulator's timeline of tiny's decode program on a device with no dispatch cost and flops high
// enough that every task is memory-bound: each task runs bytes / (bandwidth / workers), and a task that
// waits starts one signal latency after its last input ends. The fit reads back the bandwidth and the
// signal latency.
TEST(TraceFit, RecoversTheDeviceOfASimulatedStep) {
  const Program program = tiny_decode_program(4);
  // With epilogues (RoPE in QKV, sigmoids in gate/up): the fit takes them off before reading the bandwidth.
  const DeviceModel device{.name = "known", .workers = 4, .memory_gbs = 50, .flops = 1e18, .dispatch_ns = 0, .signal_ns = 300,
                           .rotation_ns = 25, .exp_ns = 4};
  const uint32_t context = 64;
  const SimulationResult simulated = simulate_program(program, device, context);
  const DeviceFit fit = fit_device(program, simulated.timeline, context, device);
  EXPECT_EQ(fit.device.name, "known-fitted");
  EXPECT_NEAR(fit.device.memory_gbs, 50.0, 1e-6);
  EXPECT_NEAR(fit.device.signal_ns, 300.0, 1e-6);
  EXPECT_NEAR(fit.device.dispatch_ns, 0.0, 1e-6);
  EXPECT_GT(fit.signal_samples, 0u);
  EXPECT_GT(fit.dispatch_samples, 0u);
  EXPECT_GT(fit.streaming_tasks, 0u);
  EXPECT_NEAR(fit.observed_step_ns, simulated.step_ns, 1e-6);
}

// A device that stalls: the simulated step carries the stalls, and the fit takes them out of the
// bandwidth (the simulator charges them on their own), so it reads back about the device's bandwidth.
// About: the fit spreads the step's stalls evenly over its tasks, where the simulator's fall where their
// phases put them.
TEST(TraceFit, TakesTheStallsOutOfTheBandwidth) {
  const Program program = tiny_decode_program(4);
  DeviceModel device{.name = "stalling", .workers = 4, .memory_gbs = 50, .flops = 1e18, .dispatch_ns = 0, .signal_ns = 300};
  device.stall_ns = 2000;
  device.stall_every_ns = 20000;  // 10% of each worker's time
  const uint32_t context = 64;
  const SimulationResult simulated = simulate_program(program, device, context);
  DeviceModel without = device;
  without.stall_ns = 0;
  const double unstalled_ns = simulate_program(program, without, context).step_ns;
  ASSERT_GT(simulated.step_ns, unstalled_ns * 1.05);  // the step is several periods long and meets stalls
  EXPECT_NEAR(fit_device(program, simulated.timeline, context, device).device.memory_gbs, 50.0, 50.0 * 0.05);
  // A fit that knows nothing of them reads them as a lower bandwidth.
  EXPECT_LT(fit_device(program, simulated.timeline, context, without).device.memory_gbs, 50.0 * 0.95);
}

// A base device whose stalls, by their phases, cover the whole observed step on every worker (stalls of
// 0.9 s every second, measured on a machine busy with other work, against a step of microseconds): no
// time is left to fit a bandwidth to, and the refusal says it is the stalls, not the epilogues.
TEST(TraceFit, RefusesAStepItsModelledStallsCoverWhole) {
  const Program program = tiny_decode_program(2);
  const DeviceModel device{.name = "known", .workers = 2, .memory_gbs = 50, .flops = 1e18, .dispatch_ns = 0, .signal_ns = 300};
  const uint32_t context = 64;
  const SimulationResult simulated = simulate_program(program, device, context);
  ASSERT_LT(simulated.step_ns, 1e8);
  DeviceModel busy = device;
  busy.stall_ns = 0.9e9;
  busy.stall_every_ns = 1e9;
  try {
    fit_device(program, simulated.timeline, context, busy);
    ADD_FAILURE() << "a step its stalls cover whole was fitted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("stalls the base device models"), std::string::npos) << error.what();
  }
  // Stalls that leave the step alone (a quarter of each period, the step before them) fit as before.
  busy.stall_ns = 0.2e9;
  EXPECT_NEAR(fit_device(program, simulated.timeline, context, busy).device.memory_gbs, 50.0, 1e-6);
}

// Workers that are not alike: on a simulated step of a device whose workers run at 1.25 and 0.75 of
// their mean, a fit from a base device that has worker speeds reads both back, and the bandwidth; a
// fit from one without them keeps one pooled bandwidth and no speeds.
TEST(TraceFit, ReadsBackEachWorkersSpeed) {
  const Program program = tiny_decode_program(2);
  // With epilogues: the fit takes each worker's off at that worker's speed.
  DeviceModel device{.name = "unequal", .workers = 2, .memory_gbs = 40, .flops = 1e18, .dispatch_ns = 0, .signal_ns = 300,
                     .rotation_ns = 25, .exp_ns = 4};
  device.worker_speed = {1.25, 0.75};
  const uint32_t context = 64;
  const SimulationResult simulated = simulate_program(program, device, context);
  DeviceModel base = device;
  base.worker_speed = {1.0, 1.0};
  base.memory_gbs = 7;
  const DeviceFit fit = fit_device(program, simulated.timeline, context, base);
  EXPECT_NEAR(fit.device.memory_gbs, 40.0, 1e-6);
  ASSERT_EQ(fit.device.worker_speed.size(), 2u);
  EXPECT_NEAR(fit.device.worker_speed[0], 1.25, 1e-9);
  EXPECT_NEAR(fit.device.worker_speed[1], 0.75, 1e-9);
  EXPECT_NEAR(fit.worker_gbs[0], 25.0, 1e-6);  // 40 / 2 workers * 1.25
  EXPECT_NEAR(fit.worker_gbs[1], 15.0, 1e-6);
  base.worker_speed.clear();
  const DeviceFit pooled = fit_device(program, simulated.timeline, context, base);
  EXPECT_TRUE(pooled.device.worker_speed.empty());
  EXPECT_LT(pooled.device.memory_gbs, 40.0);  // the slow worker's tasks take more of the time
  // Stalls and speeds together: each worker's stalls come out of its own rate (about: the fit spreads a
  // worker's stalls over its tasks).
  device.stall_ns = 2000;
  device.stall_every_ns = 20000;
  const SimulationResult stalled = simulate_program(program, device, context);
  base = device;
  base.worker_speed = {1.0, 1.0};
  const DeviceFit both = fit_device(program, stalled.timeline, context, base);
  EXPECT_NEAR(both.device.memory_gbs, 40.0, 40.0 * 0.05);
  EXPECT_NEAR(both.device.worker_speed[0], 1.25, 0.05);
  EXPECT_NEAR(both.device.worker_speed[1], 0.75, 0.05);
}

// Four empty tasks. Worker 0 runs 0 then 1 (1 waits on nothing: a 40 ns gap). Worker 1 runs 3 (waits
// on nothing) then 2, which waits for 1's event and starts 250 ns after 1 ends. Empty tasks move no
// bytes, so the bandwidth stays the base's.
Program four_tasks() {
  Program p;
  p.nodes.push_back({OpParams::make(OpCode::noop, 0, NoopParams{4}), 0, 4, kNoSlot});
  p.events.push_back({1});
  for (uint32_t t = 0; t < 4; ++t) {
    TaskDesc task;
    task.op = OpCode::noop;
    task.tile_begin = t;
    task.tile_end = t + 1;
    task.tile_index = t;
    p.tasks.push_back(task);
  }
  p.tasks[1].signal_begin = 0;
  p.tasks[1].signal_count = 1;
  p.signals.push_back(0);
  p.tasks[2].wait_begin = 0;
  p.tasks[2].wait_count = 1;
  p.waits.push_back(0);
  p.queues = {{0, 1}, {3, 2}};
  p.workers = 2;
  return p;
}

TEST(TraceFit, ReadsDispatchGapsAndSignalLatencies) {
  const Program program = four_tasks();
  const DeviceModel base{.name = "base", .workers = 2, .memory_gbs = 7, .flops = 1e12, .dispatch_ns = 999, .signal_ns = 999};
  // task, worker, start, end (ns)
  const std::vector<SimulatedTask> observed{{0, 0, 1000, 1100}, {1, 0, 1140, 1300}, {3, 1, 1000, 1050}, {2, 1, 1550, 1600}};
  const DeviceFit fit = fit_device(program, observed, 1, base);
  EXPECT_DOUBLE_EQ(fit.device.dispatch_ns, 40.0);
  EXPECT_DOUBLE_EQ(fit.device.signal_ns, 250.0);
  EXPECT_DOUBLE_EQ(fit.device.memory_gbs, 7.0);
  EXPECT_EQ(fit.dispatch_samples, 1u);
  EXPECT_EQ(fit.signal_samples, 1u);
  EXPECT_EQ(fit.streaming_tasks, 0u);
  EXPECT_DOUBLE_EQ(fit.observed_step_ns, 600.0);
}

TEST(TraceFit, RefusesATimelineThatDoesNotFitTheProgram) {
  const Program program = four_tasks();
  const DeviceModel base{.name = "base", .workers = 2, .memory_gbs = 1, .flops = 1};
  const std::vector<SimulatedTask> fits{{0, 0, 0, 1}, {1, 0, 1, 2}, {3, 1, 0, 1}, {2, 1, 2, 3}};
  EXPECT_NO_THROW(fit_device(program, fits, 1, base));
  std::vector<SimulatedTask> missing = fits;
  missing.pop_back();
  EXPECT_THROW(fit_device(program, missing, 1, base), InputError);
  // The last task changed one way each: a repeated task, one outside the program, an end before its
  // start, a worker the device does not have (the last one past any: one more wraps to 0, which crashed).
  const std::vector<void (*)(SimulatedTask&)> breakages{[](SimulatedTask& t) { t.task = 1; }, [](SimulatedTask& t) { t.task = 7; },
                                                        [](SimulatedTask& t) { t.end_ns = 1; }, [](SimulatedTask& t) { t.worker = 5; },
                                                        [](SimulatedTask& t) { t.worker = ~0u; }};
  for (size_t i = 0; i < breakages.size(); ++i) {
    std::vector<SimulatedTask> broken = fits;
    breakages[i](broken.back());
    EXPECT_THROW(fit_device(program, broken, 1, base), InputError) << "breakage " << i;
  }
}

// A timeline whose tasks all take no time gives no bandwidth: refused, where the base device's figure
// used to come back as the fitted one.
TEST(TraceFit, RefusesATimelineOfTasksThatTakeNoTime) {
  const Program program = tiny_decode_program(2);
  const DeviceModel device{.name = "known", .workers = 2, .memory_gbs = 50, .flops = 1e18, .dispatch_ns = 0, .signal_ns = 300};
  SimulationResult simulated = simulate_program(program, device, 64);
  EXPECT_NO_THROW(fit_device(program, simulated.timeline, 64, device));
  for (SimulatedTask& task : simulated.timeline) task.end_ns = task.start_ns;
  try {
    fit_device(program, simulated.timeline, 64, device);
    ADD_FAILURE() << "a timeline of tasks that take no time was fitted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("all take no time"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tilefire::testing
