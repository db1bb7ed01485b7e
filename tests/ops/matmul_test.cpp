// matmul_rows (the vectorised GEMV/GEMM tile) against matmul_rows_reference (scalar, double), over
// awkward shapes and all weight dtypes, plus the determinism contract and NaN/denormal propagation.
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include "tests/common/compare.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tilefire {
namespace {

using testing::count_mismatches;

// Weights [N, K] generated in f32, stored in `dtype` with ops/dtype.h's conversions. Both the kernel
// and the reference read these same converted bytes.
std::vector<uint8_t> make_weights(DType dtype, uint32_t N, uint32_t K, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint8_t> bytes(size_t(N) * K * dtype_size(dtype));
  for (size_t i = 0; i < size_t(N) * K; ++i) {
    const float v = dist(rng);
    if (dtype == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

void set_weight(std::vector<uint8_t>& bytes, DType dtype, size_t index, float v) {
  if (dtype == DType::f32) {
    std::memcpy(bytes.data() + 4 * index, &v, 4);
  } else {
    const uint16_t h = dtype == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
    std::memcpy(bytes.data() + 2 * index, &h, 2);
  }
}

std::vector<float> make_activations(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(count);
  for (float& v : x) v = dist(rng);
  return x;
}

constexpr DType kAllDTypes[] = {DType::f32, DType::bf16, DType::f16};

// Tolerance. The kernel and the reference see the same converted weights and activations, so the only
// difference is the accumulation: f32 with FMA in 16 lanes (each lane a chain of ~K/16 roundings),
// a 4-level tree and up to 15 tail steps, against double. With terms in [-1, 1] of random sign the
// partial sums grow like sqrt(K) and so do the accumulated roundings: the error is a few
// 2^-24 * sqrt(K) * |partial sum| ~ 1e-7 * K. atol = 1e-6 * sqrt(K) covers K <= 1000 by a wide
// margin near zero outputs (cancellation), rtol = 1e-5 elsewhere. The weight dtype changes nothing here
// (it changes only the values), so one tolerance serves f32, bf16 and f16.
double matmul_atol(uint32_t K) { return 1e-6 * std::sqrt(double(K)) + 1e-7; }
constexpr double kMatmulRtol = 1e-5;

TEST(MatmulRows, MatchesReferenceOnAwkwardShapesAllDTypes) {
  std::mt19937 rng(42);
  const uint32_t N = 13, n0 = 3, n1 = 12;  // a tile with odd bounds: 9 rows = 2 blocks of 4 + 1
  for (DType dtype : kAllDTypes) {
    for (uint32_t K : {1u, 7u, 8u, 17u, 31u, 64u, 257u, 1000u}) {
      const auto w = make_weights(dtype, N, K, rng);
      for (uint32_t M : {1u, 2u, 3u, 5u, 9u}) {
        const size_t ldx = K + 3, ldy = N + 2;  // strides wider than the rows
        const auto x = make_activations(size_t(M) * ldx, rng);
        const float sentinel = -12345.0f;
        std::vector<float> got(size_t(M) * ldy, sentinel), want(size_t(M) * ldy, sentinel);
        matmul_rows(w.data(), dtype, K, n0, n1, x.data(), ldx, M, got.data(), ldy);
        matmul_rows_reference(w.data(), dtype, K, n0, n1, x.data(), ldx, M, want.data(), ldy);
        const std::string what = std::string(dtype_name(dtype)) + " K=" + std::to_string(K) +
                                 " M=" + std::to_string(M);
        EXPECT_EQ(count_mismatches(got, want, matmul_atol(K), kMatmulRtol, what), 0u) << what;
        // Only [n0, n1) of each row is written.
        for (uint32_t m = 0; m < M; ++m)
          for (uint32_t n = 0; n < ldy; ++n) {
            if (n < n0 || n >= n1) {
              ASSERT_EQ(got[m * ldy + n], sentinel) << what << " wrote outside its tile";
            }
          }
      }
    }
  }
}

TEST(MatmulRows, LargeGemvMatchesReference) {
  std::mt19937 rng(7);
  const uint32_t N = 67, K = 4096;
  for (DType dtype : kAllDTypes) {
    const auto w = make_weights(dtype, N, K, rng);
    const auto x = make_activations(K, rng);
    std::vector<float> got(N), want(N);
    matmul_rows(w.data(), dtype, K, 0, N, x.data(), K, 1, got.data(), N);
    matmul_rows_reference(w.data(), dtype, K, 0, N, x.data(), K, 1, want.data(), N);
    EXPECT_EQ(count_mismatches(got, want, matmul_atol(K), kMatmulRtol, std::string(dtype_name(dtype))), 0u);
  }
}

// y[m][n] must not depend on the tile [n0, n1) that computed it nor on M: bitwise, not approximately.
TEST(MatmulRows, BitwiseIndependentOfTilingAndBatch) {
  std::mt19937 rng(3);
  const uint32_t N = 37;
  for (DType dtype : kAllDTypes) {
    for (uint32_t K : {31u, 257u, 1024u}) {
      const auto w = make_weights(dtype, N, K, rng);
      const uint32_t M = 9;
      const auto x = make_activations(size_t(M) * K, rng);

      std::vector<float> whole(size_t(M) * N);  // [M, N], all rows and tokens in one call
      matmul_rows(w.data(), dtype, K, 0, N, x.data(), K, M, whole.data(), N);

      std::vector<float> tiled(size_t(M) * N, 0.0f);  // odd row tiles
      const uint32_t cuts[] = {0, 3, 10, 11, 18, 37};
      for (size_t c = 0; c + 1 < std::size(cuts); ++c)
        matmul_rows(w.data(), dtype, K, cuts[c], cuts[c + 1], x.data(), K, M, tiled.data(), N);
      EXPECT_EQ(std::memcmp(whole.data(), tiled.data(), whole.size() * 4), 0)
          << dtype_name(dtype) << " K=" << K << ": row tiling changed the bits";

      std::vector<float> batch5(size_t(5) * N);  // tokens 2..6 as an M=5 batch
      matmul_rows(w.data(), dtype, K, 0, N, x.data() + 2 * K, K, 5, batch5.data(), N);
      EXPECT_EQ(std::memcmp(whole.data() + 2 * N, batch5.data(), batch5.size() * 4), 0)
          << dtype_name(dtype) << " K=" << K << ": M=5 batch differs from M=9";

      for (uint32_t m = 0; m < M; ++m) {  // each token alone (M = 1, the decode GEMV)
        std::vector<float> single(N);
        matmul_rows(w.data(), dtype, K, 0, N, x.data() + size_t(m) * K, K, 1, single.data(), N);
        EXPECT_EQ(std::memcmp(whole.data() + size_t(m) * N, single.data(), N * 4), 0)
            << dtype_name(dtype) << " K=" << K << " token " << m << ": M=1 differs from M=9";
      }
    }
  }
}

TEST(MatmulRows, NanWeightGivesNanOutputOnlyInItsRow) {
  std::mt19937 rng(5);
  const uint32_t N = 9, K = 40;  // NaN in the vector body of row 2 and in the scalar tail of row 6
  for (DType dtype : kAllDTypes) {
    auto w = make_weights(dtype, N, K, rng);
    set_weight(w, dtype, 2 * K + 5, std::numeric_limits<float>::quiet_NaN());
    set_weight(w, dtype, 6 * K + 39, std::numeric_limits<float>::quiet_NaN());
    const uint32_t M = 3;
    const auto x = make_activations(size_t(M) * K, rng);
    std::vector<float> y(size_t(M) * N);
    matmul_rows(w.data(), dtype, K, 0, N, x.data(), K, M, y.data(), N);
    for (uint32_t m = 0; m < M; ++m)
      for (uint32_t n = 0; n < N; ++n) {
        const bool poisoned_row = n == 2 || n == 6;
        EXPECT_EQ(std::isnan(y[m * N + n]), poisoned_row) << dtype_name(dtype) << " m=" << m << " n=" << n;
        EXPECT_EQ(std::isfinite(y[m * N + n]), !poisoned_row) << dtype_name(dtype) << " m=" << m << " n=" << n;
      }
  }
}

TEST(MatmulRows, NanActivationPoisonsOnlyItsToken) {
  std::mt19937 rng(6);
  const uint32_t N = 5, K = 64, M = 3;
  const auto w = make_weights(DType::bf16, N, K, rng);
  auto x = make_activations(size_t(M) * K, rng);
  x[1 * K + 17] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y(size_t(M) * N);
  matmul_rows(w.data(), DType::bf16, K, 0, N, x.data(), K, M, y.data(), N);
  for (uint32_t m = 0; m < M; ++m)
    for (uint32_t n = 0; n < N; ++n) EXPECT_EQ(std::isnan(y[m * N + n]), m == 1) << "m=" << m << " n=" << n;
}

// Denormal activations and weights are computed, not flushed to zero: 35 * 2^-140 is exact in f32.
TEST(MatmulRows, DenormalsAreNotFlushed) {
  const uint32_t K = 35;  // 32 in the vector body, 3 in the tail
  const float tiny = std::ldexp(1.0f, -140);  // f32 subnormal
  std::vector<float> x(K, tiny);
  for (DType dtype : kAllDTypes) {
    std::vector<uint8_t> w(K * dtype_size(dtype));
    for (uint32_t k = 0; k < K; ++k) set_weight(w, dtype, k, 1.0f);
    float y = 0.0f;
    matmul_rows(w.data(), dtype, K, 0, 1, x.data(), K, 1, &y, 1);
    EXPECT_EQ(y, 35.0f * tiny) << dtype_name(dtype);
  }
  // f16 subnormal weights (2^-20) against normal activations.
  std::vector<uint8_t> w16(K * 2);
  for (uint32_t k = 0; k < K; ++k) set_weight(w16, DType::f16, k, std::ldexp(1.0f, -20));
  ASSERT_EQ(f16_to_f32(f32_to_f16(std::ldexp(1.0f, -20))), std::ldexp(1.0f, -20));
  std::vector<float> ones(K, 1.0f);
  float y = 0.0f;
  matmul_rows(w16.data(), DType::f16, K, 0, 1, ones.data(), K, 1, &y, 1);
  EXPECT_EQ(y, 35.0f * std::ldexp(1.0f, -20));
}

TEST(MatmulRows, EmptyRangeWritesNothing) {
  const float w[4] = {1, 2, 3, 4}, x[4] = {1, 1, 1, 1};
  float y[2] = {7.0f, 7.0f};
  matmul_rows(w, DType::f32, 4, 1, 1, x, 4, 1, y, 2);
  matmul_rows(w, DType::f32, 4, 0, 1, x, 4, 0, y, 2);
  EXPECT_EQ(y[0], 7.0f);
  EXPECT_EQ(y[1], 7.0f);
}

}  // namespace
}  // namespace tilefire
