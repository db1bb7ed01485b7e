#include "scheduler/policies/critical_path.h"

#include <algorithm>
#include <limits>
#include <string>

#include "scheduler/validator.h"

namespace tilefire {

void CriticalPathPolicy::place(Program& program, uint32_t workers) const {
  program.placement = Placement::static_queues;
  program.workers = workers;
  program.queues.assign(workers, {});
  const uint32_t n = uint32_t(program.tasks.size());
  const TaskGraph graph = task_graph(program);
  // The tasks in an order where each comes after every task it waits on (Kahn's): a compiled program's
  // ids are one, a hand-made program's need not be. Placement runs before the validator, so a cycle is
  // refused here.
  std::vector<uint32_t> order;
  order.reserve(n);
  std::vector<uint64_t> waiting(n);  // edges into the task (one per event and signaller)
  for (uint32_t t = 0; t < n; ++t)
    if ((waiting[t] = graph.predecessor_count(t)) == 0) order.push_back(t);
  for (size_t i = 0; i < order.size(); ++i)
    graph.for_each_successor(order[i], [&](uint32_t s) {
      if (--waiting[s] == 0) order.push_back(s);
    });
  if (order.size() < n)
    throw ProgramError("critical-path placement: " + std::to_string(n - order.size()) + " of the program's " + std::to_string(n) +
                       " tasks wait on one another in a cycle of events, so none of them can ever run");
  std::vector<double> cost(n), priority(n);
  for (uint32_t t = 0; t < n; ++t) cost[t] = estimated_task_cost(program, t);
  for (size_t i = n; i-- > 0;) {  // successors first
    const uint32_t t = order[i];
    double longest = 0;
    graph.for_each_successor(t, [&](uint32_t s) { longest = std::max(longest, priority[s]); });
    priority[t] = cost[t] + longest;
  }

  // The simulation: a task is released when all its predecessors are placed; its ready time is their
  // latest finish. The earliest-free worker takes, among released tasks ready by then, the one with the
  // highest priority; if none is ready yet, the one ready first.
  std::vector<uint64_t> unplaced_predecessors(n);  // edges into the task (one per event and signaller)
  std::vector<double> ready_at(n, 0.0), free_at(workers, 0.0);
  std::vector<uint32_t> released, newly_released;
  for (uint32_t t = 0; t < n; ++t) {
    unplaced_predecessors[t] = graph.predecessor_count(t);
    if (unplaced_predecessors[t] == 0) released.push_back(t);
  }
  for (uint32_t placed = 0; placed < n; ++placed) {
    const uint32_t w = uint32_t(std::min_element(free_at.begin(), free_at.end()) - free_at.begin());
    size_t pick = released.size();
    for (size_t i = 0; i < released.size(); ++i) {
      const uint32_t t = released[i];
      if (ready_at[t] > free_at[w]) continue;
      if (pick == released.size() || priority[t] > priority[released[pick]] ||
          (priority[t] == priority[released[pick]] && t < released[pick]))
        pick = i;
    }
    if (pick == released.size()) {  // nothing ready yet: the first to become ready
      double earliest = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < released.size(); ++i)
        if (ready_at[released[i]] < earliest) earliest = ready_at[released[i]], pick = i;
    }
    const uint32_t t = released[pick];
    released.erase(released.begin() + std::ptrdiff_t(pick));
    const double finish = std::max(free_at[w], ready_at[t]) + cost[t];
    free_at[w] = finish;
    program.queues[w].push_back(t);
    newly_released.clear();
    graph.for_each_successor(t, [&](uint32_t s) {
      ready_at[s] = std::max(ready_at[s], finish);
      if (--unplaced_predecessors[s] == 0) newly_released.push_back(s);
    });
    // In task order, as among equally ready tasks the first released is taken first.
    std::sort(newly_released.begin(), newly_released.end());
    released.insert(released.end(), newly_released.begin(), newly_released.end());
  }
}

}  // namespace tilefire
