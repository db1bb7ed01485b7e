#pragma once
// RMSNorm: out[k] = x[k] / sqrt(mean(x^2) + eps) * weight[k]. Fused into the prologue of the matmul that
// consumes it (each tile recomputes the row's scale: n flops against the tile's rows * n weight reads).
#include <cstdint>

namespace tilefire {

// 1 / sqrt(mean(x[0..n)^2) + eps), accumulated in double so every tile gets the same bits.
float rms_inverse(const float* x, uint32_t n, float eps);

// out[k] = x[k] * rms_inverse(x) * weight[k]; weight is f32 [n]. out may alias x.
void rmsnorm_row(const float* x, const float* weight, uint32_t n, float eps, float* out);

}  // namespace tilefire
