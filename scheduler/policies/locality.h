#pragma once
#include "scheduler/policy.h"

namespace tilefire {

// Each tile goes to the worker that ran most of the tiles it waits on (its input is then in that core's
// caches), ties broken toward the least-loaded worker of the node; queues stay in topological order.
class LocalityPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "locality"; }
  std::string_view description() const override { return "each tile on the worker that ran most of the tiles it waits on"; }
  void place(Program& program, uint32_t workers) const override;
};

}  // namespace tilefire
