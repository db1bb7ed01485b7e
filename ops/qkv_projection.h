#pragma once
// qkv_projection: the attention block's input side as one fused tile op.
//   prologue: xn = rmsnorm(x) * g                                     (input_layernorm)
//   body:     the tile's heads of q = xn Wq^T, k = xn Wk^T or v = xn Wv^T
//   epilogue: + bias (Qwen2), per-head RMSNorm of q and k (Qwen3), RoPE on q and k (on each head's first
//             rotary_dim dimensions, Phi-4-mini's partial rotation, or all of them), and k, v appended
//             to the KV cache at each token's position (position0 + m, or a batched step's own) in its
//             sequence's slot.
// Tiles are ranges of "head slots" ordered by KV group: [q heads of group 0, k0, v0, q heads of group 1,
// k1, v1, ...]. In that order the attention of group 0 can start as soon as group 0's slots are done,
// while later groups are still being projected: the overlap dataflow scheduling exists for. The
// compiler never lets a tile cross a part (q, k, v) or a group.
#include <algorithm>
#include <vector>

#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/tile.h"

namespace tilefire {

struct QkvProjectionParams {
  uint32_t x = kNoSlot;            // activation [tokens, hidden]
  uint32_t norm_weight = kNoSlot;  // f32 [hidden]
  uint32_t wq = kNoSlot;           // weight [heads * head_dim, hidden]
  uint32_t wk = kNoSlot;           // weight [kv_heads * head_dim, hidden]
  uint32_t wv = kNoSlot;           // weight [kv_heads * head_dim, hidden]
  uint32_t bq = kNoSlot, bk = kNoSlot, bv = kNoSlot;  // f32 biases, or kNoSlot
  uint32_t q_norm = kNoSlot, k_norm = kNoSlot;        // f32 [head_dim], or kNoSlot
  uint32_t rope_inv_freq = kNoSlot;  // constant f32 [rotated dims / 2]
  uint32_t q_out = kNoSlot;          // activation [tokens, heads * head_dim]
  uint32_t k_cache = kNoSlot;        // kv cache [sequences, kv_heads, cache_rows, head_dim]
  uint32_t v_cache = kNoSlot;        // kv cache [sequences, kv_heads, cache_rows, head_dim]
  uint32_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  uint32_t cache_rows = 0;  // rows per (sequence, KV head): max_context, or a sliding window's ring (ops/tile.h)
  uint32_t rotary_dim = 0;  // each q and k head's leading dimensions RoPE rotates, the rest passed through; 0: all
  float rope_magnitude = 1.0f;  // what cos and sin are multiplied by (LongRoPE's attention_factor)
  bool rope = true;             // false: a NoPE layer (SmolLM3's), q and k stored unrotated
  TILEFIRE_HD uint32_t rotated() const { return rotary_dim ? rotary_dim : head_dim; }
  float eps = 1e-5f;
  DType wdtype = DType::f32;
};

struct QkvProjectionOp {
  using Params = QkvProjectionParams;
  static constexpr OpCode code = OpCode::qkv_projection;

  enum class Part { q, k, v };
  struct Segment {
    Part part;
    uint32_t first_head;  // in the part's own head numbering
  };
  static constexpr uint32_t group_size(const Params& p) { return p.heads / p.kv_heads; }
  static constexpr uint32_t slots_per_group(const Params& p) { return group_size(p) + 2; }
  static constexpr Segment segment_of(const Params& p, uint32_t slot) {
    const uint32_t group = slot / slots_per_group(p), within = slot % slots_per_group(p);
    if (within < group_size(p)) return {Part::q, group * group_size(p) + within};
    return {within == group_size(p) ? Part::k : Part::v, group};
  }
  // Slots a tile may not cross: every group's k and v slots and the start of every group.
  static std::vector<uint32_t> tile_breaks(const Params& p) {
    std::vector<uint32_t> breaks;
    for (uint32_t g = 0; g < p.kv_heads; ++g) {
      const uint32_t first = g * slots_per_group(p);
      if (g) breaks.push_back(first);
      breaks.push_back(first + group_size(p));
      breaks.push_back(first + group_size(p) + 1);
    }
    return breaks;
  }

