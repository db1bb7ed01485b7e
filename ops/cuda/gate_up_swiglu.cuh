#pragma once
// gate_up_swiglu on the device: out[:, f0:f1] = act(xn Wg[f0:f1]^T) * (xn Wu[f0:f1]^T), xn = rmsnorm(x) * g,
// act silu or the tanh GELU (the CPU twin: ops/gate_up_swiglu.h). The task streams the gate rows, then the
// up rows.
#include "ops/cuda/device_tile.cuh"
#include "ops/cuda/tensor_core_gemm.cuh"
#include "ops/gate_up_swiglu.h"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::gate_up_swiglu> {
  using Params = GateUpSwigluParams;
  // workspace: vector path: xs [pass tokens, hidden], dots [pass tokens, 2 * width], 8 doubles;
  // tensor-core path (prefill): dots [gemm pass tokens, 2 * width], 1 / rms [gemm pass tokens]
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const uint32_t width = tile.end - tile.begin;
    const float* x = ctx.slot<const float>(p.x);  // [tokens, hidden]
    float* out = ctx.slot<float>(p.out);          // [tokens, ffn]
    const bool tensor_cores = task_uses_tensor_cores(ctx.tokens_count, p.hidden, 2 * width);
    const uint32_t pass = tensor_cores ? gemm_pass_tokens(2 * width) : ctx.pass_tokens();
    float* xs = ctx.workspace;
    float* dots = tensor_cores ? ctx.workspace : xs + ctx.pass_tokens() * p.hidden;
    float* inverse = dots + pass * 2 * width;  // tensor-core path: [pass]
    double* scratch = reinterpret_cast<double*>(dots + ctx.pass_tokens() * 2 * width + 2);
    scratch = reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(scratch) + 7) & ~uintptr_t(7));
    const float* g = ctx.slot<const float>(p.norm_weight);
    for (uint32_t m0 = 0; m0 < ctx.tokens_count; m0 += pass) {
      const uint32_t count = min(pass, ctx.tokens_count - m0);
      if (tensor_cores) {
        rms_inverse_rows(x, m0, count, p.hidden, p.eps, inverse);
        gemm_task_rows(ctx.stream, ctx.slots, p.hidden, x, m0, count, g, inverse, dots, 2 * width);
      } else {
        rmsnorm_rows_to_shared(x, m0, count, p.hidden, g, p.eps, xs, scratch);
        gemv_task_rows(ctx, p.hidden, xs, count, dots, 2 * width);
      }
      for (uint32_t i = threadIdx.x; i < count * width; i += kDeviceConsumerThreads) {
        const uint32_t t = i / width, f = i % width;
        const float gate = dots[t * 2 * width + f], up = dots[t * 2 * width + width + f];
        // Both gates are x * sigmoid(z): silu's z = x, the tanh GELU's z = 2 sqrt(2/pi) (x + 0.044715 x^3)
        // (1 + tanh(u) = 2 sigmoid(2u)), one expf either way (ops/activation.h).
        const float z = p.activation == GateActivation::gelu_tanh ? gelu_tanh_sigmoid_argument(gate) : gate;
        out[uint64_t(m0 + t) * p.ffn + tile.begin + f] = gate / (1.0f + expf(-z)) * up;
      }
      consumers_sync();
    }
  }
};

}  // namespace tilefire::device
