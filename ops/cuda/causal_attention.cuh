#pragma once
// causal_attention on the device (the CPU twin: ops/causal_attention.h, ops/attention.cpp): for each token
// and query head of the tile, the CTA's consumer warps split the visible positions (split-KV: warp w takes
// positions w, w + 8, ...), each keeps an online softmax (running max, running sum, weighted V), and the
// partial results are merged in shared memory, rescaled to the common max, in a fixed warp order.
#include "ops/causal_attention.h"
#include "ops/cuda/device_tile.cuh"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::causal_attention> {
  using Params = CausalAttentionParams;
  static constexpr uint32_t kDimsPerLane = kDeviceMaxHeadDim / 32;

  __device__ static float max_propagating_nan(float a, float b) { return (b > a || b != b) ? b : a; }

  // workspace: [kDeviceConsumerWarps][head_dim + 2] partial results (V sum, max, sum)
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const uint32_t hd = p.head_dim, q_dim = p.heads * hd, warp = warp_id(), lane = lane_id();
    const uint32_t kv = CausalAttentionOp::kv_head_of(p, tile.begin);
    const uint64_t cache_offset = uint64_t(kv) * p.max_context * hd;
    const float* k = ctx.slot<const float>(p.k_cache) + cache_offset;  // [max_context, hd]
    const float* v = ctx.slot<const float>(p.v_cache) + cache_offset;  // [max_context, hd]
    const float* q = ctx.slot<const float>(p.q);                       // [tokens, heads * hd]
    float* out = ctx.slot<float>(p.out);                               // [tokens, heads * hd]
    float* partial = ctx.workspace;                                    // [warps][hd + 2]
    const float negative_infinity = __int_as_float(0xff800000);
    for (uint32_t m = 0; m < ctx.tokens_count; ++m) {
      const uint32_t visible = ctx.position0 + m + 1;  // causal: positions 0 .. position0 + m
      for (uint32_t h = tile.begin; h < tile.end; ++h) {
        const uint64_t offset = uint64_t(m) * q_dim + uint64_t(h) * hd;
        float q_lane[kDimsPerLane], acc[kDimsPerLane];
#pragma unroll
        for (uint32_t i = 0; i < kDimsPerLane; ++i) {
          const uint32_t d = lane + 32 * i;
          q_lane[i] = d < hd ? __ldcg(q + offset + d) : 0.0f;
          acc[i] = 0.0f;
        }
        float running_max = negative_infinity, running_sum = 0.0f;
        for (uint32_t j = warp; j < visible; j += kDeviceConsumerWarps) {
          float partial_dot = 0.0f;
#pragma unroll
          for (uint32_t i = 0; i < kDimsPerLane; ++i) {
            const uint32_t d = lane + 32 * i;
            if (d < hd) partial_dot += q_lane[i] * __ldcg(k + uint64_t(j) * hd + d);
          }
          const float score = p.scale * warp_sum(partial_dot);
          const float new_max = max_propagating_nan(running_max, score);
          if (new_max == negative_infinity) continue;  // no attendable key yet (as the CPU twin)
          const float correction = running_max == negative_infinity ? 0.0f : expf(running_max - new_max);
          const float weight = expf(score - new_max);
          running_sum = running_sum * correction + weight;
#pragma unroll
          for (uint32_t i = 0; i < kDimsPerLane; ++i) {
            const uint32_t d = lane + 32 * i;
            if (d < hd) acc[i] = acc[i] * correction + weight * __ldcg(v + uint64_t(j) * hd + d);
          }
          running_max = new_max;
        }
        float* mine = partial + warp * (hd + 2);
#pragma unroll
        for (uint32_t i = 0; i < kDimsPerLane; ++i)
          if (lane + 32 * i < hd) mine[lane + 32 * i] = acc[i];
        if (lane == 0) {
          mine[hd] = running_max;
          mine[hd + 1] = running_sum;
        }
        consumers_sync();
        float common_max = negative_infinity;
        for (uint32_t w = 0; w < kDeviceConsumerWarps; ++w) common_max = max_propagating_nan(common_max, partial[w * (hd + 2) + hd]);
        for (uint32_t d = threadIdx.x; d < hd; d += kDeviceConsumerThreads) {
          float total = 0.0f, value = 0.0f;
          for (uint32_t w = 0; w < kDeviceConsumerWarps; ++w) {  // fixed order: the same result every run
            const float* theirs = partial + w * (hd + 2);
            if (theirs[hd] == negative_infinity) continue;  // a warp that saw no position
            const float scale = expf(theirs[hd] - common_max);
            total += scale * theirs[hd + 1];
            value += scale * theirs[d];
          }
          out[offset + d] = total == 0.0f ? 0.0f : value / total;  // no attendable key: zeros, as the CPU twin
        }
        consumers_sync();
      }
    }
  }
};

}  // namespace tilefire::device
