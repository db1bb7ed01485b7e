#pragma once
// Checks of one executed step against its Program (tests of the executors): every task ran exactly once,
// never before a task that signals an event it waits on had ended, and in bsp mode node by node.
#include <cstdint>
#include <string>
#include <vector>

#include "megakernel/cpu/cpu_executor.h"
#include "scheduler/program.h"

namespace tilefire::testing {

// Producers of each task, from the events: the tasks that signal what it waits on.
std::vector<std::vector<uint32_t>> producers(const Program& p);

// Records gtest failures (naming `where`) for a step's timings that break the program's order.
void check_step(const Program& p, const std::vector<TaskTiming>& timings, ScheduleMode mode, const std::string& where);

}  // namespace tilefire::testing
