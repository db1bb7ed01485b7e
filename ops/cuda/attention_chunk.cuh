#pragma once
// attention_chunk on the device (the CPU twin: ops/attention_chunk.h): for each token, (KV head, chunk)
// unit of the tile and query head of the group, the consumer warps split the chunk's visible positions
// (ops/cuda/attention_warps.cuh) and their combined state is written as the unit's record, unnormalised.
#include "ops/attention_chunk.h"
#include "ops/cuda/attention_warps.cuh"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::attention_chunk> {
  using Params = AttentionChunkParams;

  // workspace: [kDeviceConsumerWarps][head_dim + 2] the warps' states
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const uint32_t hd = p.head_dim, q_dim = p.heads * hd, group = AttentionChunkOp::group(p);
    const uint64_t partial_cols = uint64_t(p.kv_heads) * p.chunks * AttentionChunkOp::unit_floats(p);
    const uint32_t kv = tile.begin / p.chunks;
    const float* q = ctx.slot<const float>(p.q);  // [tokens, heads * hd]
    float* partial = ctx.slot<float>(p.partial);  // [tokens, partial_cols]
    for (uint32_t m = 0; m < ctx.tokens_count; ++m) {
      const uint64_t cache_offset = kv_cache_row(ctx.sequence_of(m), kv, 0, p.kv_heads, p.cache_rows) * hd;
      const float* k = ctx.slot<const float>(p.k_cache) + cache_offset;  // [cache_rows, hd] of its sequence
      const float* v = ctx.slot<const float>(p.v_cache) + cache_offset;  // [cache_rows, hd]
      for (uint32_t u = tile.begin; u < tile.end; ++u) {
        uint32_t first, end;
        AttentionChunkOp::chunk_range(p, u % p.chunks, ctx.position_of(m), &first, &end);
        for (uint32_t g = 0; g < group; ++g) {
          const uint32_t h = kv * group + g;
          attend_positions_by_warps(q + uint64_t(m) * q_dim + uint64_t(h) * hd, k, v, first, end, hd, p.scale, p.softcap, ctx.workspace);
          float* record = partial + m * partial_cols + uint64_t(u) * AttentionChunkOp::unit_floats(p) +
                          uint64_t(g) * attention_record_floats(hd);  // [hd + 2]
          for (uint32_t d = threadIdx.x; d < hd; d += kDeviceConsumerThreads) {
            const CombinedAttention c = combine_warp_states(ctx.workspace, hd, d);
            record[d] = c.value;
            if (d == 0) {
              record[hd] = c.max;
              record[hd + 1] = c.total;
            }
          }
          consumers_sync();
        }
      }
    }
  }
};

}  // namespace tilefire::device
