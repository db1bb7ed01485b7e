// The simulator on hand-made programs whose best makespan is known (a chain, independent tasks, a
// fork-join), for every placement policy; bsp against dataflow; the waiting time that hides weights.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/noop.h"
#include "scheduler/policy.h"
#include "scheduler/simulator.h"
#include "scheduler/validator.h"

namespace tilefire::testing {
namespace {

// Noop tasks, one node per entry of `node_tasks`; task t of node n waits on the done event of every node
// in `depends[n]`. Events: one per node, signalled by all its tasks. A task of node n is `widths[n]`
// units wide (1 when not given), which is what the policies' estimated cost counts.
Program layered_program(const std::vector<uint32_t>& node_tasks, const std::vector<std::vector<uint32_t>>& depends,
                        const std::vector<uint32_t>& widths = {}) {
  Program p;
  for (uint32_t n = 0; n < node_tasks.size(); ++n) {
    const uint32_t width = n < widths.size() ? widths[n] : 1;
    NodeDesc node{OpParams::make(OpCode::noop, 0, NoopParams{node_tasks[n] * width}), uint32_t(p.tasks.size()), node_tasks[n], n};
    p.events.push_back({node_tasks[n]});
    for (uint32_t i = 0; i < node_tasks[n]; ++i) {
      TaskDesc t;
      t.op = OpCode::noop;
      t.node = n;
      t.tile_begin = i * width;
      t.tile_end = (i + 1) * width;
      t.tile_index = i;
      t.wait_begin = uint32_t(p.waits.size());
      for (uint32_t d : depends[n]) p.waits.push_back(d);
      t.wait_count = uint16_t(depends[n].size());
      t.signal_begin = uint32_t(p.signals.size());
      p.signals.push_back(n);
      t.signal_count = 1;
      p.tasks.push_back(t);
    }
    p.nodes.push_back(node);
  }
  return p;
}

double makespan(Program p, const std::string& policy, uint32_t workers, const std::vector<double>& times, double signal) {
  find_policy(policy)->place(p, workers);
  return simulate_with_times(p, times, std::vector<double>(times.size(), 0.0), signal).step_ns;
}

TEST(Simulator, ChainTakesTheSumOfItsTasksAndSignals) {
  // 6 single-task nodes, each waiting for the previous: sum of times plus 5 signal latencies.
  std::vector<std::vector<uint32_t>> depends{{}};
  for (uint32_t n = 1; n < 6; ++n) depends.push_back({n - 1});
  const Program chain = layered_program(std::vector<uint32_t>(6, 1), depends);
  const std::vector<double> times{10, 20, 30, 40, 50, 60};
  for (const PlacementPolicy* policy : all_policies())
    EXPECT_DOUBLE_EQ(makespan(chain, std::string(policy->name()), 3, times, 5), 210 + 5 * 5) << policy->name();
}

TEST(Simulator, IndependentTasksFillTheWorkersEvenly) {
  // 12 equal tasks on 4 workers: 3 rounds.
  const Program independent = layered_program({12}, {{}});
  for (const PlacementPolicy* policy : all_policies())
    EXPECT_DOUBLE_EQ(makespan(independent, std::string(policy->name()), 4, std::vector<double>(12, 100), 7), 300)
        << policy->name();
}

TEST(Simulator, ForkJoinOverAsManyWorkersAsBranches) {
  // A (10) -> 4 branches (100 each) -> C (10), on 4 workers: 10 + s + 100 + s + 10 at best.
  const Program fork_join = layered_program({1, 4, 1}, {{}, {0}, {1}});
  std::vector<double> times{10, 100, 100, 100, 100, 10};
  for (const PlacementPolicy* policy : all_policies())
    EXPECT_DOUBLE_EQ(makespan(fork_join, std::string(policy->name()), 4, times, 5), 130) << policy->name();
}

// More tasks than workers, of two widths: four short tasks (50) beside a chain of two long ones (100
// each), on 2 workers. At best one worker runs the chain (200 + a signal) while the other runs the short
// tasks (200): critical-path finds that. A placement that leaves the chain's second task behind short
// ones (round-robin: tasks 0, 2, 4 and 1, 3, 5) takes a whole task longer.
TEST(Simulator, CriticalPathRunsTheLongestChainFirst) {
  const Program p = layered_program({4, 1, 1}, {{}, {}, {1}}, {1, 2, 2});  // estimated costs 1:2:2, as the times
  const std::vector<double> times{50, 50, 50, 50, 100, 100};
  EXPECT_DOUBLE_EQ(makespan(p, "critical-path", 2, times, 5), 200 + 5);
  EXPECT_DOUBLE_EQ(makespan(p, "round-robin", 2, times, 5), 200 + 5 + 100);
}

// A chain of one-task nodes: locality keeps each task on the worker that ran the task it waits on, however
// few tasks a node has beside the workers.
TEST(Simulator, LocalityKeepsAChainOnOneWorker) {
  std::vector<std::vector<uint32_t>> depends{{}};
  for (uint32_t n = 1; n < 6; ++n) depends.push_back({n - 1});
  Program chain = layered_program(std::vector<uint32_t>(6, 1), depends);
  find_policy("locality")->place(chain, 3);
  ASSERT_EQ(chain.queues.size(), 3u);
  EXPECT_EQ(chain.queues[0], (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  // Two consumers of one producer: the first beside it, the second on another worker (the node's share).
  Program fork = layered_program({1, 2}, {{}, {0}});
  find_policy("locality")->place(fork, 2);
  EXPECT_EQ(fork.queues[0], (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(fork.queues[1], (std::vector<uint32_t>{2}));
}

// Placement runs before the validator: a cycle of events is refused by name, not simulated forever.
TEST(Simulator, CriticalPathRefusesACycle) {
  Program cycle = layered_program({1, 1, 1}, {{}, {2}, {1}});
  try {
    find_policy("critical-path")->place(cycle, 2);
    FAIL() << "placed a program whose tasks 1 and 2 wait on each other";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("2 of the program's 3 tasks wait on one another in a cycle"), std::string::npos) << e.what();
  }
}

TEST(Simulator, BulkSynchronousAddsABarrierPerNodeAndWaitingHidesWeights) {
  const Program p = layered_program({4, 4}, {{}, {0}});
  Program placed = p;
  find_policy("round-robin")->place(placed, 8);  // node 0 on workers 0-3, node 1 on workers 4-7
  const std::vector<double> times{100, 100, 100, 100, 50, 50, 50, 50};
  EXPECT_DOUBLE_EQ(simulate_with_times(placed, times, std::vector<double>(8, 0.0), 3).step_ns, 153);
  SimulationOptions bsp;
  bsp.bsp = true;
  EXPECT_DOUBLE_EQ(simulate_with_times(placed, times, std::vector<double>(8, 0.0), 3, bsp).step_ns, 153);
  // Workers 4-7 wait 100 + 3 for their inputs, streaming the weights meanwhile: 40 of each 50 hidden.
  std::vector<double> weights{0, 0, 0, 0, 40, 40, 40, 40};
  EXPECT_DOUBLE_EQ(simulate_with_times(placed, times, weights, 3).step_ns, 100 + 3 + 10);
}

// Worker 0 runs node 1's three tasks (40 each, 30 of it weights) after waiting 100 for node 0's task on
// worker 1. What the wait fetches ahead depends on the prefetch's bounds.
TEST(Simulator, APrefetchOverTheQueueFetchesAheadWithinItsBounds) {
  Program p = layered_program({1, 3}, {{}, {0}});
  p.placement = Placement::static_queues;
  p.queues = {{1, 2, 3}, {0}};
  p.workers = 2;
  const std::vector<double> times{100, 40, 40, 40}, weights{0, 30, 30, 30};
  auto step = [&](uint32_t tasks, double held_ns) {
    SimulationOptions options;
    options.prefetch_tasks = tasks;
    options.prefetch_held_ns = held_ns;
    return simulate_with_times(p, times, weights, 0, options).step_ns;
  };
  const double unbounded = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(step(1, unbounded), 100 + 10 + 40 + 40);  // the next task's weights only (the default)
  EXPECT_DOUBLE_EQ(step(2, unbounded), 100 + 10 + 10 + 40);
  EXPECT_DOUBLE_EQ(step(0, unbounded), 100 + 10 + 10 + 10);  // the whole queue
  EXPECT_DOUBLE_EQ(step(0, 50), 100 + 10 + 20 + 40);         // 30 for the first, the 20 left for the second
  EXPECT_DOUBLE_EQ(step(1, 20), 100 + 20 + 40 + 40);
}

// Two waits: what the first fetched for a later task still counts against the bound in the second.
// Worker 0 runs A (waits for X), B (waits for Y), C; worker 1 runs X then Y, 100 each. Bound 50.
TEST(Simulator, WhatAnEarlierWaitFetchedStaysWithinTheBound) {
  Program p = layered_program({1, 1, 1, 1, 1}, {{}, {0}, {}, {2}, {}});  // X, A, Y, B, C
  p.placement = Placement::static_queues;
  p.queues = {{1, 3, 4}, {0, 2}};
  p.workers = 2;
  const std::vector<double> times{100, 40, 100, 40, 40}, weights{0, 30, 0, 30, 30};
  SimulationOptions options;
  options.prefetch_tasks = 0;
  options.prefetch_held_ns = 50;
  // Waiting 100 for A: 30 for A, 20 for B. A 100-110. Waiting 110-200 for B: 20 are held already, so
  // 10 more for B and 20 for C. B 200-210, C 210-230.
  EXPECT_DOUBLE_EQ(simulate_with_times(p, times, weights, 0, options).step_ns, 230);
}

// Taken from the dynamic queue, a task is known to its worker only once it is ready: nothing is fetched.
TEST(Simulator, NothingIsFetchedForTheDynamicQueue) {
  Program p = layered_program({1, 1}, {{}, {0}});
  find_policy("dynamic")->place(p, 2);
  const std::vector<double> times{100, 40}, weights{0, 30};
  EXPECT_DOUBLE_EQ(simulate_with_times(p, times, weights, 0).step_ns, 140);
}

// bsp: a worker done early with a node fetches its next node's weights before the barrier only when the
// prefetch walks the queue without waiting for anything (the cuda kernel's producer).
TEST(Simulator, OnlyAQueueWalkingPrefetchRunsAheadOfBarriers) {
  Program p = layered_program({2, 2}, {{}, {0}});
  p.placement = Placement::static_queues;
  p.queues = {{2, 0}, {1, 3}};  // out of node order: bsp runs a worker's tiles node by node, as the executors do
  p.workers = 2;
  const std::vector<double> times{100, 20, 40, 40}, weights{0, 0, 30, 30};
  SimulationOptions bsp;
  bsp.bsp = true;
  EXPECT_DOUBLE_EQ(simulate_with_times(p, times, weights, 3, bsp).step_ns, 103 + 40);
  bsp.prefetch_tasks = 0;
  // Worker 1 waits 83 and fetches all 30 (its tile ends at 113); worker 0 waits 3 and fetches 3 (140).
  EXPECT_DOUBLE_EQ(simulate_with_times(p, times, weights, 3, bsp).step_ns, 103 + 37);
}

// Two workers, a stall of 10 every 100: worker 0's stalls are [25, 35) + 100k, worker 1's [75, 85) + 100k.
TEST(Simulator, StallsTakeTimeFromTheirWorkerAtItsOwnPhase) {
  const StallSchedule stalls{.stall_ns = 10, .every_ns = 100, .workers = 2};
  EXPECT_DOUBLE_EQ(stalls.finish(0, 0, 20), 20);    // done before the first stall
  EXPECT_DOUBLE_EQ(stalls.finish(0, 0, 30), 40);    // 25, the stall, 5 more
  EXPECT_DOUBLE_EQ(stalls.finish(0, 30, 10), 45);   // starts inside the stall: at its end
  EXPECT_DOUBLE_EQ(stalls.finish(0, 0, 115), 125);  // ends as the second stall starts
  EXPECT_DOUBLE_EQ(stalls.finish(0, 0, 250), 280);  // 25 + 90 + 90 + 45 of work, three stalls
  EXPECT_DOUBLE_EQ(stalls.finish(1, 0, 100), 110);  // the other worker's phase: one stall, at 75
  EXPECT_DOUBLE_EQ(stalls.stalled(0, 0, 300), 30);
  EXPECT_DOUBLE_EQ(stalls.stalled(0, 30, 130), 10);  // the end of one stall and the start of the next
  EXPECT_DOUBLE_EQ(stalls.stalled(1, 0, 80), 5);
  EXPECT_DOUBLE_EQ(stalls.stalled(1, 80, 80), 0);
  // Whatever the start and the work, the time it takes is the work and the stalls met on the way.
  for (uint32_t worker : {0u, 1u})
    for (double start = 0; start < 400; start += 7.25)
      for (double work = 0.5; work < 700; work += 13.5) {
        const double end = stalls.finish(worker, start, work);
        EXPECT_NEAR(end - start, work + stalls.stalled(worker, start, end), 1e-9) << worker << " " << start << " " << work;
      }
  // No stalls when either figure is 0.
  EXPECT_DOUBLE_EQ((StallSchedule{.stall_ns = 10, .every_ns = 0, .workers = 2}).finish(0, 0, 500), 500);
  EXPECT_DOUBLE_EQ((StallSchedule{.stall_ns = 0, .every_ns = 100, .workers = 2}).stalled(0, 0, 500), 0);
  // Work resumes at a stall's end.
  EXPECT_DOUBLE_EQ(stalls.resume(0, 30), 35);
  EXPECT_DOUBLE_EQ(stalls.resume(0, 35), 35);
  EXPECT_DOUBLE_EQ(stalls.resume(1, 30), 30);
  // The figures the closed forms hold for.
  EXPECT_TRUE(stalls.valid());
  EXPECT_TRUE((StallSchedule{.stall_ns = 0, .every_ns = 0, .workers = 2}).valid());
  EXPECT_FALSE((StallSchedule{.stall_ns = 99.5, .every_ns = 100, .workers = 2}).valid());   // under 1% left to work
  EXPECT_FALSE((StallSchedule{.stall_ns = 1e-310, .every_ns = 3e-310, .workers = 2}).valid());  // a period under 1 ns
  EXPECT_FALSE((StallSchedule{.stall_ns = 10, .every_ns = std::numeric_limits<double>::infinity(), .workers = 2}).valid());
  EXPECT_FALSE((StallSchedule{.stall_ns = std::nan(""), .every_ns = 100, .workers = 2}).valid());
}

// A stall delays its own worker, and every worker that waits on its tiles: A (50, worker 0) then B (50,
// worker 1, waiting on A) meet one stall each, 20 more than without. A device whose stall is not shorter
// than the time between two is refused.
TEST(Simulator, AStallAlsoDelaysTheWorkersThatWaitOnIt) {
  Program p = layered_program({1, 1}, {{}, {0}});
  p.placement = Placement::static_queues;
  p.queues = {{0}, {1}};
  p.workers = 2;
  const std::vector<double> times{50, 50}, weights{0, 0};
  EXPECT_DOUBLE_EQ(simulate_with_times(p, times, weights, 0).step_ns, 100);
  SimulationOptions stalled;
  stalled.stall_ns = 10;
  stalled.stall_every_ns = 100;
  // A: 0-25, stalled to 35, ends 60. B on worker 1: 60-75, stalled to 85, ends 120.
  EXPECT_DOUBLE_EQ(simulate_with_times(p, times, weights, 0, stalled).step_ns, 120);
  // B's input ready inside worker 1's stall (signal 20: at 80): B starts at its end, 85, and ends 135.
  const SimulationResult late = simulate_with_times(p, times, weights, 20, stalled);
  ASSERT_EQ(late.timeline.size(), 2u);
  EXPECT_DOUBLE_EQ(late.timeline[1].start_ns, 85);
  EXPECT_DOUBLE_EQ(late.step_ns, 135);
  stalled.stall_ns = 100;
  EXPECT_THROW(simulate_with_times(p, times, weights, 0, stalled), std::invalid_argument);
}

// Workers that are not alike: a task on worker w takes its time over that worker's speed. Four equal
// tasks of 90, two per worker: the fast worker (1.5) ends at 120, the slow one (0.5) at 360.
TEST(Simulator, ASlowerWorkerTakesLongerForTheSameTasks) {
  Program p = layered_program({4}, {{}});
  p.placement = Placement::static_queues;
  p.queues = {{0, 1}, {2, 3}};
  p.workers = 2;
  const std::vector<double> times(4, 90.0), weights(4, 0.0);
  SimulationOptions unequal;
  unequal.worker_speed = {1.5, 0.5};
  const SimulationResult r = simulate_with_times(p, times, weights, 0, unequal);
  EXPECT_DOUBLE_EQ(r.step_ns, 360);
  EXPECT_DOUBLE_EQ(r.busy_ns[0], 120);
  EXPECT_DOUBLE_EQ(r.busy_ns[1], 360);
  unequal.worker_speed = {1.0};  // not one per worker
  EXPECT_THROW(simulate_with_times(p, times, weights, 0, unequal), std::invalid_argument);
  unequal.worker_speed = {1.0, 0.0};
  EXPECT_THROW(simulate_with_times(p, times, weights, 0, unequal), std::invalid_argument);
}

}  // namespace
}  // namespace tilefire::testing
