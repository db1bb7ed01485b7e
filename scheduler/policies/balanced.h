#pragma once
#include "scheduler/policy.h"

namespace tilefire {

// Per op node, each tile goes to the worker with the least estimated work of that node so far, ties to
// the next worker in rotation. Every op boundary of a decoder step is all-to-all, so per-node balance is
// what bounds the idle time; tiles differ in cost (QKV's q tiles span several heads, k and v tiles one).
class BalancedPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "balanced"; }
  std::string_view description() const override { return "per op, each tile to the least-loaded worker (default)"; }
  void place(Program& program, uint32_t workers) const override;
};

}  // namespace tilefire
