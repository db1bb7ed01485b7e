#pragma once
// lm_head on the device: logits[v0:v1] = LmHeadOp::logit(rmsnorm(x[last]) * g @ W[v0:v1]^T): times scale, then
// soft-capped (the CPU twin: ops/lm_head.h; a
// step of several sequences: every token's row, without the fused reduction),
// with the greedy reduction fused: the tile's largest logit goes into the step's 64-bit argmax key
// (megakernel/cuda/device_job.h), and any NaN or Inf logit raises the step's non-finite flag. Under tensor
// parallelism (fused_argmax 0) the logits all-gather does that reduction (ops/cuda/collectives.cuh).
#include "ops/cuda/device_tile.cuh"
#include "ops/lm_head.h"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::lm_head> {
  using Params = LmHeadParams;
  // workspace: xs [pass tokens, hidden], dots [pass tokens, width], 8 doubles
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const uint32_t width = tile.end - tile.begin;
    float* xs = ctx.workspace;
    float* dots = xs + ctx.pass_tokens() * p.hidden;
    double* scratch = reinterpret_cast<double*>(dots + ctx.pass_tokens() * width + 2);
    scratch = reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(scratch) + 7) & ~uintptr_t(7));
    float* logits = ctx.slot<float>(p.logits);  // [rows, vocab] (under tensor parallelism: [1, the rank's share])
    if (p.rows != 1) {
      // A step of several sequences: every token's row, in passes of up to 4 tokens over the weights (more
      // than one pass reads them from global memory: such a program's weights are not staged), no fused
      // argmax (the host picks each sequence's token).
      const uint32_t first = ctx.tokens_count - p.rows;
      for (uint32_t r0 = 0; r0 < p.rows; r0 += ctx.pass_tokens()) {
        const uint32_t count = min(ctx.pass_tokens(), p.rows - r0);
        rmsnorm_rows_to_shared(ctx.slot<const float>(p.x), first + r0, count, p.hidden, ctx.slot<const float>(p.norm_weight),
                               p.eps, xs, scratch);
        gemv_task_rows(ctx, p.hidden, xs, count, dots, width);
        for (uint32_t t = 0; t < count; ++t)
          for (uint32_t i = threadIdx.x; i < width; i += kDeviceConsumerThreads)
            logits[uint64_t(r0 + t) * p.vocab + tile.begin + i] = LmHeadOp::logit(p, dots[t * width + i]);
        consumers_sync();  // dots and xs are rewritten by the next pass
      }
      return;
    }
    rmsnorm_rows_to_shared(ctx.slot<const float>(p.x), ctx.tokens_count - 1, 1, p.hidden,
                           ctx.slot<const float>(p.norm_weight), p.eps, xs, scratch);
    gemv_task_rows(ctx, p.hidden, xs, 1, dots, width);
    if (!p.fused_argmax) {
      for (uint32_t i = threadIdx.x; i < width; i += kDeviceConsumerThreads) logits[tile.begin + i] = LmHeadOp::logit(p, dots[i]);
      return;
    }
    unsigned long long best = 0;
    bool nonfinite = false;
    for (uint32_t i = threadIdx.x; i < width; i += kDeviceConsumerThreads) {
      const float v = LmHeadOp::logit(p, dots[i]);
      logits[tile.begin + i] = v;
      if (!isfinite(v)) nonfinite = true;
      else best = max(best, argmax_key_of(v, tile.begin + i));
    }
    reduce_greedy_into_step(best, nonfinite, ctx.globals);
  }
};

}  // namespace tilefire::device
