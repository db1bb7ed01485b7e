#pragma once
// attention_chunk: split-KV causal attention, the first half. A token's visible positions [f, f + n) (f 0,
// or with a sliding window the first of the last `window`: first_visible_position, ops/tile.h) are cut
// into `chunks` equal chunks at run time, chunk c = f + [c * n / chunks, (c + 1) * n / chunks), so every chunk
// tile does the same work at any context length. One tile unit is (KV head, chunk); its tile computes, for
// every token m (in its sequence's cache slot) and every query head h of that KV head's GQA group, the online
// softmax of q[m, h] over chunk c, unnormalised (a record: ops/attention.h) into
//   partial: activation [tokens, kv_heads * chunks * group * (head_dim + 2)], record (kv, c, g) at column
//            ((kv * chunks + c) * group + g) * (head_dim + 2).
// attention_merge (ops/attention_merge.h) then combines a head's chunks. Splitting the positions gives a
// decode step's attention enough tiles for every worker (a GPU's 132 SMs against 8 KV heads) at long
// contexts, where one tile per head would stream the whole cache alone.
#include <stdexcept>
#include <string>

#include "ops/attention.h"
#include "ops/tile.h"

namespace tilefire {

struct AttentionChunkParams {
  uint32_t q = kNoSlot;        // activation [tokens, heads * head_dim]
  uint32_t k_cache = kNoSlot;  // kv cache [sequences, kv_heads, cache_rows, head_dim]
  uint32_t v_cache = kNoSlot;  // kv cache [sequences, kv_heads, cache_rows, head_dim]
  uint32_t partial = kNoSlot;  // activation [tokens, kv_heads * chunks * group * (head_dim + 2)]
  uint32_t heads = 0, kv_heads = 0, head_dim = 0;
  uint32_t cache_rows = 0;  // rows per (sequence, KV head): max_context, or a sliding window's ring (ops/tile.h)
  uint32_t chunks = 0;  // chunks of the visible positions per KV head
  uint32_t window = 0;  // sliding-window attention: the positions a token sees, itself included; 0: all before it
  float scale = 1.0f;   // 1 / sqrt(head_dim)
  float softcap = 0.0f; // the scores' soft cap (Gemma 2's attn_logit_softcapping: soft_capped); 0: none
};

struct AttentionChunkOp {
  using Params = AttentionChunkParams;
  static constexpr OpCode code = OpCode::attention_chunk;
  TILEFIRE_HD static constexpr uint32_t group(const Params& p) { return p.heads / p.kv_heads; }
  // Floats of one (KV head, chunk) unit's records: its group's query heads.
  TILEFIRE_HD static constexpr uint32_t unit_floats(const Params& p) { return group(p) * attention_record_floats(p.head_dim); }
  static uint32_t tile_units(const Params& p) { return p.kv_heads * p.chunks; }
  // Tiles never cross a KV head (a tile reads one KV head's cache and query heads).
  static std::vector<uint32_t> tile_breaks(const Params& p) {
    std::vector<uint32_t> breaks;
    for (uint32_t kv = 1; kv < p.kv_heads; ++kv) breaks.push_back(kv * p.chunks);
    return breaks;
  }
  // Chunk `chunk` of the positions a token at `position` sees: [first, end) (first == end: none).
  TILEFIRE_HD static constexpr void chunk_range(const Params& p, uint32_t chunk, uint32_t position, uint32_t* first,
                                                uint32_t* end) {
    const uint32_t start = first_visible_position(position, p.window), visible = position + 1 - start;
    *first = start + uint32_t(uint64_t(chunk) * visible / p.chunks);
    *end = start + uint32_t(uint64_t(chunk + 1) * visible / p.chunks);
  }
  // Cache positions a tile reads per KV head when `context` positions are visible (the cost model's).
  static uint64_t positions_read(const Params& p, TileRange tile, uint32_t context) {
    uint64_t positions = 0;
    for (uint32_t u = tile.begin; u < tile.end; ++u) {
      uint32_t first, end;
      chunk_range(p, u % p.chunks, context == 0 ? 0 : context - 1, &first, &end);  // the latest token's
      positions += context == 0 ? 0 : end - first;
    }
    return positions;
  }
  static size_t scratch_floats(const Params&, uint32_t) { return 0; }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    const uint32_t kv = tile.begin / p.chunks;
    if ((tile.end - 1) / p.chunks != kv)  // run_tile reads one KV head: tile_breaks keeps tiles inside one
      throw std::runtime_error("attention_chunk: tile [" + std::to_string(tile.begin) + ", " + std::to_string(tile.end) +
                               ") crosses a KV head");
    const uint32_t q_columns = group(p) * p.head_dim;
    fp.reads.push_back({p.q, kv * q_columns, (kv + 1) * q_columns});
    fp.reads.push_back({p.k_cache, kv, kv + 1});
    fp.reads.push_back({p.v_cache, kv, kv + 1});
    fp.writes.push_back({p.partial, tile.begin * unit_floats(p), tile.end * unit_floats(p)});
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const uint32_t q_dim = p.heads * p.head_dim, g_count = group(p), record = attention_record_floats(p.head_dim);
    const uint64_t partial_cols = uint64_t(tile_units(p)) * unit_floats(p);
    const uint32_t kv = tile.begin / p.chunks;
    const float* q = ctx.slot<const float>(p.q);  // [tokens, heads * head_dim]
    float* partial = ctx.slot<float>(p.partial);  // [tokens, partial_cols]
    for (uint32_t m = 0; m < ctx.step->tokens_count; ++m) {
      const size_t cache_offset = kv_cache_row(token_sequence(*ctx.step, m), kv, 0, p.kv_heads, p.cache_rows) * p.head_dim;
      const float* k = ctx.slot<const float>(p.k_cache) + cache_offset;  // [cache_rows, head_dim] of its sequence
      const float* v = ctx.slot<const float>(p.v_cache) + cache_offset;  // [cache_rows, head_dim]
      const uint32_t position = token_position(*ctx.step, m);
      for (uint32_t u = tile.begin; u < tile.end; ++u) {
        uint32_t first, end;
        chunk_range(p, u % p.chunks, position, &first, &end);
        for (uint32_t g = 0; g < g_count; ++g) {
          const uint32_t h = kv * g_count + g;
          float* out = partial + m * partial_cols + uint64_t(u) * unit_floats(p) + uint64_t(g) * record;
          attention_head_partial(q + size_t(m) * q_dim + size_t(h) * p.head_dim, k, v, first, end, p.cache_rows, p.head_dim, p.scale,
                                 p.softcap, out);
        }
      }
    }
  }
};

}  // namespace tilefire
