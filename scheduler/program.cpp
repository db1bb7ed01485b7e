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

Program matrix_tile_program(uint32_t tiles, uint32_t tile_rows, uint32_t hidden, uint32_t workers, DType wdtype) {
  Program p;
  const uint32_t rows = tiles * tile_rows;
  p.slots = {{SlotKind::activation, DType::f32, 1, hidden, 0, "x"},
             {SlotKind::weight_f32, DType::f32, 1, hidden, 0, "norm"},
             {SlotKind::weight, wdtype, rows, hidden, 0, "weight"},
             {SlotKind::activation, DType::f32, 1, rows, 0, "logits"}};
  LmHeadParams head;
  head.x = 0;
  head.norm_weight = 1;
  head.weight = 2;
  head.logits = 3;
  head.hidden = hidden;
  head.vocab = rows;
  head.wdtype = wdtype;
  p.nodes.push_back({OpParams::make(OpCode::lm_head, 0, head), 0, tiles, kNoSlot});
  for (uint32_t t = 0; t < tiles; ++t) {
    TaskDesc task;
    task.op = OpCode::lm_head;
    task.tile_begin = t * tile_rows;
    task.tile_end = (t + 1) * tile_rows;
    task.tile_index = t;
    p.tasks.push_back(task);
  }
  p.queues.resize(workers);
  for (uint32_t t = 0; t < tiles; ++t) p.queues[t % workers].push_back(t);
  p.workers = workers;
  p.scratch_floats = hidden;
  return p;
}

}  // namespace tilefire
