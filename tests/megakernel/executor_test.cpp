// The CPU executor on hand-made programs: every task runs exactly once per step, never before the tasks
// it depends on have finished, across placements, schedules, worker counts and many steps.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "megakernel/cpu/cpu_executor.h"
#include "megakernel/rank_threads.h"
#include "ops/dtype.h"
#include "ops/noop.h"
#include "scheduler/policy.h"
#include "scheduler/validator.h"
#include "tests/common/step_checks.h"

namespace tilefire::testing {
namespace {

// A random layered DAG of noop tasks: `nodes` nodes of `width` tiles; each tile depends on a random subset
// of the previous node's tiles through per-tile events, or on all of them through the node's done event.
Program random_program(uint32_t nodes, uint32_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  Program p;
  std::vector<std::vector<uint32_t>> waits, signals;
  for (uint32_t n = 0; n < nodes; ++n) {
    NodeDesc node;
    node.params = OpParams::make(OpCode::noop, uint16_t(n), NoopParams{width});
    node.first_task = n * width;
    node.task_count = width;
    p.nodes.push_back(node);
    for (uint32_t i = 0; i < width; ++i) {
      TaskDesc t;
      t.op = OpCode::noop;
      t.layer = uint16_t(n);
      t.node = n;
      t.tile_begin = i;
      t.tile_end = i + 1;
      t.tile_index = i;
      p.tasks.push_back(t);
      waits.emplace_back();
      signals.emplace_back();
    }
  }
  for (uint32_t n = 1; n < nodes; ++n) {
    const bool whole_node = rng() % 3 == 0;
    uint32_t done = 0;
    if (whole_node) {
      p.events.push_back({width});
      done = uint32_t(p.events.size() - 1);
      for (uint32_t i = 0; i < width; ++i) signals[(n - 1) * width + i].push_back(done);
    }
    std::vector<uint32_t> tile_event(width, kNoSlot);
    for (uint32_t i = 0; i < width; ++i) {
      const uint32_t task = n * width + i;
      if (whole_node) {
        waits[task].push_back(done);
        continue;
      }
      for (uint32_t j = 0; j < width; ++j) {
        if (rng() % 3 != 0 && j != i) continue;
        if (tile_event[j] == kNoSlot) {
          p.events.push_back({1});
          tile_event[j] = uint32_t(p.events.size() - 1);
          signals[(n - 1) * width + j].push_back(tile_event[j]);
        }
        waits[task].push_back(tile_event[j]);
      }
    }
  }
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    p.tasks[t].wait_begin = uint32_t(p.waits.size());
    p.tasks[t].wait_count = uint16_t(waits[t].size());
    p.waits.insert(p.waits.end(), waits[t].begin(), waits[t].end());
    p.tasks[t].signal_begin = uint32_t(p.signals.size());
    p.tasks[t].signal_count = uint16_t(signals[t].size());
    p.signals.insert(p.signals.end(), signals[t].begin(), signals[t].end());
  }
  return p;
}

TEST(CpuExecutor, RunsEveryTaskOnceAfterItsProducers) {
  for (uint32_t workers : {1u, 2u, 4u, 7u}) {
    CpuExecutor executor(workers);
    for (uint32_t seed = 0; seed < 3; ++seed) {
      for (const PlacementPolicy* policy : all_policies()) {
        Program p = random_program(6, 5, seed);
        policy->place(p, workers);
        validate_program(p);
        ProgramInstance instance(p, {});
        StepInputs inputs;
        for (uint32_t step = 0; step < 6; ++step) {
          const ScheduleMode mode = step % 3 == 2 ? ScheduleMode::bsp : ScheduleMode::dataflow;
          std::vector<TaskTiming> timings;
          StepOptions options;
          options.mode = mode;
          options.trace = &timings;
          executor.run_step(instance, inputs, options);
          check_step(p, timings, mode,
                     std::to_string(workers) + " workers, seed " + std::to_string(seed) + ", step " + std::to_string(step));
        }
        EXPECT_EQ(instance.steps_run(), 6u);
      }
    }
  }
}

TEST(CpuExecutor, ManyStepsWithRandomDelaysStayOrdered) {
  CpuExecutor executor(3);
  for (const char* name : {"dynamic", "critical-path"}) {
    Program p = random_program(4, 6, 42);
    find_policy(name)->place(p, 3);
    ProgramInstance instance(p, {});
    StepInputs inputs;
    for (uint32_t step = 0; step < 120; ++step) {  // every step traced and checked, most of them delayed
      std::vector<TaskTiming> timings;
      StepOptions options;
      options.mode = step % 5 == 4 ? ScheduleMode::bsp : ScheduleMode::dataflow;
      options.trace = &timings;
      options.max_random_delay_us = step % 3 ? 5 : 0;
      options.delay_seed = step;
      executor.run_step(instance, inputs, options);
      check_step(p, timings, options.mode, "step " + std::to_string(step));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(CpuExecutor, RefusesAProgramPlacedForAnotherWorkerCount) {
  CpuExecutor executor(2);
  Program p = random_program(2, 3, 1);
  find_policy("balanced")->place(p, 3);
  ProgramInstance instance(p, {});
  StepInputs inputs;
  for (ScheduleMode mode : {ScheduleMode::dataflow, ScheduleMode::bsp}) {
    StepOptions options;
    options.mode = mode;
    EXPECT_THROW(executor.run_step(instance, inputs, options), std::runtime_error);
  }
}

// A tile that throws stops the step on every worker, whichever worker it ran on (worker 0 is the caller's
// thread, the others are pool threads): run_step rethrows that error instead of hanging, the instance
// refuses further steps, and the executor runs a fresh instance of the program to the end.
TEST(CpuExecutor, AThrowingTileEndsTheStepWithItsError) {
  for (uint32_t failing_worker : {0u, 1u}) {
    for (ScheduleMode mode : {ScheduleMode::dataflow, ScheduleMode::bsp}) {
      CpuExecutor executor(2);
      Program p = random_program(4, 3, 11);
      find_policy("balanced")->place(p, 2);
      ASSERT_FALSE(p.queues[failing_worker].empty());
      const uint32_t task = p.queues[failing_worker][p.queues[failing_worker].size() / 2];
      StepOptions failing;
      failing.mode = mode;
      failing.fail_task = task;
      ProgramInstance instance(p, {});
      StepInputs inputs;
      try {
        executor.run_step(instance, inputs, failing);
        ADD_FAILURE() << "the step did not throw";
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("task " + std::to_string(task) + " failed"), std::string::npos) << e.what();
      }
      EXPECT_THROW(executor.run_step(instance, inputs, StepOptions{}), std::runtime_error);
      ProgramInstance fresh(p, {});
      std::vector<TaskTiming> timings;
      StepOptions traced;
      traced.mode = mode;
      traced.trace = &timings;
      executor.run_step(fresh, inputs, traced);
      EXPECT_EQ(timings.size(), p.tasks.size()) << "worker " << failing_worker;
    }
  }
}

// The cpu device's calibration program (matrix_chain_program): matrices of different shapes, each node's
// tiles waiting on the node before and signalling their own, tiles of about the bytes asked for in
// whole rounds of the workers; run by the executor, every node's output is the RMS-normed input of the
// node before times its matrix (computed here in double).
TEST(CpuExecutor, MatrixChainProgramRunsTheChain) {
  const std::vector<ChainMatrix> matrices{{96, 64}, {40, 96}, {64, 40}};  // node n + 1 reads node n's first cols
  const uint32_t width = 96;
  const Program p = matrix_chain_program(matrices, 64 * 16 * 2, 2, DType::bf16);  // tiles of about 16 rows of 64
  ASSERT_EQ(p.nodes.size(), matrices.size());
  EXPECT_EQ(p.nodes[0].task_count, 6u);  // 96 rows of 64 bf16: 6 tiles of 16 rows
  EXPECT_EQ(p.nodes[1].task_count, 4u);  // 40 rows of 96: 3.75 tiles' worth, so two whole rounds of 2
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const TaskDesc& task = p.tasks[t];
    EXPECT_EQ(task.wait_count, task.node == 0 ? 0 : 1) << t;
    if (task.wait_count) {
      EXPECT_EQ(p.waits[task.wait_begin], task.node - 1) << t;
    }
    EXPECT_EQ(p.signals[task.signal_begin], task.node) << t;
  }
  EXPECT_EQ(p.queues[0].size(), p.queues[1].size());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> norm(width), activations(size_t(matrices.size() + 1) * width, std::nanf(""));
  std::vector<std::vector<uint16_t>> weights;
  for (uint32_t k = 0; k < width; ++k) activations[k] = uniform(rng);
  for (float& v : norm) v = 0.5f + uniform(rng) * 0.25f;
  for (const ChainMatrix& m : matrices) {
    weights.emplace_back(size_t(m.rows) * m.cols);
    for (uint16_t& w : weights.back()) w = f32_to_bf16(uniform(rng));
  }
  std::vector<void*> slots{norm.data()};
  for (uint32_t a = 0; a <= matrices.size(); ++a) slots.push_back(activations.data() + size_t(a) * width);
  for (auto& w : weights) slots.push_back(w.data());
  CpuExecutor executor(2);
  ProgramInstance instance(p, slots);
  const int32_t token = 0;
  executor.run_step(instance, StepInputs{&token, 1, 0}, StepOptions{});
  for (uint32_t n = 0; n < matrices.size(); ++n) {
    const ChainMatrix& m = matrices[n];
    const float* x = activations.data() + size_t(n) * width;  // the node's input as computed
    double sum_squares = 0;
    for (uint32_t k = 0; k < m.cols; ++k) sum_squares += double(x[k]) * x[k];
    const double inverse_rms = 1.0 / std::sqrt(sum_squares / m.cols + 1e-5);
    for (uint32_t r = 0; r < m.rows; ++r) {
      double expected = 0;
      for (uint32_t k = 0; k < m.cols; ++k) expected += double(x[k]) * inverse_rms * norm[k] * bf16_to_f32(weights[n][size_t(r) * m.cols + k]);
      const float got = activations[size_t(n + 1) * width + r];
      ASSERT_FALSE(std::isnan(got)) << "node " << n << " row " << r << " was not written";
      ASSERT_NEAR(got, expected, 1e-3 * (1.0 + std::abs(expected))) << "node " << n << " row " << r;
    }
  }
}

// A chain within one node (scheduler/program.h's noop_program) runs as dataflow; bsp, which runs a node's
// tiles at once and waits on no event, would run them out of order: the step is refused, naming the edge,
// and the instance runs on.
TEST(CpuExecutor, RefusesABspStepThatWouldRunATaskBeforeItsInput) {
  CpuExecutor executor(2);
  const Program chain = noop_program(6, true, 2);
  validate_program(chain);
  ProgramInstance instance(chain, {});
  StepInputs inputs;
  StepOptions bsp;
  bsp.mode = ScheduleMode::bsp;
  try {
    executor.run_step(instance, inputs, bsp);
    ADD_FAILURE() << "the bsp step ran";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run as bsp: noop layer 0 tile [1, 2) (task 1) waits on event 0"), std::string::npos)
        << e.what();
  }
  std::vector<TaskTiming> timings;
  StepOptions dataflow;
  dataflow.trace = &timings;
  executor.run_step(instance, inputs, dataflow);
  check_step(chain, timings, ScheduleMode::dataflow, "dataflow after the refused bsp step");
}

// A queue may interleave nodes (critical-path does); bsp regroups each worker's tasks node by node.
TEST(CpuExecutor, BspRegroupsQueuesThatInterleaveNodes) {
  CpuExecutor executor(1);
  Program p = random_program(2, 2, 3);
  p.placement = Placement::static_queues;
  p.workers = 1;
  p.queues = {{0, 2, 1, 3}};  // node 1's tile before node 0's second tile: bsp must still go node by node
  ProgramInstance instance(p, {});
  StepInputs inputs;
  std::vector<TaskTiming> timings;
  StepOptions options;
  options.mode = ScheduleMode::bsp;
  options.trace = &timings;
  executor.run_step(instance, inputs, options);
  check_step(p, timings, ScheduleMode::bsp, "bsp");
}

// The rank threads of a tensor-parallel engine: every step runs each rank's job exactly once, and what a
// rank thread wrote is visible to the caller when run returns (plain memory: ThreadSanitizer checks the
// hand-off in the TSan build); uneven job lengths, many steps, destruction while parked.
TEST(RankThreads, EachStepRunsEveryRankOnceAndPublishesItsWrites) {
  for (uint32_t ranks : {1u, 2u, 5u}) {
    RankThreads threads(ranks);
    std::vector<uint64_t> runs(ranks, 0), values(ranks, 0);
    for (uint32_t step = 1; step <= 300; ++step) {
      threads.run([&](uint32_t r) {
        volatile uint32_t spin = 0;
        for (uint32_t i = 0; i < (step * 7919u + r * 104729u) % 2000; ++i) spin = spin + 1;
        ++runs[r];
        values[r] = uint64_t(step) * 1000 + r;
      });
      for (uint32_t r = 0; r < ranks; ++r) {
        ASSERT_EQ(runs[r], step) << ranks << " ranks, rank " << r;
        ASSERT_EQ(values[r], uint64_t(step) * 1000 + r);
      }
    }
  }
}

}  // namespace
}  // namespace tilefire::testing
