// silu, gelu_tanh and gated_rows against the formulas in double.
#include "ops/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace tilefire {
namespace {

double silu_double(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_tanh_double(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

TEST(Activation, SiluMatchesDouble) {
  for (float x = -100.0f; x <= 100.0f; x += 0.173f) {
    const double want = silu_double(x);
    // expf (<= 1 ulp), an add and a divide: a few 2^-24 relative.
    EXPECT_TRUE(std::fabs(silu(x) - want) <= 1e-30 + 1e-6 * std::fabs(want)) << "x=" << x << " got " << silu(x);
  }
  EXPECT_EQ(silu(0.0f), 0.0f);
  EXPECT_EQ(silu(-200.0f), 0.0f);  // exp overflows to inf: the limit -0
  EXPECT_EQ(silu(200.0f), 200.0f);
  EXPECT_TRUE(std::isnan(silu(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Activation, GeluTanhMatchesDouble) {
  for (float x = -100.0f; x <= 100.0f; x += 0.173f) {
    const double want = gelu_tanh_double(x);
    // Near x = -3 the result (about -4e-3) is a difference of nearly equal terms: an absolute bound there.
    EXPECT_TRUE(std::fabs(gelu_tanh(x) - want) <= 4e-7 + 2e-6 * std::fabs(want)) << "x=" << x << " got " << gelu_tanh(x);
  }
  EXPECT_EQ(gelu_tanh(0.0f), 0.0f);
  EXPECT_EQ(gelu_tanh(1e30f), 1e30f);  // the cube is +inf, tanh 1: x
  EXPECT_EQ(gelu_tanh(-1e30f), 0.0f);  // -0, the limit
  EXPECT_TRUE(std::isnan(gelu_tanh(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Activation, GatedRowsMatchDoubleAndAlias) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (size_t n : {1u, 7u, 8u, 17u, 1000u}) {
    std::vector<float> gate(n), up(n), out(n);
    for (auto& x : gate) x = dist(rng);
    for (auto& x : up) x = dist(rng);
    for (GateActivation activation : {GateActivation::silu, GateActivation::gelu_tanh}) {
      gated_rows(activation, gate.data(), up.data(), out.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const double act = activation == GateActivation::silu ? silu_double(gate[i]) : gelu_tanh_double(gate[i]);
        const double want = act * up[i];
        EXPECT_TRUE(std::fabs(out[i] - want) <= 1e-6 + 2e-6 * std::fabs(want)) << "n=" << n << " i=" << i;
      }
      std::vector<float> in_place = gate;
      gated_rows(activation, in_place.data(), up.data(), in_place.data(), n);
      EXPECT_EQ(in_place, out);
    }
  }
}

}  // namespace
}  // namespace tilefire
