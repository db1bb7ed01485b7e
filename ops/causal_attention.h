#pragma once
// causal_attention: for each token m at its position (position0 + m, or a batched step's own) and each
// query head h of the tile,
//   out[m, h] = softmax(scale * q[m, h] . K[kv(h), first..position]) V[kv(h), first..position]
// over its sequence's slot of the KV cache (GQA: kv(h) = h / (heads / kv_heads)); first is 0, or with a
// sliding window the first of the last `window` positions (first_visible_position, ops/tile.h). Tiles are query-head ranges inside one KV
// group, so a tile waits only for its own q heads and its one KV head.
#include <stdexcept>
#include <string>

#include "ops/attention.h"
#include "ops/tile.h"

namespace tilefire {

struct CausalAttentionParams {
  uint32_t q = kNoSlot;        // activation [tokens, heads * head_dim]
  uint32_t k_cache = kNoSlot;  // kv cache [sequences, kv_heads, cache_rows, head_dim]
  uint32_t v_cache = kNoSlot;  // kv cache [sequences, kv_heads, cache_rows, head_dim]
  uint32_t out = kNoSlot;      // activation [tokens, heads * head_dim]
  uint32_t heads = 0, kv_heads = 0, head_dim = 0;
  uint32_t cache_rows = 0;  // rows per (sequence, KV head): max_context, or a sliding window's ring (ops/tile.h)
  uint32_t window = 0;  // sliding-window attention: the positions a token sees, itself included; 0: all before it
  float scale = 1.0f;   // 1 / sqrt(head_dim)
  float softcap = 0.0f; // the scores' soft cap (Gemma 2's attn_logit_softcapping: soft_capped); 0: none
};

struct CausalAttentionOp {
  using Params = CausalAttentionParams;
  static constexpr OpCode code = OpCode::causal_attention;
  static uint32_t tile_units(const Params& p) { return p.heads; }
  static constexpr uint32_t kv_head_of(const Params& p, uint32_t head) { return head / (p.heads / p.kv_heads); }
  // Cache positions a tile reads per KV head when `context` positions are visible (the cost model's).
  static uint64_t positions_read(const Params& p, TileRange, uint32_t context) {
    return p.window != 0 && p.window < context ? p.window : context;
  }
  static size_t scratch_floats(const Params&, uint32_t) { return 0; }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    const uint32_t kv = kv_head_of(p, tile.begin);
    if (kv_head_of(p, tile.end - 1) != kv)  // run_tile reads one KV head: the compiler's breaks keep tiles inside one
      throw std::runtime_error("causal_attention: tile [" + std::to_string(tile.begin) + ", " + std::to_string(tile.end) +
                               ") crosses a KV group");
    fp.reads.push_back({p.q, tile.begin * p.head_dim, tile.end * p.head_dim});
    fp.reads.push_back({p.k_cache, kv, kv + 1});
    fp.reads.push_back({p.v_cache, kv, kv + 1});
    fp.writes.push_back({p.out, tile.begin * p.head_dim, tile.end * p.head_dim});
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const uint32_t q_dim = p.heads * p.head_dim;
    const uint32_t kv = kv_head_of(p, tile.begin);
    const float* q = ctx.slot<const float>(p.q);
    float* out = ctx.slot<float>(p.out);
    for (uint32_t m = 0; m < ctx.step->tokens_count; ++m) {
      const uint32_t position = token_position(*ctx.step, m);
      const size_t cache_offset = kv_cache_row(token_sequence(*ctx.step, m), kv, 0, p.kv_heads, p.cache_rows) * p.head_dim;
      const float* k = ctx.slot<const float>(p.k_cache) + cache_offset;  // [cache_rows, head_dim] of its sequence
      const float* v = ctx.slot<const float>(p.v_cache) + cache_offset;  // [cache_rows, head_dim]
      const uint32_t first = first_visible_position(position, p.window);  // causal: positions first .. position
      for (uint32_t h = tile.begin; h < tile.end; ++h) {
        const size_t offset = size_t(m) * q_dim + size_t(h) * p.head_dim;
        attention_head_window(q + offset, k, v, first, position + 1, p.cache_rows, p.head_dim, p.scale, p.softcap, out + offset);
      }
    }
  }
};

}  // namespace tilefire
