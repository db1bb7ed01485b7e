#pragma once
// The prefill body of the matrix tiles on tensor cores (sm_80+: mma.sync m16n8k16, bf16 in, f32
// accumulate): the task's weight rows against a pass of up to kDeviceGemmMaxPassTokens tokens, with the
// same result contract as gemv_task_rows (dots[t * total_rows + i]).
//
// Precision: activations are f32 and the weights bf16. A bf16 A operand would round every activation to
// 8 bits of mantissa, so each activation is split into hi = bf16(x) and lo = bf16(x - hi) and both pass
// through the MMA (two MMAs per fragment): x is carried to about 16 bits, the products are exact in f32,
// and the sums are f32, as in the CPU twin. An RMSNorm prologue is folded in: the A operand is x * g and
// each token's dot is scaled by its 1 / rms afterwards (sum of squares in double, as the CPU twin).
//
// Work split: the task's rows in groups of 8 (the MMA's n) times the pass's tokens in groups of 16 (its m);
// consumer warp w takes units w, w + 8, ... Weights are read from global memory (a prefill pass is never
// staged: task_streams_staged), activations at L2 (written by other CTAs in this kernel).
#include <cuda_bf16.h>

#include "ops/cuda/device_tile.cuh"

namespace tilefire::device {

// 1 / rms(x[m0 + t, :]) for t < count into inverse[t] (sum of squares in double, one warp per token);
// returns after consumers_sync.
__device__ __forceinline__ void rms_inverse_rows(const float* x, uint32_t m0, uint32_t count, uint32_t K, float eps,
                                                 float* inverse) {
  for (uint32_t t = warp_id(); t < count; t += kDeviceConsumerWarps) {
    const float* row = x + uint64_t(m0 + t) * K;
    double sum = 0;
    for (uint32_t k = lane_id(); k < K; k += 32) {
      const float v = __ldcg(row + k);
      sum += double(v) * double(v);
    }
    sum = warp_sum(sum);
    if (lane_id() == 0) inverse[t] = float(1.0 / sqrt(sum / double(K) + double(eps)));
  }
  consumers_sync();
}

// Two adjacent f32 values as bf16 pairs: hi = bf16(v), lo = bf16(v - hi); the first value in the low half.
__device__ __forceinline__ void split_bf16x2(float2 v, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(v.x, v.y);
  const float2 back = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(v.x - back.x, v.y - back.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// x[t, k0 + c .. + 1] (times g) for a token row that may lie past the pass (zeros).
__device__ __forceinline__ float2 activation_pair(const float* row, const float* g, uint32_t k) {
  if (row == nullptr) return make_float2(0.0f, 0.0f);
  float2 v = __ldcg(reinterpret_cast<const float2*>(row + k));
  if (g != nullptr) {
    const float2 scale = __ldg(reinterpret_cast<const float2*>(g + k));
    v.x *= scale.x;
    v.y *= scale.y;
  }
  return v;
}

// dots[t * total_rows + i] = (x[m0 + t, :] * g) . row i of the task's weight stream (times inverse[t]
// when g is given; without g, plain x), for t < count <= kDeviceGemmMaxPassTokens. K % 16 == 0 and bf16
// rows of K elements (task_uses_tensor_cores). Returns after consumers_sync. Out of line, and given the
// context's fields by value: taking the context's address would move it to local memory for every tile.
static __device__ TILEFIRE_DEVICE_NOINLINE void gemm_task_rows(const WeightStreamDesc* stream, void* const* slots, uint32_t K,
                                                   const float* x, uint32_t m0, uint32_t count, const float* g,
                                                   const float* inverse, float* dots, uint32_t total_rows) {
  const WeightStreamDesc& s = *stream;
  const uint32_t lane = lane_id(), group = lane >> 2, quad = lane & 3;
  const uint32_t token_tiles = (count + 15) / 16;
  uint32_t row_base = 0;
  for (uint32_t r = 0; r < s.range_count; ++r) {
    const WeightStreamDesc::Range range = s.ranges[r];
    const unsigned char* base = static_cast<const unsigned char*>(slots[range.slot]) + range.offset;
    const uint32_t units = (range.rows + 7) / 8 * token_tiles;
    for (uint32_t unit = warp_id(); unit < units; unit += kDeviceConsumerWarps) {
      const uint32_t n0 = (unit / token_tiles) * 8, t0 = (unit % token_tiles) * 16;
      // This lane's weight row (the MMA's column `group`) and its two token rows (`group`, `group` + 8).
      const uint32_t row = n0 + group;
      const unsigned char* weights = row < range.rows ? base + uint64_t(row) * s.row_bytes : nullptr;
      const float* token_a = t0 + group < count ? x + uint64_t(m0 + t0 + group) * K : nullptr;
      const float* token_b = t0 + group + 8 < count ? x + uint64_t(m0 + t0 + group + 8) * K : nullptr;
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (uint32_t k0 = 0; k0 < K; k0 += 16) {
        const uint32_t k = k0 + 2 * quad;
        uint32_t b[2] = {0u, 0u};
        if (weights != nullptr) {
          b[0] = __ldg(reinterpret_cast<const unsigned int*>(weights + 2ull * k));
          b[1] = __ldg(reinterpret_cast<const unsigned int*>(weights + 2ull * (k + 8)));
        }
        uint32_t hi[4], lo[4];
        split_bf16x2(activation_pair(token_a, g, k), hi[0], lo[0]);
        split_bf16x2(activation_pair(token_b, g, k), hi[1], lo[1]);
        split_bf16x2(activation_pair(token_a, g, k + 8), hi[2], lo[2]);
        split_bf16x2(activation_pair(token_b, g, k + 8), hi[3], lo[3]);
        ptx::mma_bf16_m16n8k16(acc, hi, b);
        ptx::mma_bf16_m16n8k16(acc, lo, b);
      }
      // acc[0], acc[1]: token t0 + group, rows n0 + 2 quad + {0, 1}; acc[2], acc[3]: token t0 + group + 8.
      for (uint32_t i = 0; i < 4; ++i) {
        const uint32_t t = t0 + group + (i >= 2 ? 8 : 0), n = n0 + 2 * quad + (i & 1);
        if (t < count && n < range.rows)
          dots[t * total_rows + row_base + n] = inverse != nullptr ? acc[i] * inverse[t] : acc[i];
      }
    }
    row_base += range.rows;
  }
  consumers_sync();
}

}  // namespace tilefire::device