  static uint32_t tile_units(const Params& p) { return p.heads + 2 * p.kv_heads; }
  // xn [tokens, hidden] + k or v rows [tokens, kv_heads * head_dim]
  static size_t scratch_floats(const Params& p, uint32_t tokens) {
    return size_t(tokens) * (p.hidden + size_t(p.kv_heads) * p.head_dim);
  }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    fp.reads.push_back({p.x, 0, p.hidden});
    Segment s = segment_of(p, tile.begin);
    uint32_t count = tile.end - tile.begin;
    if (s.part == Part::q)
      fp.writes.push_back({p.q_out, s.first_head * p.head_dim, (s.first_head + count) * p.head_dim});
    else
      fp.writes.push_back({s.part == Part::k ? p.k_cache : p.v_cache, s.first_head, s.first_head + count});
  }
  static void weight_ranges(const Params& p, TileRange tile, WeightRanges& out) {
    const Segment s = segment_of(p, tile.begin);
    const uint64_t head_bytes = uint64_t(p.head_dim) * p.hidden * dtype_size(p.wdtype);
    const uint32_t matrix = s.part == Part::q ? p.wq : s.part == Part::k ? p.wk : p.wv;
    out.add(matrix, s.first_head * head_bytes, (tile.end - tile.begin) * head_bytes);
  }

  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const uint32_t tokens = ctx.step->tokens_count;
    const uint32_t hd = p.head_dim;
    const Segment s = segment_of(p, tile.begin);
    const uint32_t count = tile.end - tile.begin;
    const float* x = ctx.slot<const float>(p.x);  // [tokens, hidden]
    float* xn = ctx.scratch;                      // [tokens, hidden]
    const float* g = ctx.slot<const float>(p.norm_weight);
    for (uint32_t m = 0; m < tokens; ++m) rmsnorm_row(x + size_t(m) * p.hidden, g, p.hidden, p.eps, xn + size_t(m) * p.hidden);

    const uint32_t col0 = s.first_head * hd, col1 = (s.first_head + count) * hd;
    const float* inv_freq = ctx.slot<const float>(p.rope_inv_freq);
    if (s.part == Part::q) {
      const uint32_t q_dim = p.heads * hd;
      float* q = ctx.slot<float>(p.q_out);  // [tokens, heads * head_dim]
      matmul_rows(ctx.slot<const void>(p.wq), p.wdtype, p.hidden, col0, col1, xn, p.hidden, tokens, q, q_dim);
      for (uint32_t m = 0; m < tokens; ++m)
        finish_heads(p, q + size_t(m) * q_dim, col0, col1, p.bq, p.q_norm, inv_freq, token_position(*ctx.step, m), ctx, true);
      return;
    }
    const bool is_k = s.part == Part::k;
    const uint32_t kv_dim = p.kv_heads * hd;
    float* rows = xn + size_t(tokens) * p.hidden;  // [tokens, kv_dim], columns [col0, col1) used
    matmul_rows(ctx.slot<const void>(is_k ? p.wk : p.wv), p.wdtype, p.hidden, col0, col1, xn, p.hidden, tokens, rows, kv_dim);
    float* cache = ctx.slot<float>(is_k ? p.k_cache : p.v_cache);  // [sequences, kv_heads, cache_rows, head_dim]
    for (uint32_t m = 0; m < tokens; ++m) {
      const uint32_t position = token_position(*ctx.step, m), sequence = token_sequence(*ctx.step, m);
      float* row = rows + size_t(m) * kv_dim;
      finish_heads(p, row, col0, col1, is_k ? p.bk : p.bv, is_k ? p.k_norm : kNoSlot, inv_freq, position, ctx, is_k);
      for (uint32_t h = s.first_head; h < s.first_head + count; ++h)
        std::copy(row + size_t(h) * hd, row + size_t(h + 1) * hd, cache + kv_cache_row(sequence, h, position % p.cache_rows, p.kv_heads, p.cache_rows) * hd);
    }
  }

 private:
  // Bias, per-head norm and RoPE on columns [col0, col1) of one token's row.
  static void finish_heads(const Params& p, float* row, uint32_t col0, uint32_t col1, uint32_t bias_slot,
                           uint32_t head_norm_slot, const float* inv_freq, uint32_t position,
                           const TileContext& ctx, bool rotate) {
    if (bias_slot != kNoSlot) {
      const float* bias = ctx.slot<const float>(bias_slot);
      for (uint32_t c = col0; c < col1; ++c) row[c] += bias[c];
    }
    for (uint32_t c = col0; c < col1; c += p.head_dim) {
      if (head_norm_slot != kNoSlot) rmsnorm_row(row + c, ctx.slot<const float>(head_norm_slot), p.head_dim, p.eps, row + c);
      if (rotate && p.rope) rope_apply_head(row + c, p.rotated(), position, inv_freq, p.rope_magnitude);  // the leading dimensions as a head of their own
    }
  }
};

}  // namespace tilefire
