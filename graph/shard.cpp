// The shard pass: a tensor-parallel rank's program (graph/compile.h, docs/TENSOR_PARALLEL.md).
//
// The op graph comes from the rank-local spec (the rank's query and KV heads, FFN columns and vocabulary
// rows), so the fuse pass has already sized and tiled every node for the rank. What this pass adds:
//  - each weight slot names its slice of the checkpoint tensor (rows of Wq, Wk, Wv, gate, up and the LM
//    head; columns of Wo and down; columns of the biases); the embedding table stays whole;
//  - the O and down projections (row-parallel) write partial sums to window slots, and an
//    allreduce_residual node after each sums the ranks' partials and adds the residual;
//  - the LM head writes the rank's rows to a window slot, and an allgather_logits node assembles the
//    full logits under the usual name.
#include <algorithm>
#include <string>
#include <vector>

#include "graph/compile.h"
#include "graph/tensor_parallel.h"
#include "ops/all_ops.h"

namespace tilefire {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void slice_rows(SlotDesc& slot, uint64_t full_rows, uint64_t row_begin) {
  slot.full_rows = full_rows;
  slot.full_cols = slot.cols;
  slot.row_begin = row_begin;
}

void slice_cols(SlotDesc& slot, uint64_t full_cols, uint64_t col_begin) {
  slot.full_rows = slot.rows;
  slot.full_cols = full_cols;
  slot.col_begin = col_begin;
}

// A tile width that cuts every rank's share of a split dimension (FFN, vocabulary) into the same number
// of tiles, since ranks must run the same tasks: the width the fuse pass gives the largest share, or the
// nearest multiple of 16 to it that agrees (wider first), within the widest tile allowed. Balanced
// shares differ by at most one row, so a width fails only when it divides the smaller share exactly:
// 16,000 and 16,001 rows (a vocabulary of 32,001 on two ranks) at 64 rows a tile are 250 and 251 tiles.
uint32_t uniform_tile_width(const std::vector<uint32_t>& shares, const CompileOptions& options) {
  const uint32_t largest = *std::max_element(shares.begin(), shares.end());
  const uint32_t preferred = matmul_tile_width(largest, options);
  const auto agrees = [&](uint32_t width) {
    const uint32_t tiles = (largest + width - 1) / width;
    return std::all_of(shares.begin(), shares.end(), [&](uint32_t rows) { return (rows + width - 1) / width == tiles; });
  };
  const uint32_t widest = std::max({16u, options.max_tile_rows, preferred});
  for (uint32_t step = 0; step <= widest; step += 16) {
    if (preferred + step <= widest && agrees(preferred + step)) return preferred + step;
    if (preferred >= step + 16 && agrees(preferred - step)) return preferred - step;
  }
  return preferred;  // none agrees: the engine refuses the ranks' programs, saying why
}

}  // namespace

ModelSpec local_spec(const ModelSpec& spec, const TensorParallelSplit& split, uint32_t rank) {
  const RankShard& shard = split.ranks.at(rank);
  ModelSpec local = spec;
  local.heads = shard.q_heads;
  local.kv_heads = shard.kv_heads;
  local.ffn = shard.ffn;
  local.vocab = shard.vocab;
  return local;
}

