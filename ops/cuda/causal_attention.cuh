#pragma once
// causal_attention on the device (the CPU twin: ops/causal_attention.h, ops/attention.cpp): for each token
// and query head of the tile, the CTA's consumer warps split the visible positions (ops/cuda/attention_warps.cuh),
// and their states are combined and normalised.
#include "ops/causal_attention.h"
#include "ops/cuda/attention_warps.cuh"
#include "ops/cuda/prefill_attention.cuh"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::causal_attention> {
  using Params = CausalAttentionParams;

  // workspace: [kDeviceConsumerWarps][head_dim + 2] the warps' states
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const uint32_t hd = p.head_dim, q_dim = p.heads * hd;
    const uint32_t kv = CausalAttentionOp::kv_head_of(p, tile.begin);
    const float* q = ctx.slot<const float>(p.q);  // [tokens, heads * hd]
    float* out = ctx.slot<float>(p.out);          // [tokens, heads * hd]
    // A prompt's tokens (one sequence, consecutive positions) on tensor cores; a step of several
    // sequences token by token, each over its own slot, as is a prompt whose scores are soft-capped
    // (Gemma 2: the cap inside the tensor-core body took the kernel past its register cap, docs/CUDA.md).
    if (!ctx.positions && p.softcap == 0.0f && prefill_attention_on_tensor_cores(ctx.tokens_count, hd)) {
      const uint64_t cache_offset = kv_cache_row(ctx.sequence0, kv, 0, p.kv_heads, p.cache_rows) * hd;
      prefill_attention_tile(q, ctx.slot<const float>(p.k_cache) + cache_offset, ctx.slot<const float>(p.v_cache) + cache_offset, out,
                             q_dim, hd, tile.begin, tile.end, ctx.tokens_count, ctx.position0, p.window, p.scale);
      consumers_sync();
      return;
    }
    for (uint32_t m = 0; m < ctx.tokens_count; ++m) {
      const uint64_t cache_offset = kv_cache_row(ctx.sequence_of(m), kv, 0, p.kv_heads, p.cache_rows) * hd;
      const float* k = ctx.slot<const float>(p.k_cache) + cache_offset;  // [cache_rows, hd] of its sequence
      const float* v = ctx.slot<const float>(p.v_cache) + cache_offset;  // [cache_rows, hd]
      const uint32_t position = ctx.position_of(m);  // causal: positions first .. its own
      const uint32_t first = first_visible_position(position, p.window);
      for (uint32_t h = tile.begin; h < tile.end; ++h) {
        const uint64_t offset = uint64_t(m) * q_dim + uint64_t(h) * hd;
        attend_positions_by_warps(q + offset, k, v, first, position + 1, hd, p.scale, p.softcap, ctx.workspace);
        for (uint32_t d = threadIdx.x; d < hd; d += kDeviceConsumerThreads) {
          const CombinedAttention c = combine_warp_states(ctx.workspace, hd, d);
          out[offset + d] = c.total == 0.0f ? 0.0f : c.value / c.total;  // no attendable key: zeros, as the CPU twin
        }
        consumers_sync();
      }
    }
  }
};

}  // namespace tilefire::device
