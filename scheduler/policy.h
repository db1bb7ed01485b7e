#pragma once
// Placement policies: which worker runs which task, behind one interface that every executor (and the
// simulator to come) uses. A static policy fills Program::queues, one queue per worker in an order the
// validator proves deadlock-free; the dynamic policy leaves them empty and the executor hands out tasks
// as they become ready. A new policy is one class in scheduler/policies/ plus its include and its entry in
// scheduler/policies/policy_list.h; it then shows up in `--policy` and in the benchmarks.
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

// Dependencies between tasks, through events: who must finish before whom.
struct TaskGraph {
  std::vector<std::vector<uint32_t>> predecessors;  // per task, the tasks that signal what it waits on
  std::vector<std::vector<uint32_t>> successors;
};
TaskGraph task_graph(const Program& program);

// Estimated cost of a task, in bytes it streams (weights) plus a small fixed share for the rest, for the
// policies that weigh tasks. Relative, not a time.
double estimated_task_cost(const Program& program, uint32_t task);

}  // namespace tilefire
