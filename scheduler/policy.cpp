#include "scheduler/policy.h"

#include <stdexcept>
#include <string>

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

namespace {

// Per event, the tasks that name it in their `count`/`begin` lists (signals or waits), ascending: a
// counting sort into one array.
void index_by_event(const Program& program, uint32_t TaskDesc::*begin, uint16_t TaskDesc::*count,
                    const std::vector<uint32_t>& ids, std::vector<uint32_t>& first, std::vector<uint32_t>& tasks) {
  first.assign(program.events.size() + 1, 0);
  for (const TaskDesc& task : program.tasks)
    for (uint32_t i = 0; i < task.*count; ++i) {
      const uint32_t e = ids.at(task.*begin + i);  // placement runs before the validator: check here
      if (e >= program.events.size()) throw std::runtime_error("task_graph: a task names event " + std::to_string(e) + " of " +
                                                               std::to_string(program.events.size()));
      ++first[e + 1];
    }
  for (size_t e = 0; e < program.events.size(); ++e) first[e + 1] += first[e];
  tasks.resize(first.back());
  std::vector<uint32_t> fill(first.begin(), first.end() - 1);
  for (uint32_t t = 0; t < program.tasks.size(); ++t) {
    const TaskDesc& task = program.tasks[t];
    for (uint32_t i = 0; i < task.*count; ++i) tasks[fill[ids[task.*begin + i]]++] = t;
  }
}

}  // namespace

TaskGraph task_graph(const Program& program) {
  TaskGraph g;
  g.program = &program;
  index_by_event(program, &TaskDesc::signal_begin, &TaskDesc::signal_count, program.signals, g.signaller_begin, g.signallers);
  index_by_event(program, &TaskDesc::wait_begin, &TaskDesc::wait_count, program.waits, g.waiter_begin, g.waiters);
  return g;
}

uint64_t TaskGraph::predecessor_count(uint32_t t) const {
  const TaskDesc& task = program->tasks[t];
  uint64_t count = 0;
  for (uint32_t i = 0; i < task.wait_count; ++i) {
    const uint32_t e = program->waits[task.wait_begin + i];
    count += signaller_begin[e + 1] - signaller_begin[e];
  }
  return count;
}

}  // namespace tilefire
