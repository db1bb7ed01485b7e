#pragma once
// What the device attention tiles share (ops/cuda/causal_attention.cuh, ops/cuda/attention_chunk.cuh):
// one query head over a range of one KV head's cache positions, split across the CTA's consumer warps
// (warp w takes positions first + w, first + w + 8, ...), each warp keeping an online softmax; then the
// warps' states combined, rescaled to their common max, in a fixed warp order (the same bits every run).
#include "ops/cuda/device_tile.cuh"

namespace tilefire::device {

constexpr uint32_t kAttentionDimsPerLane = kDeviceMaxHeadDim / 32;

__device__ __forceinline__ float max_propagating_nan(float a, float b) { return (b > a || b != b) ? b : a; }
__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

// Each warp's state over its positions of [first, end) into states[warp] = [acc[head_dim], max, sum]
// (acc relative to max; an empty share: acc 0, max -inf, sum 0), then a consumers_sync.
// q_head: [head_dim] (activation, read at L2); k, v: [positions, head_dim] (one KV head's cache).
static __device__ TILEFIRE_DEVICE_NOINLINE void attend_positions_by_warps(const float* q_head, const float* k, const float* v, uint32_t first,
                                                  uint32_t end, uint32_t hd, float scale, float softcap, float* states) {
  const uint32_t warp = warp_id(), lane = lane_id();
  float q_lane[kAttentionDimsPerLane], acc[kAttentionDimsPerLane];
#pragma unroll
  for (uint32_t i = 0; i < kAttentionDimsPerLane; ++i) {
    const uint32_t d = lane + 32 * i;
    q_lane[i] = d < hd ? __ldcg(q_head + d) : 0.0f;
    acc[i] = 0.0f;
  }
  float running_max = negative_infinity(), running_sum = 0.0f;
  for (uint32_t j = first + warp; j < end; j += kDeviceConsumerWarps) {
    float partial_dot = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kAttentionDimsPerLane; ++i) {
      const uint32_t d = lane + 32 * i;
      if (d < hd) partial_dot += q_lane[i] * __ldcg(k + uint64_t(j) * hd + d);
    }
    const float score = soft_capped(scale * warp_sum(partial_dot), softcap);
    const float new_max = max_propagating_nan(running_max, score);
    if (new_max == negative_infinity()) continue;  // no attendable key yet (as the CPU twin)
    const float correction = running_max == negative_infinity() ? 0.0f : expf(running_max - new_max);
    const float weight = expf(score - new_max);
    running_sum = running_sum * correction + weight;
#pragma unroll
    for (uint32_t i = 0; i < kAttentionDimsPerLane; ++i) {
      const uint32_t d = lane + 32 * i;
      if (d < hd) acc[i] = acc[i] * correction + weight * __ldcg(v + uint64_t(j) * hd + d);
    }
    running_max = new_max;
  }
  float* mine = states + warp * (hd + 2);
#pragma unroll
  for (uint32_t i = 0; i < kAttentionDimsPerLane; ++i)
    if (lane + 32 * i < hd) mine[lane + 32 * i] = acc[i];
  if (lane == 0) {
    mine[hd] = running_max;
    mine[hd + 1] = running_sum;
  }
  consumers_sync();
}

// The warps' states (from attend_positions_by_warps) for dimension d, rescaled to their common max.
struct CombinedAttention {
  float value = 0.0f;  // sum over warps of exp(max_w - common) * acc_w[d]
  float total = 0.0f;  // sum over warps of exp(max_w - common) * sum_w
  float max = 0.0f;    // the common max (-inf when no warp saw a position)
};

__device__ __forceinline__ CombinedAttention combine_warp_states(const float* states, uint32_t hd, uint32_t d) {
  CombinedAttention c;
  c.max = negative_infinity();
  for (uint32_t w = 0; w < kDeviceConsumerWarps; ++w) c.max = max_propagating_nan(c.max, states[w * (hd + 2) + hd]);
  for (uint32_t w = 0; w < kDeviceConsumerWarps; ++w) {  // fixed order
    const float* theirs = states + w * (hd + 2);
    if (theirs[hd] == negative_infinity()) continue;  // a warp that saw no position
    const float scale = expf(theirs[hd] - c.max);
    c.total += scale * theirs[hd + 1];
    c.value += scale * theirs[d];
  }
  return c;
}

}  // namespace tilefire::device
