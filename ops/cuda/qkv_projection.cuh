#pragma once
// qkv_projection on the device (the CPU twin: ops/qkv_projection.h): RMSNorm prologue into shared
// memory, the tile's head rows of Wq, Wk or Wv as the matrix-vector body, then per head: bias, the
// per-head norm (Qwen3), RoPE, and the store to q or the KV cache at each token's position (position0 + m,
// or a step of several sequences' own) in its sequence's slot.
#include "ops/cuda/device_tile.cuh"
#include "ops/cuda/tensor_core_gemm.cuh"
#include "ops/qkv_projection.h"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::qkv_projection> {
  using Params = QkvProjectionParams;
  using Op = QkvProjectionOp;

  // workspace: vector path: xs [pass tokens, hidden], dots [pass tokens, heads of tile * head_dim],
  // 8 doubles; tensor-core path (prefill): dots [gemm pass tokens, rows], 1 / rms [gemm pass tokens]
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const Op::Segment s = Op::segment_of(p, tile.begin);
    const uint32_t count = tile.end - tile.begin, hd = p.head_dim, rows = count * hd;
    const bool tensor_cores = task_uses_tensor_cores(ctx.tokens_count, p.hidden, rows);
    const uint32_t pass = tensor_cores ? gemm_pass_tokens(rows) : ctx.pass_tokens();
    float* xs = ctx.workspace;
    float* dots = tensor_cores ? ctx.workspace : xs + ctx.pass_tokens() * p.hidden;
    float* inverse_rms = dots + pass * rows;  // tensor-core path: [pass]
    double* scratch = reinterpret_cast<double*>(dots + ctx.pass_tokens() * rows + 2);
    scratch = reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(scratch) + 7) & ~uintptr_t(7));
    const float* x = ctx.slot<const float>(p.x);  // [tokens, hidden]
    const float* inv_freq = ctx.slot<const float>(p.rope_inv_freq);  // [rotated dims / 2]
    const bool is_q = s.part == Op::Part::q, is_k = s.part == Op::Part::k;
    const uint32_t bias_slot = is_q ? p.bq : is_k ? p.bk : p.bv;
    const uint32_t norm_slot = is_q ? p.q_norm : is_k ? p.k_norm : kNoSlot;
    const float* bias = bias_slot == kNoSlot ? nullptr : ctx.slot<const float>(bias_slot);
    const float* head_norm = norm_slot == kNoSlot ? nullptr : ctx.slot<const float>(norm_slot);
    const bool rotate = s.part != Op::Part::v && p.rope;  // a NoPE layer's q and k stay as they are
    const float* g = ctx.slot<const float>(p.norm_weight);
    for (uint32_t m0 = 0; m0 < ctx.tokens_count; m0 += pass) {
      const uint32_t tokens = min(pass, ctx.tokens_count - m0);
      if (tensor_cores) {
        rms_inverse_rows(x, m0, tokens, p.hidden, p.eps, inverse_rms);
        gemm_task_rows(ctx.stream, ctx.slots, p.hidden, x, m0, tokens, g, inverse_rms, dots, rows);
      } else {
        rmsnorm_rows_to_shared(x, m0, tokens, p.hidden, g, p.eps, xs, scratch);
        gemv_task_rows(ctx, p.hidden, xs, tokens, dots, rows);
      }
      // One warp per (token, head): the head's values are dots[t * rows + j * hd + d].
      for (uint32_t item = warp_id(); item < tokens * count; item += kDeviceConsumerWarps) {
        const uint32_t t = item / count, j = item % count;
        const uint32_t col0 = (s.first_head + j) * hd;  // column in the part's own output
        float* head = dots + t * rows + j * hd;
        if (bias)
          for (uint32_t d = lane_id(); d < hd; d += 32) head[d] += __ldg(bias + col0 + d);
        __syncwarp();
        if (head_norm) {
          double sum = 0;
          for (uint32_t d = lane_id(); d < hd; d += 32) sum += double(head[d]) * double(head[d]);
          const float inverse = float(1.0 / sqrt(warp_sum(sum) / double(hd) + double(p.eps)));
          __syncwarp();
          for (uint32_t d = lane_id(); d < hd; d += 32) head[d] = (head[d] * inverse) * __ldg(head_norm + d);
          __syncwarp();
        }
        const uint32_t position = ctx.position_of(m0 + t);
        if (rotate) {
          const uint32_t half = p.rotated() / 2;  // pairs (i, i + half) of the leading rotated dimensions
          const float pos = float(position);
          for (uint32_t i = lane_id(); i < half; i += 32) {
            const float angle = pos * __ldg(inv_freq + i);
            double sin_a, cos_a;
            sincos(double(angle), &sin_a, &cos_a);
            const float c = float(cos_a) * p.rope_magnitude, sn = float(sin_a) * p.rope_magnitude;
            const float x0 = head[i], x1 = head[i + half];
            head[i] = x0 * c - x1 * sn;
            head[i + half] = x1 * c + x0 * sn;
          }
          __syncwarp();
        }
        float* destination;
        if (is_q) {
          destination = ctx.slot<float>(p.q_out) + uint64_t(m0 + t) * p.heads * hd + col0;  // [tokens, heads * hd]
        } else {
          float* cache = ctx.slot<float>(is_k ? p.k_cache : p.v_cache);  // [sequences, kv_heads, cache_rows, hd]
          destination = cache + kv_cache_row(ctx.sequence_of(m0 + t), s.first_head + j, position, p.kv_heads, p.cache_rows) * hd;
        }
        for (uint32_t d = lane_id(); d < hd; d += 32) destination[d] = head[d];
      }
      consumers_sync();
    }
  }
};

}  // namespace tilefire::device
