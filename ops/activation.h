#pragma once
// Activations of the MLP: SiLU and the tanh-approximated GELU, and the gated rows built on them (SwiGLU:
// silu(gate) * up; GeGLU: gelu_tanh(gate) * up), fused into the epilogue of the gate/up matmul or run on
// its output rows.
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace tilefire {

// The gate's activation in a gated MLP: silu (Llama, Qwen, Mistral, Phi-3, SmolLM3, Granite: config
// hidden_act "silu") or the tanh-approximated GELU (Gemma: "gelu_pytorch_tanh").
enum class GateActivation : uint32_t { silu = 0, gelu_tanh = 1 };

// silu(x) = x * sigmoid(x) = x / (1 + exp(-x)). For x < ~-88, exp(-x) is +inf and the result is -0,
// the limit; NaN propagates.
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// gelu_tanh(x) = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), as torch's gelu(approximate="tanh").
// For large |x| the cube overflows to +-inf and tanh gives +-1: x or -0, the limits; NaN propagates.
inline float gelu_tanh(float x) {
  constexpr float kSqrtTwoOverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrtTwoOverPi * (x + 0.044715f * x * x * x)));
}

// out[i] = act(gate[i]) * up[i] for i < n. out may alias gate or up.
void gated_rows(GateActivation activation, const float* gate, const float* up, float* out, size_t n);

}  // namespace tilefire
