#pragma once
// Activations of the MLP: SiLU and the tanh-approximated GELU, and the gated rows built on them (SwiGLU:
// silu(gate) * up; GeGLU: gelu_tanh(gate) * up), fused into the epilogue of the gate/up matmul or run on
// its output rows.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "ops/host_device.h"

namespace tilefire {

// The gate's activation in a gated MLP: silu (Llama, Qwen, Mistral, Phi-3, SmolLM3, Granite: config
// hidden_act "silu") or the tanh-approximated GELU (Gemma: "gelu_pytorch_tanh").
enum class GateActivation : uint32_t { silu = 0, gelu_tanh = 1 };

// silu(x) = x * sigmoid(x) = x / (1 + exp(-x)). For x < ~-88, exp(-x) is +inf and the result is -0,
// the limit; NaN propagates.
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// gelu_tanh(x) = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), as torch's gelu(approximate="tanh"),
// computed as x * sigmoid(z) with z = 2 sqrt(2 / pi) (x + 0.044715 x^3) (1 + tanh(u) = 2 sigmoid(2u)): silu's
// shape with another argument, one exp as silu has, and no cancellation in 1 + tanh near x = -3. For
// large |x| the cube overflows to +-inf: x or -0, the limits; NaN propagates. The device's epilogue
// computes the same (ops/cuda/gate_up_swiglu.cuh).
TILEFIRE_HD inline float gelu_tanh_sigmoid_argument(float x) {
  constexpr float kTwoSqrtTwoOverPi = 1.5957691216057308f;
  return kTwoSqrtTwoOverPi * (x + 0.044715f * x * x * x);
}
inline float gelu_tanh(float x) { return x / (1.0f + std::exp(-gelu_tanh_sigmoid_argument(x))); }

// out[i] = act(gate[i]) * up[i] for i < n. out may alias gate or up.
void gated_rows(GateActivation activation, const float* gate, const float* up, float* out, size_t n);

}  // namespace tilefire
