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

}  // namespace tilefire
