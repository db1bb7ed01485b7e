#include "scheduler/policy.h"

#include "ops/all_ops.h"
#include "scheduler/policies/policy_list.h"

namespace tilefire {

std::vector<const PlacementPolicy*> all_policies() {
  static const std::vector<const PlacementPolicy*> policies = [] {
    std::vector<const PlacementPolicy*> list;
#define TILEFIRE_POLICY_PUSH(type) \
  {                                        \
    static const type policy;              \
    list.push_back(&policy);               \
  }
    TILEFIRE_POLICY_LIST(TILEFIRE_POLICY_PUSH)
#undef TILEFIRE_POLICY_PUSH
    return list;
  }();
  return policies;
}

const PlacementPolicy* find_policy(std::string_view name) {
  for (const PlacementPolicy* p : all_policies())
    if (p->name() == name) return p;
  return nullptr;
}

std::string policy_names() {
  std::string names;
  for (const PlacementPolicy* p : all_policies()) names += (names.empty() ? "" : ", ") + std::string(p->name());
  return names;
}

double estimated_task_cost(const Program& program, uint32_t task) {
  const TaskDesc& t = program.tasks[task];
  const WeightRanges ranges = task_weight_ranges(program, t);
  double bytes = 0;
  for (uint32_t i = 0; i < ranges.count; ++i) bytes += double(ranges.ranges[i].bytes);
  // Tiles that stream no weights (attention, embed) still cost their width in some unit; 4 KiB per unit
  // keeps them small next to a matmul tile without making them free.
  return bytes + 4096.0 * double(t.tile_end - t.tile_begin);
}

TaskGraph task_graph(const Program& program) {
  const uint32_t n = uint32_t(program.tasks.size());
  std::vector<std::vector<uint32_t>> signallers(program.events.size());
  for (uint32_t t = 0; t < n; ++t) {
    const TaskDesc& task = program.tasks[t];
    for (uint32_t i = 0; i < task.signal_count; ++i) signallers[program.signals[task.signal_begin + i]].push_back(t);
  }
  TaskGraph g;
  g.predecessors.resize(n);
  g.successors.resize(n);
  for (uint32_t t = 0; t < n; ++t) {
    const TaskDesc& task = program.tasks[t];
    for (uint32_t i = 0; i < task.wait_count; ++i)
      for (uint32_t s : signallers[program.waits[task.wait_begin + i]]) {
        g.predecessors[t].push_back(s);
        g.successors[s].push_back(t);
      }
  }
  return g;
}

}  // namespace tilefire
