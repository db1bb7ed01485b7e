// RMSNorm. The sum of squares is accumulated in double: every matmul tile that fuses this norm into its
// prologue recomputes it, and all of them must get the same bits (fixed lane order, fixed reduction).
#include "ops/rmsnorm.h"

#include <cmath>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace tilefire {

namespace {

// sum_k x[k]^2 in double. Lane j of 16 accumulates k = 16i + j; lanes are summed in a fixed tree; the
// n % 16 tail is added in order. Products of floats are exact in double, so only the adds round.
double sum_of_squares(const float* x, uint32_t n) {
  const uint32_t blocks_end = n & ~15u;
#if defined(__AVX2__) && defined(__FMA__)
  __m256d acc0 = _mm256_setzero_pd(), acc1 = acc0, acc2 = acc0, acc3 = acc0;  // lanes 0-3, 4-7, 8-11, 12-15
  for (uint32_t k = 0; k < blocks_end; k += 16) {
    __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(x + k));
    __m256d v1 = _mm256_cvtps_pd(_mm_loadu_ps(x + k + 4));
    __m256d v2 = _mm256_cvtps_pd(_mm_loadu_ps(x + k + 8));
    __m256d v3 = _mm256_cvtps_pd(_mm_loadu_ps(x + k + 12));
    acc0 = _mm256_fmadd_pd(v0, v0, acc0);
    acc1 = _mm256_fmadd_pd(v1, v1, acc1);
    acc2 = _mm256_fmadd_pd(v2, v2, acc2);
    acc3 = _mm256_fmadd_pd(v3, v3, acc3);
  }
  __m256d s4 = _mm256_add_pd(_mm256_add_pd(acc0, acc2), _mm256_add_pd(acc1, acc3));
  __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
#else
  double lanes[16] = {};
  for (uint32_t k = 0; k < blocks_end; k += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += double(x[k + j]) * double(x[k + j]);
  double s4[4];
  for (int j = 0; j < 4; ++j) s4[j] = (lanes[j] + lanes[j + 8]) + (lanes[j + 4] + lanes[j + 12]);
  double sum = (s4[0] + s4[2]) + (s4[1] + s4[3]);
#endif
  for (uint32_t k = blocks_end; k < n; ++k) sum += double(x[k]) * double(x[k]);
  return sum;
}

}  // namespace

float rms_inverse(const float* x, uint32_t n, float eps) {
  if (n == 0) return float(1.0 / std::sqrt(double(eps)));
  return float(1.0 / std::sqrt(sum_of_squares(x, n) / double(n) + double(eps)));
}

// As transformers' LlamaRMSNorm: (x * inverse_rms) first, then * weight, both in f32.
void rmsnorm_row(const float* x, const float* weight, uint32_t n, float eps, float* out) {
  const float inverse = rms_inverse(x, n, eps);
  for (uint32_t k = 0; k < n; ++k) out[k] = (x[k] * inverse) * weight[k];
}

}  // namespace tilefire
