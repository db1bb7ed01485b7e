#pragma once
// norm_residual on the device: out[:, c0:c1] = residual[:, c0:c1] + rmsnorm(y)[:, c0:c1] * g[c0:c1], the
// sum of squares over each token's whole row in double, as the CPU twin (ops/norm_residual.h).
#include "ops/cuda/device_tile.cuh"
#include "ops/norm_residual.h"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::norm_residual> {
  using Params = NormResidualParams;
  // workspace: kDeviceConsumerWarps doubles (the row sums)
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const float* y = ctx.slot<const float>(p.y);                // [tokens, cols]
    const float* residual = ctx.slot<const float>(p.residual);  // [tokens, cols]
    const float* g = ctx.slot<const float>(p.norm_weight);      // [cols]
    float* out = ctx.slot<float>(p.out);                        // [tokens, cols]
    double* scratch = reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(ctx.workspace) + 7) & ~uintptr_t(7));
    for (uint32_t m = 0; m < ctx.tokens_count; ++m) {
      const float* row = y + uint64_t(m) * p.cols;
      double sum = 0;
      for (uint32_t k = threadIdx.x; k < p.cols; k += kDeviceConsumerThreads) {
        const float v = __ldcg(row + k);
        sum += double(v) * double(v);
      }
      const float inverse = float(1.0 / sqrt(consumers_sum(sum, scratch) / double(p.cols) + double(p.eps)));
      for (uint32_t c = tile.begin + threadIdx.x; c < tile.end; c += kDeviceConsumerThreads) {
        const uint64_t at = uint64_t(m) * p.cols + c;
        out[at] = __ldcg(residual + at) + (__ldcg(row + c) * inverse) * __ldg(g + c);
      }
    }
  }
};

}  // namespace tilefire::device
