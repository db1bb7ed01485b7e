// SwiGLU over a row. One std::exp per element: at decode this is `intermediate` elements per layer
// (a few thousand), negligible next to the matmuls that read the weights, so it uses libm's correctly
// rounded-ish expf rather than a hand-written vector polynomial whose error would need its own proof.
#include "ops/activation.h"

namespace tilefire {

void swiglu_rows(const float* gate, const float* up, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

}  // namespace tilefire
