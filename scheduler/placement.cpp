#include "scheduler/placement.h"

#include <algorithm>

namespace tilefire {

void place_static_round_robin(Program& program, uint32_t workers) {
  program.placement = Placement::static_queues;
  program.workers = workers;
  program.queues.assign(workers, {});
  uint32_t next_worker = 0;
  for (uint32_t t = 0; t < program.tasks.size(); ++t) {
    program.queues[next_worker].push_back(t);
    next_worker = (next_worker + 1) % workers;
  }
}

void place_static_balanced(Program& program, uint32_t workers) {
  program.placement = Placement::static_queues;
  program.workers = workers;
  program.queues.assign(workers, {});
  std::vector<uint64_t> load(workers);
  uint32_t rotation = 0;
  for (const NodeDesc& node : program.nodes) {
    std::fill(load.begin(), load.end(), 0);
    for (uint32_t t = node.first_task; t < node.first_task + node.task_count; ++t) {
      uint32_t best = rotation;
      for (uint32_t i = 1; i < workers; ++i) {
        const uint32_t w = (rotation + i) % workers;
        if (load[w] < load[best]) best = w;
      }
      const TaskDesc& task = program.tasks[t];
      load[best] += task.tile_end - task.tile_begin;
      program.queues[best].push_back(t);
      rotation = (best + 1) % workers;
    }
  }
}

void place_dynamic(Program& program, uint32_t workers) {
  program.placement = Placement::dynamic_queue;
  program.workers = workers;
  program.queues.clear();
}

void place(Program& program, Placement placement, uint32_t workers) {
  if (placement == Placement::static_queues)
    place_static_balanced(program, workers);
  else
    place_dynamic(program, workers);
}

}  // namespace tilefire
