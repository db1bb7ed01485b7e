#pragma once
#include "scheduler/policy.h"

namespace tilefire {

// No static queues: a task enters one ready queue when its last input event fires, and any free worker
// takes it. Adapts to uneven task costs and worker speeds, at a higher cost per task.
class DynamicQueuePolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "dynamic"; }
  std::string_view description() const override { return "one ready queue, tasks taken as they become ready"; }
  void place(Program& program, uint32_t workers) const override;
};

}  // namespace tilefire
