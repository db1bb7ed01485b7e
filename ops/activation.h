#pragma once
// Activations of the MLP: SiLU, and SwiGLU (silu(gate) * up), fused into the epilogue of the gate/up
// matmul or run on its output rows.
#include <cmath>
#include <cstddef>

namespace tilefire {

// silu(x) = x * sigmoid(x) = x / (1 + exp(-x)). For x < ~-88, exp(-x) is +inf and the result is -0,
// the limit; NaN propagates.
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// out[i] = silu(gate[i]) * up[i] for i < n. out may alias gate or up.
void swiglu_rows(const float* gate, const float* up, float* out, size_t n);

}  // namespace tilefire
