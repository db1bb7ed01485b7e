#pragma once
// attention_merge: split-KV causal attention, the second half. For every token m and query head h of the
// tile (query heads of one GQA group), combines the chunks' records that attention_chunk wrote
// (ops/attention_chunk.h) into out[m, h] = the softmax-weighted V over all visible positions, rescaling
// each chunk to the common max, in chunk order (ops/attention.h: merge_attention_records).
#include <stdexcept>
#include <string>

#include "ops/attention.h"
#include "ops/tile.h"

namespace tilefire {

struct AttentionMergeParams {
  uint32_t partial = kNoSlot;  // activation [tokens, kv_heads * chunks * group * (head_dim + 2)]
  uint32_t out = kNoSlot;      // activation [tokens, heads * head_dim]
  uint32_t heads = 0, kv_heads = 0, head_dim = 0, chunks = 0;
};

struct AttentionMergeOp {
  using Params = AttentionMergeParams;
  static constexpr OpCode code = OpCode::attention_merge;
  TILEFIRE_HD static constexpr uint32_t group(const Params& p) { return p.heads / p.kv_heads; }
  // Floats of one KV head's records: every chunk of its group's query heads.
  TILEFIRE_HD static constexpr uint64_t kv_head_floats(const Params& p) {
    return uint64_t(p.chunks) * group(p) * attention_record_floats(p.head_dim);
  }
  static uint32_t tile_units(const Params& p) { return p.heads; }
  static std::vector<uint32_t> tile_breaks(const Params& p) {
    std::vector<uint32_t> breaks;
    for (uint32_t kv = 1; kv < p.kv_heads; ++kv) breaks.push_back(kv * group(p));
    return breaks;
  }
  static size_t scratch_floats(const Params&, uint32_t) { return 0; }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    const uint32_t kv = tile.begin / group(p);
    if ((tile.end - 1) / group(p) != kv)  // the read covers one KV head's records: tile_breaks keeps tiles inside one
      throw std::runtime_error("attention_merge: tile [" + std::to_string(tile.begin) + ", " + std::to_string(tile.end) +
                               ") crosses a KV group");
    fp.reads.push_back({p.partial, uint32_t(kv * kv_head_floats(p)), uint32_t((kv + 1) * kv_head_floats(p))});
    fp.writes.push_back({p.out, tile.begin * p.head_dim, tile.end * p.head_dim});
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const uint32_t q_dim = p.heads * p.head_dim, record = attention_record_floats(p.head_dim);
    const uint64_t partial_cols = uint64_t(p.kv_heads) * kv_head_floats(p);
    const float* partial = ctx.slot<const float>(p.partial);  // [tokens, partial_cols]
    float* out = ctx.slot<float>(p.out);                      // [tokens, heads * head_dim]
    for (uint32_t m = 0; m < ctx.step->tokens_count; ++m)
      for (uint32_t h = tile.begin; h < tile.end; ++h) {
        const uint32_t kv = h / group(p), g = h % group(p);
        // Chunk c's record of head h: (kv * chunks + c) * group + g records in; chunks group records apart.
        const float* first = partial + m * partial_cols + uint64_t(kv) * kv_head_floats(p) + uint64_t(g) * record;
        merge_attention_records(first, p.chunks, uint64_t(group(p)) * record, p.head_dim, out + size_t(m) * q_dim + size_t(h) * p.head_dim);
      }
  }
};

}  // namespace tilefire
