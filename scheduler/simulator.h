#pragma once
// A discrete-event simulator of the megakernel (issue 5; docs/SIMULATOR.md): it runs a Program's placement
// on a modelled device. Each worker takes the tasks of its static queue in order (or, for a dynamically
// placed program, the earliest-ready task); a task starts when its worker is free and every event it waits
// on has fired (its last signal plus the device's signal latency), and takes its modelled time, longer
// by the stalls its worker has meanwhile when the device has them (time the machine takes away). While a
// worker waits for a task's inputs it streams weights, as the executors' prefetch does: the task's own
// first, then (with a lookahead of several tasks) its queue's next tasks', as far as the prefetch holds;
// a task runs shorter by the weight time fetched ahead for it. bsp runs the same tiles node by node with
// a barrier between.
#include <cstdint>
#include <limits>
#include <vector>

#include "scheduler/cost_model.h"
#include "scheduler/program.h"

namespace tilefire {

struct SimulatedTask {
  uint32_t task = 0, worker = 0;
  double start_ns = 0, end_ns = 0;
};

// Stalls as the simulator places them (DeviceModel::stall_ns, stall_every_ns): worker w of `workers`
// loses [phase_w + k * every, phase_w + k * every + stall) for every whole k, phase_w = every * (w + 1/2) /
// workers, so the workers' stalls are spread evenly over a period. No stalls when either figure is 0.
struct StallSchedule {
  double stall_ns = 0, every_ns = 0;
  uint32_t workers = 1;

  bool any() const { return stall_ns > 0 && every_ns > 0; }
  // Figures the closed forms hold for: none, or a period of at least 1 ns with at least 1% of it left to
  // work (finite; a device file's are checked against the same).
  bool valid() const;
  // The first time from `at` on that `worker` is not stalled.
  double resume(uint32_t worker, double at) const;
  // When `work` ns that `worker` starts at `start` end, its stalls skipped (one that would start inside a
  // stall starts at its end).
  double finish(uint32_t worker, double start, double work) const;
  // The part of [from, to) that `worker` spends stalled.
  double stalled(uint32_t worker, double from, double to) const;
};

struct SimulationResult {
  double step_ns = 0;               // the last task's end
  std::vector<double> busy_ns;      // per worker: time running tasks
  double idle_share = 0;            // 1 - mean busy / step
  std::vector<SimulatedTask> timeline;  // every task, in start order per worker
};

struct SimulationOptions {
  bool bsp = false;
  bool prefetch_while_waiting = true;
  // The prefetch's bounds (DeviceModel::prefetch_tasks and prefetch_bytes, the bytes as the weight time
  // they take a worker): how many upcoming tasks it covers (0: every task left in the worker's queue),
  // and how much weight time it holds at once.
  uint32_t prefetch_tasks = 1;
  double prefetch_held_ns = std::numeric_limits<double>::infinity();
  uint32_t sequences = 1;  // the step's tokens are decode tokens of this many sequences (task_work)
  // Stalls (DeviceModel::stall_ns, stall_every_ns; 0: none): worker w of W loses [phase + k * every,
  // phase + k * every + stall) for every k, phase = every * (w + 1/2) / W. A task's work runs only
  // outside them, and one that would start inside one starts at its end.
  double stall_ns = 0;
  double stall_every_ns = 0;
  // Per worker, its speed (DeviceModel::worker_speed; empty: all 1): a task on worker w takes its time
  // over worker_speed[w], and a wait there fetches that much more or less ahead.
  std::vector<double> worker_speed;
};

// Task times from the cost model (`context` positions in the KV cache).
SimulationResult simulate_program(const Program& program, const DeviceModel& device, uint32_t context,
                                  const SimulationOptions& options = {});

// The same with given task times (hand-made programs in tests, or another cost model). `weight_ns[t]` is
// the part of task t that waiting can hide (0: none): its weights' streaming time.
SimulationResult simulate_with_times(const Program& program, const std::vector<double>& task_ns,
                                     const std::vector<double>& weight_ns, double signal_ns,
                                     const SimulationOptions& options = {});

}  // namespace tilefire
