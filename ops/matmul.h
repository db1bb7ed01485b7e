#pragma once
// Matmul tile: rows [n0, n1) of a weight matrix W [N, K] against M activation rows x [M, K].
// At decode M = 1 (a GEMV); at prefill M > 1 and the kernel reuses each loaded weight row across a block
// of tokens (a tiled GEMM), since weight bytes are what bound the step.
#include <cstddef>
#include <cstdint>

#include "ops/dtype.h"

namespace tilefire {

// y[m * ldy + n] = sum_k W[n * K + k] * x[m * ldx + k]  for m in [0, M), n in [n0, n1). Overwrites y.
// w: [N, K] row-major in `wdtype`; x: [M, K] f32 with row stride ldx; y: [M, ldy] f32.
void matmul_rows(const void* w, DType wdtype, uint32_t K, uint32_t n0, uint32_t n1, const float* x,
                 size_t ldx, uint32_t M, float* y, size_t ldy);

// The scalar reference: same contract, double accumulation, no vectorisation.
void matmul_rows_reference(const void* w, DType wdtype, uint32_t K, uint32_t n0, uint32_t n1,
                           const float* x, size_t ldx, uint32_t M, float* y, size_t ldy);

}  // namespace tilefire
