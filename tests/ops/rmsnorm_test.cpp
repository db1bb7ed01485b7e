// rms_inverse / rmsnorm_row against a double-precision reference.
#include "ops/rmsnorm.h"

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

std::vector<double> rmsnorm_double(const std::vector<float>& x, const std::vector<float>& w, float eps) {
  double sum = 0.0;
  for (float v : x) sum += double(v) * double(v);
  const double inverse = 1.0 / std::sqrt(sum / double(x.size()) + double(eps));
  std::vector<double> out(x.size());
  for (size_t k = 0; k < x.size(); ++k) out[k] = double(x[k]) * inverse * double(w[k]);
  return out;
}

// Tolerance: the scale is computed in double and rounded once (0.5 ulp); each output is then two f32
// multiplies (1 ulp more): a few 2^-24 relative, so rtol 1e-6; atol covers outputs near zero.
constexpr double kRtol = 1e-6, kAtol = 1e-7;

TEST(RmsNorm, MatchesDoubleReferenceOnAwkwardSizes) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (uint32_t n : {1u, 7u, 8u, 16u, 17u, 31u, 64u, 257u, 1000u, 4096u}) {
    std::vector<float> x(n), w(n);
    for (auto& v : x) v = dist(rng);
    for (auto& v : w) v = dist(rng);
    const float eps = 1e-5f;
    std::vector<float> out(n);
    rmsnorm_row(x.data(), w.data(), n, eps, out.data());
    EXPECT_EQ(count_mismatches(out, rmsnorm_double(x, w, eps), kAtol, kRtol, "n=" + std::to_string(n)), 0u);

    // In place (out aliases x) gives the same bits.
    std::vector<float> in_place = x;
    rmsnorm_row(in_place.data(), w.data(), n, eps, in_place.data());
    EXPECT_EQ(std::memcmp(in_place.data(), out.data(), n * 4), 0) << "n=" << n;
  }
}

TEST(RmsNorm, InverseIsDeterministicAndUsesEps) {
  std::vector<float> zeros(100, 0.0f);
  EXPECT_FLOAT_EQ(rms_inverse(zeros.data(), 100, 1e-6f), float(1.0 / std::sqrt(double(1e-6f))));
  std::vector<float> threes(33, 3.0f);  // mean square 9 -> 1/3
  EXPECT_FLOAT_EQ(rms_inverse(threes.data(), 33, 0.0f), 1.0f / 3.0f);
}

// Squares of 1e20 overflow f32 but not the double accumulator.
TEST(RmsNorm, LargeValuesDoNotOverflow) {
  std::vector<float> x(64, 1e20f), w(64, 1.0f), out(64);
  EXPECT_FLOAT_EQ(rms_inverse(x.data(), 64, 1e-5f), 1e-20f);
  rmsnorm_row(x.data(), w.data(), 64, 1e-5f, out.data());
  for (float v : out) EXPECT_FLOAT_EQ(v, 1.0f);
}

TEST(RmsNorm, NanPropagates) {
  std::vector<float> x(40, 1.0f), w(40, 1.0f), out(40);
  x[37] = std::numeric_limits<float>::quiet_NaN();  // in the scalar tail
  rmsnorm_row(x.data(), w.data(), 40, 1e-5f, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  x[37] = 1.0f;
  x[3] = std::numeric_limits<float>::quiet_NaN();  // in the vector body
  EXPECT_TRUE(std::isnan(rms_inverse(x.data(), 40, 1e-5f)));
}

}  // namespace
}  // namespace tilefire
