#pragma once
// causal_attention's prefill body on tensor cores (sm_80+: mma.sync m16n8k16, bf16 in, f32 accumulate),
// flash-attention style: a unit is one query head, 16 tokens and up to 64 of the head's output
// dimensions (a slice; head_dim 128 takes two units per head and 16 tokens, each computing the scores in
// full); it walks the visible keys in blocks of 16 positions, S = Q K^T for the block, an online
// softmax per token row (running max and sum, rows rescaled when the max moves), and O += P V, the S
// accumulators reused as the P operand. The CPU twin is
// the same op's tile (ops/causal_attention.h): the same softmax of the same scores, within tolerance.
//
// Precision: Q, K, V (f32) and P are split into bf16 hi + lo and each product takes three MMAs
// (hi hi + hi lo + lo hi), so the operands keep about 16 bits; sums are f32. Non-finite values differ
// from the twin in two ways: an Inf operand becomes NaN (its lo part is Inf - Inf), and a NaN or Inf
// in the V row of a position a token does not see still reaches that token (P = 0 times it, as the 16
// rows of a unit share one V operand), where the twin never reads it. Without a sliding window the last
// token (the logits) sees every position, so a step that makes a NaN ends in NaN logits on both; with
// one, a NaN written outside the last token's window may reach its logits here alone. Rows are token rows
// (`group` and `group` + 8 of the 16), columns positions or head dimensions, as the MMA's fragments lay
// them out: a lane holds, for its two rows, two adjacent columns of each 8-wide n tile.
#include "ops/causal_attention.h"
#include "ops/cuda/attention_warps.cuh"
#include "ops/cuda/tensor_core_gemm.cuh"

