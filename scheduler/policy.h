#pragma once
// Placement policies: which worker runs which task, behind one interface that every executor and the
// simulator use. A static policy fills Program::queues, one queue per worker in an order the
// validator proves deadlock-free; the dynamic policy leaves them empty and the executor hands out tasks
// as they become ready. A new policy is one class in scheduler/policies/ plus its include and its entry in
// scheduler/policies/policy_list.h; it then shows up in `--policy`, in every command's --help, in
// `simulate --list-policies` (which the scripts that tabulate policies read) and in the tests that run
// every policy.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/program.h"

namespace tilefire {

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string_view name() const = 0;         // as --policy spells it
  virtual std::string_view description() const = 0;  // one line, for --help
  // Sets program.placement, program.workers and (static) program.queues.
  virtual void place(Program& program, uint32_t workers) const = 0;
};

constexpr std::string_view kDefaultPolicy = "balanced";

// nullptr when no policy has this name.
const PlacementPolicy* find_policy(std::string_view name);
std::vector<const PlacementPolicy*> all_policies();
// "round-robin, balanced, ..." for messages.
std::string policy_names();

// Dependencies between tasks, through events: who must finish before whom. Kept per event (its
// signallers and its waiters), not as task-to-task edges: an event with S signallers and W waiters is
// S x W edges, which after an all-to-all boundary grows with the square of the worker count (a Llama
// 3.1 405B program for 4,096 workers took 8 GB as edge lists).
struct TaskGraph {
  const Program* program = nullptr;
  // Per event e: signallers[signaller_begin[e] .. signaller_begin[e + 1]) in ascending task order, and
  // the same for waiters.
  std::vector<uint32_t> signaller_begin, signallers, waiter_begin, waiters;

  // f(p) for each task p that signals an event task t waits on: t's waits in order, each event's
  // signallers ascending; p appears once per (event, signal) it shares with t.
  template <class F>
  void for_each_predecessor(uint32_t t, F&& f) const {
    const TaskDesc& task = program->tasks[t];
    across(program->waits, task.wait_begin, task.wait_count, signaller_begin, signallers, f);
  }
  // f(s) for each task s that waits on an event task t signals, by event, with the same multiplicity.
  template <class F>
  void for_each_successor(uint32_t t, F&& f) const {
    const TaskDesc& task = program->tasks[t];
    across(program->signals, task.signal_begin, task.signal_count, waiter_begin, waiters, f);
  }
  // The number of f calls for_each_predecessor(t, f) makes.
  uint64_t predecessor_count(uint32_t t) const;

 private:
  // f(task) for the tasks listed, per event, under each of the `count` events at events[begin ..].
  template <class F>
  static void across(const std::vector<uint32_t>& events, uint32_t begin, uint32_t count, const std::vector<uint32_t>& first,
                     const std::vector<uint32_t>& tasks, F& f) {
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t e = events[begin + i];
      for (uint32_t k = first[e]; k < first[e + 1]; ++k) f(tasks[k]);
    }
  }
};
// The graph refers to `program`, which must outlive it.
TaskGraph task_graph(const Program& program);

// Estimated cost of a task, in bytes it streams (weights) plus a small fixed share for the rest, for the
// policies that weigh tasks. Relative, not a time.
double estimated_task_cost(const Program& program, uint32_t task);

}  // namespace tilefire
