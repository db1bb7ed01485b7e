#include "scheduler/placement.h"

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

void place_dynamic(Program& program, uint32_t workers) {
  program.placement = Placement::dynamic_queue;
  program.workers = workers;
  program.queues.clear();
}

void place(Program& program, Placement placement, uint32_t workers) {
  if (placement == Placement::static_queues)
    place_static_round_robin(program, workers);
  else
    place_dynamic(program, workers);
}

}  // namespace tilefire
