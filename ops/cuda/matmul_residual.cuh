#pragma once
// matmul_residual on the device: out[:, n0:n1] = residual[:, n0:n1] + (x @ W[n0:n1, :]^T) * scale, the O and down
// projections with the residual add in the epilogue (the CPU twin: ops/matmul_residual.h).
#include "ops/cuda/device_tile.cuh"
#include "ops/cuda/tensor_core_gemm.cuh"
#include "ops/matmul_residual.h"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::matmul_residual> {
  using Params = MatmulResidualParams;
  // workspace: vector path: xs [pass tokens, K], dots [pass tokens, tile columns]; tensor-core path
  // (prefill): dots [gemm pass tokens, tile columns]
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const uint32_t width = tile.end - tile.begin;
    const float* x = ctx.slot<const float>(p.x);                // [tokens, K]
    const float* residual = p.residual == kNoSlot ? nullptr : ctx.slot<const float>(p.residual);  // [tokens, N]
    float* out = ctx.slot<float>(p.out);                        // [tokens, N]
    const bool tensor_cores = task_uses_tensor_cores(ctx.tokens_count, p.K, width);
    const uint32_t pass = tensor_cores ? gemm_pass_tokens(width) : ctx.pass_tokens();
    float* xs = ctx.workspace;
    float* dots = tensor_cores ? ctx.workspace : xs + ctx.pass_tokens() * p.K;
    for (uint32_t m0 = 0; m0 < ctx.tokens_count; m0 += pass) {
      const uint32_t count = min(pass, ctx.tokens_count - m0);
      if (tensor_cores) {
        gemm_task_rows(ctx.stream, ctx.slots, p.K, x, m0, count, nullptr, nullptr, dots, width);
      } else {
        copy_rows_to_shared(x, m0, count, p.K, xs);
        gemv_task_rows(ctx, p.K, xs, count, dots, width);
      }
      for (uint32_t i = threadIdx.x; i < count * width; i += kDeviceConsumerThreads) {
        const uint32_t t = i / width, n = tile.begin + i % width;
        const uint64_t at = uint64_t(m0 + t) * p.N + n;
        out[at] = (residual ? __ldcg(residual + at) : 0.0f) + dots[t * width + (n - tile.begin)] * p.scale;
      }
      consumers_sync();
    }
  }
};

}  // namespace tilefire::device