OpGraph shard_op_graph(OpGraph graph, const ModelSpec& spec, const TensorParallelSplit& split, const CompileOptions& options) {
  const RankShard& shard = split.ranks.at(options.rank);
  const uint64_t hd = spec.head_dim;
  uint32_t embed_table = kNoSlot;
  for (uint32_t i = 0; i < graph.slots.size(); ++i) {
    SlotDesc& slot = graph.slots[i];
    const std::string& n = slot.name;
    if (slot.kind != SlotKind::weight && slot.kind != SlotKind::weight_f32) continue;
    if (ends_with(n, "self_attn.q_proj.weight")) slice_rows(slot, spec.q_dim(), shard.q_head_begin * hd);
    else if (ends_with(n, "self_attn.k_proj.weight") || ends_with(n, "self_attn.v_proj.weight"))
      slice_rows(slot, spec.kv_dim(), shard.kv_head_begin * hd);
    else if (ends_with(n, "self_attn.o_proj.weight")) slice_cols(slot, spec.q_dim(), shard.q_head_begin * hd);
    else if (ends_with(n, "mlp.gate_proj.weight") || ends_with(n, "mlp.up_proj.weight")) slice_rows(slot, spec.ffn, shard.ffn_begin);
    else if (ends_with(n, "mlp.down_proj.weight")) slice_cols(slot, spec.ffn, shard.ffn_begin);
    else if (n == "lm_head.weight") slice_rows(slot, spec.vocab, shard.vocab_begin);
    else if (ends_with(n, "self_attn.q_proj.bias")) slice_cols(slot, spec.q_dim(), shard.q_head_begin * hd);
    else if (ends_with(n, "self_attn.k_proj.bias") || ends_with(n, "self_attn.v_proj.bias"))
      slice_cols(slot, spec.kv_dim(), shard.kv_head_begin * hd);
    else if (n == "model.embed_tokens.weight") {
      slot.rows = spec.vocab;  // whole on every rank (the local spec sized it to the rank's rows)
      embed_table = i;
    }
  }

  std::vector<uint32_t> ffn_shares, vocab_shares;
  for (const RankShard& r : split.ranks) {
    ffn_shares.push_back(r.ffn);
    vocab_shares.push_back(r.vocab);
  }
  const uint32_t ffn_tile_width = uniform_tile_width(ffn_shares, options);
  const uint32_t vocab_tile_width = uniform_tile_width(vocab_shares, options);

  uint32_t flags = 0;
  std::vector<OpNode> nodes;
  for (OpNode& node : graph.nodes) {
    const OpCode op = node.params.op;
    if (op == OpCode::embed) {
      EmbedParams p = node.params.as<EmbedParams>();
      p.vocab = spec.vocab;
      node.params = OpParams::make(op, node.params.layer, p);
      nodes.push_back(node);
    } else if (op == OpCode::matmul_residual) {
      // Row-parallel: the partial sum goes to the window; the all-reduce adds the ranks' sums and the residual.
      MatmulResidualParams p = node.params.as<MatmulResidualParams>();
      const SlotDesc& out = graph.slots[p.out];
      const uint32_t partial = uint32_t(graph.slots.size());
      graph.slots.push_back({SlotKind::window, DType::f32, out.rows, out.cols, 0, out.name + ".partial"});
      AllreduceResidualParams reduce;
      reduce.partial = partial;
      reduce.residual = p.residual;
      reduce.out = p.out;
      reduce.cols = p.N;
      reduce.tile_width = node.tile_width;
      reduce.flag_base = flags;
      reduce.ranks = split.tp;
      flags += AllreduceResidualOp::flags(reduce);
      p.residual = kNoSlot;
      p.out = partial;
      const uint16_t layer = node.params.layer;
      node.params = OpParams::make(op, layer, p);
      nodes.push_back(node);
      nodes.push_back({OpParams::make(OpCode::allreduce_residual, layer, reduce), node.tile_width, {}});
    } else if (op == OpCode::lm_head) {
      LmHeadParams p = node.params.as<LmHeadParams>();
      if (p.weight == embed_table) {  // tied: the rank's rows of the (whole) embedding table
        SlotDesc rows = graph.slots[embed_table];
        rows.rows = shard.vocab;
        slice_rows(rows, spec.vocab, shard.vocab_begin);
        p.weight = uint32_t(graph.slots.size());
        graph.slots.push_back(rows);
      }
      p.fused_argmax = 0;  // the rank's rows only: the all-gather reduces the greedy token on the device
      SlotDesc& logits = graph.slots[p.logits];
      const std::string name = logits.name;
      logits.kind = SlotKind::window;
      logits.name = name + ".local";
      // Every rank's window has the same layout, so this slot has the largest share's size on every rank
      // (the balanced shares differ by one row); the LM head fills the rank's own share of it.
      logits.cols = (spec.vocab + split.tp - 1) / split.tp;
      AllgatherLogitsParams gather;
      gather.local = p.logits;
      gather.out = uint32_t(graph.slots.size());
      gather.vocab = spec.vocab;
      gather.ranks = split.tp;
      gather.rank = options.rank;
      gather.flag_base = flags;
      gather.rows = p.rows;  // one, or every sequence's in a batched decode step
      flags += split.tp;
      graph.slots.push_back({SlotKind::activation, DType::f32, p.rows, spec.vocab, 0, name});
      node.params = OpParams::make(op, node.params.layer, p);
      node.tile_width = vocab_tile_width;
      nodes.push_back(node);
      nodes.push_back({OpParams::make(OpCode::allgather_logits, node.params.layer, gather), 1, {}});
    } else if (op == OpCode::gate_up_swiglu) {
      GateUpSwigluParams p = node.params.as<GateUpSwigluParams>();
      p.max_tile = ffn_tile_width;  // sizes the scratch
      node.params = OpParams::make(op, node.params.layer, p);
      node.tile_width = ffn_tile_width;
      nodes.push_back(node);
    } else {
      nodes.push_back(node);
    }
  }
  graph.nodes = std::move(nodes);
  graph.collective_flags = flags;
  return graph;
}

}  // namespace tilefire
