// The fuse pass: the unfused primitive graph -> fused tile ops.
//
// Matmuls anchor every fusion. For each matmul not yet fused, the pass looks at its input (an rmsnorm
// becomes the prologue), at its siblings (matmuls reading the same normalised input) and at the
// single-consumer chain after each (bias_add, head_rmsnorm, rope, kv_append, add, swiglu become the
// epilogue), and matches one of the fused ops in ops/:
//   3 siblings ending in rope / rope + kv_append / kv_append    -> qkv_projection
//   2 siblings feeding one swiglu                                -> gate_up_swiglu
//   1 matmul, no norm, feeding an add (the residual)             -> matmul_residual
//   1 matmul, no norm, feeding an rmsnorm feeding an add (Gemma's
//     post-norm before the residual)                             -> matmul_residual (no residual) + norm_residual
//   1 matmul after last_token + rmsnorm                          -> lm_head
// embed and attention map one to one. A primitive left over is an error naming it: the op list has no
// tile for it, and running it unfused would be silently missing work.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "graph/compile.h"
#include "graph/primitive_graph.h"
#include "ops/all_ops.h"

namespace tilefire {

namespace {

uint32_t round_up(uint32_t value, uint32_t multiple) { return (value + multiple - 1) / multiple * multiple; }

class Fuser {
 public:
  Fuser(const PrimitiveGraph& g, const CompileOptions& options)
      : g_(g), options_(options), consumers_(g.values.size()), producer_(g.values.size(), kNoValue),
        fused_(g.nodes.size(), false), value_slot_(g.values.size(), kNoSlot) {
    for (uint32_t n = 0; n < g.nodes.size(); ++n) {
      for (uint32_t v : g.nodes[n].inputs) consumers_[v].push_back(n);
      if (g.nodes[n].output != kNoValue) producer_[g.nodes[n].output] = n;
    }
    out_.slots = g.slots;
    out_.constants = g.constants;
  }

