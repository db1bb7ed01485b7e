// The gated rows of an MLP. One std::exp or std::tanh per element: at decode this is `intermediate`
// elements per layer (a few thousand), negligible next to the matmuls that read the weights, so it uses
// libm's rather than a hand-written vector polynomial whose error would need its own proof.
#include "ops/activation.h"

namespace tilefire {

void gated_rows(GateActivation activation, const float* gate, const float* up, float* out, size_t n) {
  if (activation == GateActivation::gelu_tanh) {
    for (size_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

}  // namespace tilefire
