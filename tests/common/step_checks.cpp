// Step checks (tests/common/step_checks.h).
#include "tests/common/step_checks.h"

#include <gtest/gtest.h>

#include <map>

namespace tilefire::testing {

std::vector<std::vector<uint32_t>> producers(const Program& p) {
  std::map<uint32_t, std::vector<uint32_t>> signallers;
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t i = 0; i < p.tasks[t].signal_count; ++i) signallers[p.signals[p.tasks[t].signal_begin + i]].push_back(t);
  std::vector<std::vector<uint32_t>> result(p.tasks.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t i = 0; i < p.tasks[t].wait_count; ++i)
      for (uint32_t s : signallers[p.waits[p.tasks[t].wait_begin + i]]) result[t].push_back(s);
  return result;
}

void check_step(const Program& p, const std::vector<TaskTiming>& timings, ScheduleMode mode, const std::string& where) {
  ASSERT_EQ(timings.size(), p.tasks.size()) << where << ": every task runs exactly once";
  std::vector<const TaskTiming*> by_task(p.tasks.size(), nullptr);
  for (const TaskTiming& t : timings) {
    ASSERT_EQ(by_task[t.task], nullptr) << where << ": task " << t.task << " ran twice";
    by_task[t.task] = &t;
  }
  const auto deps = producers(p);
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t d : deps[t])
      EXPECT_LE(by_task[d]->end_ns, by_task[t]->start_ns) << where << ": task " << t << " started before its producer " << d << " ended";
  if (mode != ScheduleMode::bsp) return;
  for (const TaskTiming& a : timings)  // every task of node n ends before any task of node n + 1 starts
    for (const TaskTiming& b : timings) {
      if (p.tasks[a.task].node + 1 == p.tasks[b.task].node) {
        EXPECT_LE(a.end_ns, b.start_ns) << where << ": bsp barrier";
      }
    }
}

}  // namespace tilefire::testing
