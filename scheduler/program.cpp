#include "scheduler/program.h"

#include "ops/all_ops.h"

namespace tilefire {

uint32_t Program::slot_index(const std::string& name) const {
  for (uint32_t i = 0; i < slots.size(); ++i)
    if (slots[i].name == name) return i;
  return kNoSlot;
}

uint64_t slot_bytes(const SlotDesc& slot) { return slot.rows * slot.cols * dtype_size(slot.dtype); }

WeightRanges task_weight_ranges(const Program& program, const TaskDesc& task) {
  WeightRanges ranges;
  visit_op(task.op, [&](auto op) {
    using Op = decltype(op);
    using Params = typename Op::Params;
    if constexpr (requires(const Params& p, WeightRanges& out) { Op::weight_ranges(p, TileRange{}, out); })
      Op::weight_ranges(program.nodes[task.node].params.as<Params>(), TileRange{task.tile_begin, task.tile_end}, ranges);
  });
  return ranges;
}

Program noop_program(uint32_t tasks, bool chain, uint32_t workers) {
  Program p;
  p.nodes.push_back({OpParams::make(OpCode::noop, 0, NoopParams{tasks}), 0, tasks, kNoSlot});
  for (uint32_t t = 0; t < tasks; ++t) {
    TaskDesc task;
    task.op = OpCode::noop;
    task.tile_begin = t;
    task.tile_end = t + 1;
    task.tile_index = t;
    if (chain) {
      p.events.push_back({1});
      task.signal_begin = uint32_t(p.signals.size());
      task.signal_count = 1;
      p.signals.push_back(t);
      if (t > 0) {
        task.wait_begin = uint32_t(p.waits.size());
        task.wait_count = 1;
        p.waits.push_back(t - 1);
      }
    }
    p.tasks.push_back(task);
  }
  p.queues.resize(workers);
  for (uint32_t t = 0; t < tasks; ++t) p.queues[t % workers].push_back(t);  // a chain alternates workers
  p.workers = workers;
  return p;
}

}  // namespace tilefire