  OpGraph run() {
    for (uint32_t n = 0; n < g_.nodes.size(); ++n) {
      if (fused_[n]) continue;
      const PrimitiveNode& node = g_.nodes[n];
      switch (node.op) {
        case Primitive::embed: fuse_embed(n); break;
        case Primitive::attention: fuse_attention(n); break;
        case Primitive::matmul: fuse_matmul(n); break;
        case Primitive::rmsnorm:
        case Primitive::last_token: break;  // folded into the prologue of the matmul that consumes it
        default: fail(n, "it is not part of any fused op's epilogue");
      }
    }
    for (uint32_t n = 0; n < g_.nodes.size(); ++n)
      if (!fused_[n]) fail(n, "nothing consumed it into a fused op");
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(uint32_t n, const std::string& why) const {
    const PrimitiveNode& node = g_.nodes[n];
    throw std::runtime_error("fuse: no fused tile op covers " + std::string(primitive_name(node.op)) + " of layer " +
                             std::to_string(node.layer) + (node.output != kNoValue ? " ('" + g_.values[node.output].name + "')" : "") +
                             ": " + why);
  }

  uint32_t slot_of(uint32_t value) {
    if (value_slot_[value] == kNoSlot) {
      const ValueDesc& v = g_.values[value];
      out_.slots.push_back({SlotKind::activation, DType::f32, v.rows != 0 ? v.rows : options_.tokens, v.cols, 0, v.name});
      value_slot_[value] = uint32_t(out_.slots.size() - 1);
    }
    return value_slot_[value];
  }

  // The one node consuming `value`, when exactly one does.
  int64_t sole_consumer(uint32_t value) const {
    return consumers_[value].size() == 1 ? int64_t(consumers_[value][0]) : -1;
  }

  // Follows the single-consumer chain from `value` through epilogue ops; returns the nodes in order.
  std::vector<uint32_t> epilogue_chain(uint32_t value) const {
    std::vector<uint32_t> chain;
    for (;;) {
      const int64_t next = sole_consumer(value);
      if (next < 0) break;
      const PrimitiveNode& node = g_.nodes[next];
      if (node.op != Primitive::bias_add && node.op != Primitive::head_rmsnorm && node.op != Primitive::rope &&
          node.op != Primitive::kv_append)
        break;
      chain.push_back(uint32_t(next));
      if (node.output == kNoValue) break;
      value = node.output;
    }
    return chain;
  }

  uint32_t matmul_tile_width(uint32_t rows) const { return tilefire::matmul_tile_width(rows, options_); }

  void emit(OpCode op, uint16_t layer, const auto& params, uint32_t width, std::vector<uint32_t> breaks = {}) {
    out_.nodes.push_back({OpParams::make(op, layer, params), std::max(1u, width), std::move(breaks)});
  }

  void fuse_embed(uint32_t n) {
    const PrimitiveNode& node = g_.nodes[n];
    const ModelSpec& s = g_.spec;
    EmbedParams p{node.slots[0], slot_of(node.output), s.vocab, s.hidden, s.dtype, node.scale};
    emit(OpCode::embed, node.layer, p, std::max(8u, round_up(s.hidden / std::max(1u, options_.workers * options_.tiles_per_worker), 8)));
    fused_[n] = true;
  }

  void fuse_attention(uint32_t n) {
    const PrimitiveNode& node = g_.nodes[n];
    const ModelSpec& s = g_.spec;
    CausalAttentionParams p;
    p.q = slot_of(node.inputs[0]);
    p.k_cache = node.slots[0];
    p.v_cache = node.slots[1];
    p.out = slot_of(node.output);
    p.heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.cache_rows = g_.cache_rows(node.layer);
    p.window = s.attention_window(node.layer);
    p.scale = s.attention_scale();
    p.softcap = s.attention_softcap;
    // Whole GQA groups per tile when there are enough KV heads to keep every worker busy; otherwise split
    // groups (each tile then reads its KV head again, which costs little at these sizes).
    const uint32_t group = s.group();
    const uint32_t pieces = std::clamp((2 * options_.workers + s.kv_heads - 1) / s.kv_heads, 1u, group);
    std::vector<uint32_t> breaks;
    for (uint32_t kv = 1; kv < s.kv_heads; ++kv) breaks.push_back(kv * group);
    fused_[n] = true;
    // A window shorter than the cache bounds what a token reads, so it bounds the chunking too.
    const uint32_t chunks = split_kv_chunks(s.kv_heads * pieces, p.window != 0 ? std::min(p.window, g_.max_context) : g_.max_context);
    if (chunks < 2) return emit(OpCode::causal_attention, node.layer, p, (group + pieces - 1) / pieces, breaks);

    // Split-KV: one attention_chunk tile per (KV head, chunk) writes its records, attention_merge combines them.
    AttentionChunkParams chunk;
    chunk.q = p.q;
    chunk.k_cache = p.k_cache;
    chunk.v_cache = p.v_cache;
    chunk.heads = s.heads;
    chunk.kv_heads = s.kv_heads;
    chunk.head_dim = s.head_dim;
    chunk.cache_rows = p.cache_rows;
    chunk.chunks = chunks;
    chunk.window = p.window;
    chunk.scale = p.scale;
    chunk.softcap = p.softcap;
    const uint64_t partial_cols = uint64_t(AttentionChunkOp::tile_units(chunk)) * AttentionChunkOp::unit_floats(chunk);
    if (partial_cols > 0xffffffffull) fail(n, "the split-KV records of a step exceed 2^32 columns; use fewer --kv-splits");
    out_.slots.push_back({SlotKind::activation, DType::f32, options_.tokens, partial_cols, 0,
                          "attention.partial." + std::to_string(node.layer)});
    chunk.partial = uint32_t(out_.slots.size() - 1);
    out_.slots.back().head_cols = AttentionChunkOp::unit_floats(chunk);  // head granularity: a band per chunk tile
    emit(OpCode::attention_chunk, node.layer, chunk, 1, AttentionChunkOp::tile_breaks(chunk));
    const AttentionMergeParams merge{chunk.partial, p.out, s.heads, s.kv_heads, s.head_dim, chunk.chunks};
    emit(OpCode::attention_merge, node.layer, merge, (group + pieces - 1) / pieces, breaks);
  }

  // Chunks per KV head for split-KV attention (1: no split). Only decode steps split: a prefill has a
  // tile's worth of work per token already, and its records would grow with the prompt. --kv-splits N
  // forces N; by default a decode step splits when the per-head tiles (`head_tiles`) would leave workers
  // idle, into as many chunks as fill the workers, with at least kMinChunkContext cache positions per
  // chunk when a token sees `visible_positions` (the cache, or a shorter sliding window).
  uint32_t split_kv_chunks(uint32_t head_tiles, uint32_t visible_positions) const {
    constexpr uint32_t kMinChunkContext = 128, kMaxChunks = 64;
    if (options_.tokens != 1 && !options_.batched_decode) return 1;
    if (options_.kv_splits != 0) return options_.kv_splits;
    if (head_tiles >= options_.workers) return 1;
    const uint32_t fill = (options_.workers + g_.spec.kv_heads - 1) / g_.spec.kv_heads;
    return std::clamp(std::min(fill, visible_positions / kMinChunkContext), 1u, kMaxChunks);
  }

  void fuse_matmul(uint32_t n) {
    const PrimitiveNode& node = g_.nodes[n];
    const uint32_t input = node.inputs[0];
    const uint32_t norm = producer_[input] != kNoValue && g_.nodes[producer_[input]].op == Primitive::rmsnorm ? producer_[input] : kNoValue;
    std::vector<uint32_t> siblings;  // matmuls reading the same input, in graph order
    for (uint32_t c : consumers_[input])
      if (g_.nodes[c].op == Primitive::matmul && !fused_[c]) siblings.push_back(c);
    if (norm != kNoValue) {
      // The norm is folded into every consumer: all of them must be fusable matmuls.
      if (siblings.size() != consumers_[input].size()) fail(norm, "its output feeds something other than matmuls");
      const uint32_t norm_input = g_.nodes[norm].inputs[0];
      const uint32_t before = producer_[norm_input];
      if (before != kNoValue && g_.nodes[before].op == Primitive::last_token && siblings.size() == 1)
        return fuse_lm_head(n, norm, before);
      for (uint32_t m : siblings)  // qkv_projection and gate_up_swiglu have no output factor
        if (g_.nodes[m].scale != 1.0f) fail(m, "a scaled matmul on an rmsnorm matches no fused op but the LM head");
      if (siblings.size() == 3) return fuse_qkv(siblings, norm);
      if (siblings.size() == 2) return fuse_gate_up(siblings, norm);
      fail(n, "an rmsnorm feeding " + std::to_string(siblings.size()) + " matmuls matches no fused op");
    }
    const int64_t next = sole_consumer(node.output);
    if (siblings.size() == 1 && next >= 0 && g_.nodes[next].op == Primitive::add) return fuse_residual(n, uint32_t(next));
    if (siblings.size() == 1 && next >= 0 && g_.nodes[next].op == Primitive::rmsnorm) {
      const int64_t add = sole_consumer(g_.nodes[next].output);
      if (add >= 0 && g_.nodes[add].op == Primitive::add) return fuse_post_norm(n, uint32_t(next), uint32_t(add));
    }
    fail(n, "a matmul without an rmsnorm prologue must feed a residual add (or an rmsnorm feeding one)");
  }

  // The O or down projection's params, without its residual and output yet.
  MatmulResidualParams projection_params(const PrimitiveNode& m) {
    const SlotDesc& w = g_.slots[m.slots[0]];
    MatmulResidualParams p;
    p.x = slot_of(m.inputs[0]);
    p.weight = m.slots[0];
    p.K = uint32_t(w.cols);
    p.N = uint32_t(w.rows);
    p.wdtype = w.dtype;
    p.scale = m.scale;
    return p;
  }

  void fuse_residual(uint32_t matmul, uint32_t add) {
    const PrimitiveNode& m = g_.nodes[matmul];
    const PrimitiveNode& a = g_.nodes[add];
    const uint32_t residual = a.inputs[0] == m.output ? a.inputs[1] : a.inputs[0];
    MatmulResidualParams p = projection_params(m);
    p.residual = slot_of(residual);
    p.out = slot_of(a.output);
    emit(OpCode::matmul_residual, m.layer, p, matmul_tile_width(p.N));
    fused_[matmul] = fused_[add] = true;
  }

  // Gemma's sandwich norm: y = x W^T (the matmul's tiles, no residual), then out = residual + rmsnorm(y) * g
  // (the norm needs y's whole row, which a column tile of the matmul does not have).
  void fuse_post_norm(uint32_t matmul, uint32_t norm, uint32_t add) {
    const PrimitiveNode& m = g_.nodes[matmul];
    const PrimitiveNode& n = g_.nodes[norm];
    const PrimitiveNode& a = g_.nodes[add];
    const uint32_t residual = a.inputs[0] == n.output ? a.inputs[1] : a.inputs[0];
    MatmulResidualParams p = projection_params(m);
    p.out = slot_of(m.output);
    emit(OpCode::matmul_residual, m.layer, p, matmul_tile_width(p.N));
    NormResidualParams post;
    post.y = p.out;
    post.norm_weight = n.slots[0];
    post.residual = slot_of(residual);
    post.out = slot_of(a.output);
    post.cols = p.N;
    post.eps = n.eps;
    // Every tile reads the whole row and every consumer (the next norm's prologue) waits for all of them:
    // a few wide tiles, not a matmul's many narrow ones (72 of 16 columns at Gemma 3 1B's hidden on 132
    // SMs, each a task and an event).
    const uint32_t norm_tiles = std::clamp(options_.workers, 1u, 16u);
    emit(OpCode::norm_residual, n.layer, post, round_up((p.N + norm_tiles - 1) / norm_tiles, 16));
    fused_[matmul] = fused_[norm] = fused_[add] = true;
  }

  void fuse_gate_up(const std::vector<uint32_t>& matmuls, uint32_t norm) {
    const int64_t gate_next = sole_consumer(g_.nodes[matmuls[0]].output);
    const int64_t up_next = sole_consumer(g_.nodes[matmuls[1]].output);
    if (gate_next < 0 || gate_next != up_next || g_.nodes[gate_next].op != Primitive::swiglu)
      fail(matmuls[0], "two matmuls on one rmsnorm must feed one swiglu");
    const PrimitiveNode& swiglu = g_.nodes[gate_next];
    const uint32_t gate = swiglu.inputs[0] == g_.nodes[matmuls[0]].output ? matmuls[0] : matmuls[1];
    const uint32_t up = gate == matmuls[0] ? matmuls[1] : matmuls[0];
    const PrimitiveNode& n = g_.nodes[norm];
    const SlotDesc& w = g_.slots[g_.nodes[gate].slots[0]];
    GateUpSwigluParams p;
    p.x = slot_of(n.inputs[0]);
    p.norm_weight = n.slots[0];
    p.w_gate = g_.nodes[gate].slots[0];
    p.w_up = g_.nodes[up].slots[0];
    p.out = slot_of(swiglu.output);
    p.hidden = uint32_t(w.cols);
    p.ffn = uint32_t(w.rows);
    p.eps = n.eps;
    p.max_tile = matmul_tile_width(p.ffn);
    p.wdtype = w.dtype;
    p.activation = g_.spec.mlp_activation;
    emit(OpCode::gate_up_swiglu, n.layer, p, p.max_tile);
    fused_[norm] = fused_[gate] = fused_[up] = fused_[gate_next] = true;
  }

  void fuse_qkv(const std::vector<uint32_t>& matmuls, uint32_t norm) {
    const ModelSpec& s = g_.spec;
    const PrimitiveNode& n = g_.nodes[norm];
    QkvProjectionParams p;
    p.x = slot_of(n.inputs[0]);
    p.norm_weight = n.slots[0];
    bool have_q = false, have_k = false, have_v = false;
    for (uint32_t m : matmuls) {
      const std::vector<uint32_t> chain = epilogue_chain(g_.nodes[m].output);
      uint32_t bias = kNoSlot, head_norm = kNoSlot, rope = kNoSlot, cache = kNoSlot, rotated = kNoValue;
      for (uint32_t c : chain) {
        const PrimitiveNode& e = g_.nodes[c];
        if (e.op == Primitive::bias_add) bias = e.slots[0];
        if (e.op == Primitive::head_rmsnorm) head_norm = e.slots[0];
        if (e.op == Primitive::rope) rope = e.slots[0], rotated = e.output;
        if (e.op == Primitive::kv_append) cache = e.slots[0];
      }
      const bool q = rope != kNoSlot && cache == kNoSlot, k = rope != kNoSlot && cache != kNoSlot,
                 v = rope == kNoSlot && cache != kNoSlot && head_norm == kNoSlot;
      if (!(q || k || v)) fail(m, "a matmul on the attention input must end in rope (q), rope + kv_append (k) or kv_append (v)");
      if (q) have_q = true, p.wq = g_.nodes[m].slots[0], p.bq = bias, p.q_norm = head_norm, p.rope_inv_freq = rope, p.q_out = slot_of(rotated);
      if (k) have_k = true, p.wk = g_.nodes[m].slots[0], p.bk = bias, p.k_norm = head_norm, p.k_cache = cache;
      if (v) have_v = true, p.wv = g_.nodes[m].slots[0], p.bv = bias, p.v_cache = cache;
      fused_[m] = true;
      for (uint32_t c : chain) fused_[c] = true;
    }
    if (!(have_q && have_k && have_v)) fail(matmuls[0], "the three attention matmuls are not one q, one k and one v");
    fused_[norm] = true;
    p.hidden = s.hidden;
    p.heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.rotary_dim = s.rotated_dims();
    p.rope_magnitude = rope_magnitude(s.rope_scaling);
    p.rope = s.layer_rotates(n.layer);
    p.cache_rows = g_.cache_rows(n.layer);
    p.eps = n.eps;
    p.wdtype = g_.slots[p.wq].dtype;
    const uint32_t slots = s.heads + 2 * s.kv_heads;
    emit(OpCode::qkv_projection, n.layer, p, std::max(1u, matmul_tile_width(slots * s.head_dim) / s.head_dim),
         QkvProjectionOp::tile_breaks(p));
  }

  void fuse_lm_head(uint32_t matmul, uint32_t norm, uint32_t last_token) {
    const PrimitiveNode& m = g_.nodes[matmul];
    const PrimitiveNode& n = g_.nodes[norm];
    const SlotDesc& w = g_.slots[m.slots[0]];
    LmHeadParams p;
    p.x = slot_of(g_.nodes[last_token].inputs[0]);
    p.norm_weight = n.slots[0];
    p.weight = m.slots[0];
    p.logits = slot_of(m.output);
    p.hidden = uint32_t(w.cols);
    p.vocab = uint32_t(w.rows);
    p.eps = n.eps;
    p.wdtype = w.dtype;
    p.rows = lm_head_rows(options_);
    p.scale = m.scale;
    p.softcap = g_.spec.final_logit_softcap;
    emit(OpCode::lm_head, m.layer, p, matmul_tile_width(p.vocab));
    fused_[matmul] = fused_[norm] = fused_[last_token] = true;
  }

  const PrimitiveGraph& g_;
  const CompileOptions& options_;
  std::vector<std::vector<uint32_t>> consumers_;  // per value
  std::vector<uint32_t> producer_;                // per value
  std::vector<bool> fused_;                       // per node
  std::vector<uint32_t> value_slot_;              // per value, created on first use
  OpGraph out_;
};

}  // namespace

uint32_t matmul_tile_width(uint32_t rows, const CompileOptions& options) {
  const uint32_t target = std::max(1u, options.workers * options.tiles_per_worker);
  return std::clamp(round_up((rows + target - 1) / target, 16), 16u, std::max(16u, options.max_tile_rows));
}

OpGraph fuse_primitive_graph(const PrimitiveGraph& graph, const CompileOptions& options) {
  return Fuser(graph, options).run();
}

}  // namespace tilefire
