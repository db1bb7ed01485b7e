#pragma once
#include "scheduler/policy.h"

namespace tilefire {

// Tiles go round-robin over the workers in task (topological) order, continuing across op nodes.
class RoundRobinPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "round-robin"; }
  std::string_view description() const override { return "tiles round-robin over workers in topological order"; }
  void place(Program& program, uint32_t workers) const override;
};

}  // namespace tilefire
