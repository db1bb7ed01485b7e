#pragma once
#include "scheduler/policy.h"

namespace tilefire {

// List scheduling, critical path first: with estimated task costs, simulate the workers; whenever one
// is free it takes the ready task with the longest cost-weighted path to the end of the step. Queues hold
// the tasks in their simulated start order, which respects every dependency. A program whose events form
// a cycle is refused (ProgramError).
class CriticalPathPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "critical-path"; }
  std::string_view description() const override { return "list scheduling, longest remaining path first"; }
  void place(Program& program, uint32_t workers) const override;
};

}  // namespace tilefire