namespace tilefire::device {

// O's accumulators of a unit: kPrefillAttentionSliceDims / 8 n tiles of 4 floats per lane. More spilled
// (head_dim 128 in one unit did), so larger heads are cut into slices of this many output dimensions.
constexpr uint32_t kPrefillAttentionSliceDims = 64;
constexpr uint32_t kPrefillAttentionMaxHeadDim = 256;

// d += a b with both operands split (hi hi + hi lo + lo hi).
__device__ __forceinline__ void mma_split(float (&d)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                          const uint32_t (&b_hi)[2], const uint32_t (&b_lo)[2]) {
  ptx::mma_bf16_m16n8k16(d, a_hi, b_hi);
  ptx::mma_bf16_m16n8k16(d, a_hi, b_lo);
  ptx::mma_bf16_m16n8k16(d, a_lo, b_hi);
}

// Two values of a row that may be missing (zeros).
__device__ __forceinline__ float2 load_pair(const float* p, bool present) {
  return present ? __ldcg(reinterpret_cast<const float2*>(p)) : make_float2(0.0f, 0.0f);
}

// The largest of the four lanes of a quad (the lanes holding one row), NaN propagating.
__device__ __forceinline__ float quad_max(float v) {
  v = max_propagating_nan(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return max_propagating_nan(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Whether the prefill body takes a step: 16 tokens or more, head_dim a multiple of 16 up to
// kPrefillAttentionMaxHeadDim.
__device__ __forceinline__ bool prefill_attention_on_tensor_cores(uint32_t tokens, uint32_t head_dim) {
  return tokens >= 16 && head_dim % 16 == 0 && head_dim <= kPrefillAttentionMaxHeadDim;
}

// The slices of a head's output dimensions.
__device__ __forceinline__ uint32_t prefill_attention_slices(uint32_t head_dim) {
  return (head_dim + kPrefillAttentionSliceDims - 1) / kPrefillAttentionSliceDims;
}

// Query head `head`, tokens [t0, t0 + 16) of the step (those below `count`), at positions position0 + t,
// each seeing the positions from first_visible_position(its position, window) to its own;
// `slice_dims` output dimensions of the head (kPrefillAttentionSliceDims, fewer at its end), from the
// slice's first: v_slice and out_slice point at that dimension of V's position 0 and out's token 0.
// q: [tokens, heads * head_dim]; k: the head's KV head, [cache_rows, head_dim]; v_slice, out_slice: the
// same layouts as v and out, offset.
static __device__ TILEFIRE_DEVICE_NOINLINE void prefill_attention_unit(const float* q, const float* k, const float* v_slice,
                                                           float* out_slice, uint32_t q_dim, uint32_t hd, uint32_t head,
                                                           uint32_t t0, uint32_t count, uint32_t position0, uint32_t window,
                                                           float scale, uint32_t slice_dims) {
  const uint32_t lane = lane_id(), group = lane >> 2, quad = lane & 3;
  const uint32_t ta = t0 + group, tb = t0 + group + 8;  // this lane's two token rows
  const bool has_a = ta < count, has_b = tb < count;
  const float* qa = q + uint64_t(ta) * q_dim + uint64_t(head) * hd;
  const float* qb = q + uint64_t(tb) * q_dim + uint64_t(head) * hd;
  const uint32_t last = min(t0 + 16, count) - 1;  // the unit's last token
  const uint32_t keys = position0 + last + 1;     // positions any row of the unit sees
  // A sliding window: blocks before the first row's first visible position hold no key any row sees.
  const uint32_t first_block = first_visible_position(position0 + t0, window) / 16 * 16;
  const uint32_t tiles = slice_dims / 8;  // the slice's n tiles of O
  const float negative_inf = negative_infinity();
  float o[kPrefillAttentionSliceDims / 8][4];
#pragma unroll
  for (uint32_t n = 0; n < kPrefillAttentionSliceDims / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float max_a = negative_inf, max_b = negative_inf, sum_a = 0.0f, sum_b = 0.0f;

  for (uint32_t j0 = first_block; j0 < keys; j0 += 16) {
    // S[16 tokens x 16 positions] as two n tiles of 8 positions.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (uint32_t d0 = 0; d0 < hd; d0 += 16) {
      const uint32_t d = d0 + 2 * quad;
      uint32_t a_hi[4], a_lo[4];
      split_bf16x2(load_pair(qa + d, has_a), a_hi[0], a_lo[0]);
      split_bf16x2(load_pair(qb + d, has_b), a_hi[1], a_lo[1]);
      split_bf16x2(load_pair(qa + d + 8, has_a), a_hi[2], a_lo[2]);
      split_bf16x2(load_pair(qb + d + 8, has_b), a_hi[3], a_lo[3]);
#pragma unroll
      for (uint32_t n = 0; n < 2; ++n) {
        const uint32_t j = j0 + 8 * n + group;  // the key this lane loads (the B operand's column)
        const float* kj = k + uint64_t(j) * hd;
        uint32_t b_hi[2], b_lo[2];
        split_bf16x2(load_pair(kj + d, j < keys), b_hi[0], b_lo[0]);
        split_bf16x2(load_pair(kj + d + 8, j < keys), b_hi[1], b_lo[1]);
        mma_split(s[n], a_hi, a_lo, b_hi, b_lo);
      }
    }
    // Scale, mask (causal, a sliding window's start, and rows past the step), and the rows' new maxima.
    float block_max_a = negative_inf, block_max_b = negative_inf;
#pragma unroll
    for (uint32_t n = 0; n < 2; ++n)
#pragma unroll
      for (uint32_t i = 0; i < 4; ++i) {
        const uint32_t j = j0 + 8 * n + 2 * quad + (i & 1);
        const bool row_a = i < 2;
        const uint32_t row_position = position0 + (row_a ? ta : tb);
        const bool visible = (row_a ? has_a : has_b) && j <= row_position && j >= first_visible_position(row_position, window);
        s[n][i] = visible ? s[n][i] * scale : negative_inf;
        if (row_a) block_max_a = max_propagating_nan(block_max_a, s[n][i]);
        else block_max_b = max_propagating_nan(block_max_b, s[n][i]);
      }
    const float new_max_a = max_propagating_nan(max_a, quad_max(block_max_a));
    const float new_max_b = max_propagating_nan(max_b, quad_max(block_max_b));
    // A row with no visible key yet keeps max -inf, sum 0 and O 0 (as the CPU twin).
    const float correction_a = new_max_a == negative_inf ? 1.0f : expf(max_a - new_max_a);
    const float correction_b = new_max_b == negative_inf ? 1.0f : expf(max_b - new_max_b);
    float p_sum_a = 0.0f, p_sum_b = 0.0f;
#pragma unroll
    for (uint32_t n = 0; n < 2; ++n)
#pragma unroll
      for (uint32_t i = 0; i < 4; ++i) {
        const bool row_a = i < 2;
        const float m = row_a ? new_max_a : new_max_b;
        s[n][i] = (s[n][i] == negative_inf || m == negative_inf) ? 0.0f : expf(s[n][i] - m);  // P
        if (row_a) p_sum_a += s[n][i];
        else p_sum_b += s[n][i];
      }
    sum_a = sum_a * correction_a + quad_sum(p_sum_a);
    sum_b = sum_b * correction_b + quad_sum(p_sum_b);
    max_a = new_max_a;
    max_b = new_max_b;
    // P as the A operand (16 tokens x 16 positions): the S tiles' fragments are the A fragment's halves.
    uint32_t p_hi[4], p_lo[4];
    split_bf16x2(make_float2(s[0][0], s[0][1]), p_hi[0], p_lo[0]);
    split_bf16x2(make_float2(s[0][2], s[0][3]), p_hi[1], p_lo[1]);
    split_bf16x2(make_float2(s[1][0], s[1][1]), p_hi[2], p_lo[2]);
    split_bf16x2(make_float2(s[1][2], s[1][3]), p_hi[3], p_lo[3]);
    // O = O * correction + P V, an n tile per 8 head dimensions; V's column: the slice's dimension 8 n + group.
    const uint32_t j = j0 + 2 * quad;  // this lane's B rows: positions j, j + 1, j + 8, j + 9
#pragma unroll
    for (uint32_t n = 0; n < kPrefillAttentionSliceDims / 8; ++n) {
      if (n >= tiles) break;
      o[n][0] *= correction_a;
      o[n][1] *= correction_a;
      o[n][2] *= correction_b;
      o[n][3] *= correction_b;
      const float* vd = v_slice + 8 * n + group;
      const float2 low = make_float2(j < keys ? __ldcg(vd + uint64_t(j) * hd) : 0.0f,
                                     j + 1 < keys ? __ldcg(vd + uint64_t(j + 1) * hd) : 0.0f);
      const float2 high = make_float2(j + 8 < keys ? __ldcg(vd + uint64_t(j + 8) * hd) : 0.0f,
                                      j + 9 < keys ? __ldcg(vd + uint64_t(j + 9) * hd) : 0.0f);
      uint32_t b_hi[2], b_lo[2];
      split_bf16x2(low, b_hi[0], b_lo[0]);
      split_bf16x2(high, b_hi[1], b_lo[1]);
      mma_split(o[n], p_hi, p_lo, b_hi, b_lo);
    }
  }
  // out = O / sum (zeros for a row that saw no key, as the CPU twin).
  const float inverse_a = sum_a == 0.0f ? 0.0f : 1.0f / sum_a, inverse_b = sum_b == 0.0f ? 0.0f : 1.0f / sum_b;
#pragma unroll
  for (uint32_t n = 0; n < kPrefillAttentionSliceDims / 8; ++n) {
    if (n >= tiles) break;
    const uint32_t d = 8 * n + 2 * quad;
    if (has_a) {
      float* row = out_slice + uint64_t(ta) * q_dim + uint64_t(head) * hd + d;
      row[0] = sum_a == 0.0f ? 0.0f : o[n][0] * inverse_a;
      row[1] = sum_a == 0.0f ? 0.0f : o[n][1] * inverse_a;
    }
    if (has_b) {
      float* row = out_slice + uint64_t(tb) * q_dim + uint64_t(head) * hd + d;
      row[0] = sum_b == 0.0f ? 0.0f : o[n][2] * inverse_b;
      row[1] = sum_b == 0.0f ? 0.0f : o[n][3] * inverse_b;
    }
  }
}

// Query heads [head_begin, head_end) of a prefill of `count` tokens (a sliding window of `window`
// positions, 0: none): units of (query head, 16 tokens, a
// slice of the head's output dimensions), consumer warp w taking units w, w + 8, ... A head's slices of
// one token block are neighbours, so they read its Q and K while the others' reads are still in cache
// (each reads its own columns of V).
// Out of line, as the unit is: the kernel keeps none of the loop's state live.
static __device__ TILEFIRE_DEVICE_NOINLINE void prefill_attention_tile(const float* q, const float* k, const float* v, float* out,
                                                           uint32_t q_dim, uint32_t hd, uint32_t head_begin,
                                                           uint32_t head_end, uint32_t count, uint32_t position0,
                                                           uint32_t window, float scale) {
  const uint32_t blocks = (count + 15) / 16, slices = prefill_attention_slices(hd);
  const uint32_t units_per_head = blocks * slices, units = (head_end - head_begin) * units_per_head;
  for (uint32_t unit = warp_id(); unit < units; unit += kDeviceConsumerWarps) {
    const uint32_t head = head_begin + unit / units_per_head, block = unit % units_per_head / slices;
    const uint32_t d_begin = unit % slices * kPrefillAttentionSliceDims;
    prefill_attention_unit(q, k, v + d_begin, out + d_begin, q_dim, hd, head, 16 * block, count, position0, window, scale,
                           min(hd - d_begin, kPrefillAttentionSliceDims));
  }
}

}  // namespace tilefire::device
