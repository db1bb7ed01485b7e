#pragma once
// lm_head on the device: logits[v0:v1] = rmsnorm(x[last]) * g @ W[v0:v1]^T (the CPU twin: ops/lm_head.h),
// with the greedy reduction fused: the tile's largest logit goes into the step's 64-bit argmax key
// (megakernel/cuda/device_job.h), and any NaN or Inf logit raises the step's non-finite flag. Under tensor
// parallelism (fused_argmax 0) the logits all-gather does that reduction (ops/cuda/collectives.cuh).
#include "ops/cuda/device_tile.cuh"
#include "ops/lm_head.h"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::lm_head> {
  using Params = LmHeadParams;
  // workspace: xs [hidden], dots [width], 8 doubles
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const uint32_t width = tile.end - tile.begin;
    float* xs = ctx.workspace;
    float* dots = xs + ctx.pass_tokens() * p.hidden;
    double* scratch = reinterpret_cast<double*>(dots + width + 2);
    scratch = reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(scratch) + 7) & ~uintptr_t(7));
    rmsnorm_rows_to_shared(ctx.slot<const float>(p.x), ctx.tokens_count - 1, 1, p.hidden,
                           ctx.slot<const float>(p.norm_weight), p.eps, xs, scratch);
    gemv_task_rows(ctx, p.hidden, xs, 1, dots, width);
    float* logits = ctx.slot<float>(p.logits);  // [vocab] (under tensor parallelism: [the rank's share])
    if (!p.fused_argmax) {
      for (uint32_t i = threadIdx.x; i < width; i += kDeviceConsumerThreads) logits[tile.begin + i] = dots[i];
      return;
    }
    unsigned long long best = 0;
    bool nonfinite = false;
    for (uint32_t i = threadIdx.x; i < width; i += kDeviceConsumerThreads) {
      const float v = dots[i];
      logits[tile.begin + i] = v;
      if (!isfinite(v)) nonfinite = true;
      else best = max(best, argmax_key_of(v, tile.begin + i));
    }
    reduce_greedy_into_step(best, nonfinite, ctx.globals);
  }
};

}  // namespace tilefire::device
