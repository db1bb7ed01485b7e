#include "scheduler/program.h"

#include <algorithm>

#include "ops/all_ops.h"

namespace tilefire {

uint32_t Program::slot_index(const std::string& name) const {
  for (uint32_t i = 0; i < slots.size(); ++i)
    if (slots[i].name == name) return i;
  return kNoSlot;
}

uint64_t slot_bytes(const SlotDesc& slot) { return slot.rows * slot.cols * dtype_size(slot.dtype); }

uint64_t placement_digest(const Program& program) {
  // FNV-1a over 64-bit words, each list's length first, so that no two layouts read as one sequence.
  uint64_t digest = 0xcbf29ce484222325ull;
  const auto mix = [&](uint64_t word) { digest = (digest ^ word) * 0x100000001b3ull; };
  mix(uint64_t(program.placement));
  mix(program.tasks.size());
  for (const TaskDesc& task : program.tasks) mix((uint64_t(task.op) << 32) | task.node);
  mix(program.queues.size());
  for (const std::vector<uint32_t>& queue : program.queues) {
    mix(queue.size());
    for (uint32_t task : queue) mix(task);
  }
  return digest;
}

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

Program matrix_chain_program(const std::vector<ChainMatrix>& matrices, uint64_t tile_bytes, uint32_t workers, DType wdtype) {
  const uint32_t nodes = uint32_t(matrices.size());
  uint32_t width = 1;
  for (const ChainMatrix& m : matrices) width = std::max({width, m.rows, m.cols});
  Program p;
  p.slots.push_back({SlotKind::weight_f32, DType::f32, 1, width, 0, "norm"});
  for (uint32_t a = 0; a <= nodes; ++a) p.slots.push_back({SlotKind::activation, DType::f32, 1, width, 0, "activation"});
  for (const ChainMatrix& m : matrices) p.slots.push_back({SlotKind::weight, wdtype, m.rows, m.cols, 0, "weight"});
  p.queues.resize(workers);
  for (uint32_t n = 0; n < nodes; ++n) {
    const ChainMatrix& m = matrices[n];
    LmHeadParams head;
    head.x = 1 + n;
    head.norm_weight = 0;
    head.weight = 1 + (nodes + 1) + n;
    head.logits = 2 + n;
    head.hidden = m.cols;
    head.vocab = m.rows;
    head.wdtype = wdtype;
    // Whole rounds of tiles of about tile_bytes, two rounds at least (a worker has consecutive tiles of
    // one matrix), one row at most each.
    const uint64_t bytes = uint64_t(m.rows) * m.cols * dtype_size(wdtype);
    const uint64_t wanted = (bytes + std::max<uint64_t>(1, tile_bytes) - 1) / std::max<uint64_t>(1, tile_bytes);
    const uint64_t rounds = std::max<uint64_t>(2, (wanted + workers - 1) / workers);
    const uint32_t tiles_wanted = uint32_t(std::min<uint64_t>(m.rows, rounds * workers));
    const uint32_t rows_per_tile = (m.rows + tiles_wanted - 1) / tiles_wanted;
    const uint32_t first = uint32_t(p.tasks.size());
    uint32_t tiles = 0;
    for (uint32_t row = 0; row < m.rows; row += rows_per_tile, ++tiles) {
      TaskDesc task;
      task.op = OpCode::lm_head;
      task.node = n;
      task.layer = uint16_t(n);
      task.tile_begin = row;
      task.tile_end = std::min(m.rows, row + rows_per_tile);
      task.tile_index = tiles;
      if (n > 0) {  // the previous node's done event is event n - 1
        task.wait_begin = uint32_t(p.waits.size());
        task.wait_count = 1;
        p.waits.push_back(n - 1);
      }
      task.signal_begin = uint32_t(p.signals.size());
      task.signal_count = 1;
      p.signals.push_back(n);
      p.queues[tiles % workers].push_back(uint32_t(p.tasks.size()));
      p.tasks.push_back(task);
    }
    p.events.push_back({tiles});
    p.nodes.push_back({OpParams::make(OpCode::lm_head, uint16_t(n), head), first, tiles, n});
  }
  p.workers = workers;
  p.scratch_floats = width;
  return p;
}

}  // namespace tilefire
