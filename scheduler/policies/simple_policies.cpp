// The simple placements: round-robin, balanced, locality, and the dynamic ready queue.
#include <algorithm>

#include "scheduler/policies/balanced.h"
#include "scheduler/policies/dynamic_queue.h"
#include "scheduler/policies/locality.h"
#include "scheduler/policies/round_robin.h"

namespace tilefire {

namespace {

void start_static(Program& program, uint32_t workers) {
  program.placement = Placement::static_queues;
  program.workers = workers;
  program.queues.assign(workers, {});
}

// The worker with the least load, starting the search at `rotation` so ties spread out.
uint32_t least_loaded(const std::vector<double>& load, uint32_t rotation) {
  const uint32_t workers = uint32_t(load.size());
  uint32_t best = rotation % workers;
  for (uint32_t i = 1; i < workers; ++i) {
    const uint32_t w = (rotation + i) % workers;
    if (load[w] < load[best]) best = w;
  }
  return best;
}

}  // namespace

void RoundRobinPolicy::place(Program& program, uint32_t workers) const {
  start_static(program, workers);
  for (uint32_t t = 0; t < program.tasks.size(); ++t) program.queues[t % workers].push_back(t);
}

void BalancedPolicy::place(Program& program, uint32_t workers) const {
  start_static(program, workers);
  std::vector<double> load(workers);
  uint32_t rotation = 0;
  for (const NodeDesc& node : program.nodes) {
    std::fill(load.begin(), load.end(), 0.0);
    for (uint32_t t = node.first_task; t < node.first_task + node.task_count; ++t) {
      const uint32_t w = least_loaded(load, rotation);
      load[w] += estimated_task_cost(program, t);
      program.queues[w].push_back(t);
      rotation = w + 1;
    }
  }
}

void LocalityPolicy::place(Program& program, uint32_t workers) const {
  start_static(program, workers);
  const TaskGraph graph = task_graph(program);
  std::vector<uint32_t> worker_of(program.tasks.size(), 0);
  std::vector<double> load(workers);
  std::vector<uint32_t> votes(workers);
  uint32_t rotation = 0;
  for (const NodeDesc& node : program.nodes) {
    std::fill(load.begin(), load.end(), 0.0);
    double node_cost = 0;
    for (uint32_t t = node.first_task; t < node.first_task + node.task_count; ++t) node_cost += estimated_task_cost(program, t);
    // Locality may not unbalance the node: a worker is a candidate while its share stays within 10% of
    // an even split (after an all-to-all boundary every worker holds some input, and the majority alone
    // would pile the whole node onto one worker). A worker without a tile of the node yet is always one:
    // a node of fewer tiles than workers has a share below one tile, and would otherwise be placed by
    // rotation alone, its tiles away from their inputs.
    const double share = node_cost / workers * 1.1;
    for (uint32_t t = node.first_task; t < node.first_task + node.task_count; ++t) {
      const double cost = estimated_task_cost(program, t);
      std::fill(votes.begin(), votes.end(), 0u);
      graph.for_each_predecessor(t, [&](uint32_t p) { ++votes[worker_of[p]]; });
      uint32_t best = workers;
      for (uint32_t i = 0; i < workers; ++i) {
        const uint32_t w = (rotation + i) % workers;
        if (load[w] > 0 && load[w] + cost > share) continue;
        if (best == workers || votes[w] > votes[best] || (votes[w] == votes[best] && load[w] < load[best])) best = w;
      }
      if (best == workers) best = least_loaded(load, rotation);  // every worker is at its share
      worker_of[t] = best;
      load[best] += cost;
      program.queues[best].push_back(t);
      rotation = best + 1;
    }
  }
}

void DynamicQueuePolicy::place(Program& program, uint32_t workers) const {
  program.placement = Placement::dynamic_queue;
  program.workers = workers;
  program.queues.clear();
}

}  // namespace tilefire
