// Rotary embedding: hand-checked values, the inverse frequencies (plain, Llama 3 and LongRoPE scaled) against
// the formulas evaluated in double, and rope_apply_head against a double rotation.
#include "ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace tilefire {
namespace {

bool close(double a, double b, double atol, double rtol) { return std::fabs(a - b) <= atol + rtol * std::fabs(b); }

TEST(Rope, PositionZeroIsIdentity) {
  const auto inv_freq = rope_inverse_frequencies(64, 10000.0f, RopeScaling{});
  std::vector<float> head(64);
  for (size_t i = 0; i < head.size(); ++i) head[i] = float(i) * 0.37f - 5.0f;
  const auto original = head;
  rope_apply_head(head.data(), 64, 0, inv_freq.data());
  EXPECT_EQ(head, original);
}

// head_dim 4, theta 10000: inv_freq = {1, 10000^-1/2 = 0.01}, so at position 1 the pairs (0, 2) and
// (1, 3) rotate by 1 and 0.01 radians.
TEST(Rope, HandCheckedPositionOne) {
  const auto inv_freq = rope_inverse_frequencies(4, 10000.0f, RopeScaling{});
  ASSERT_EQ(inv_freq.size(), 2u);
  EXPECT_EQ(inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(inv_freq[1], 0.01f);
  float head[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  rope_apply_head(head, 4, 1, inv_freq.data());
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  EXPECT_NEAR(head[0], 1.0 * c1 - 3.0 * s1, 1e-6);
  EXPECT_NEAR(head[2], 3.0 * c1 + 1.0 * s1, 1e-6);
  EXPECT_NEAR(head[1], 2.0 * c2 - 4.0 * s2, 1e-6);
  EXPECT_NEAR(head[3], 4.0 * c2 + 2.0 * s2, 1e-6);
}

TEST(Rope, InverseFrequenciesMatchFormula) {
  for (uint32_t hd : {32u, 64u, 128u}) {
    for (float theta : {10000.0f, 500000.0f, 1000000.0f}) {
      const auto inv_freq = rope_inverse_frequencies(hd, theta, RopeScaling{});
      ASSERT_EQ(inv_freq.size(), hd / 2);
      for (uint32_t i = 0; i < hd / 2; ++i) {
        const double want = 1.0 / std::pow(double(theta), 2.0 * i / hd);
        EXPECT_TRUE(close(inv_freq[i], want, 0.0, 2e-7)) << "hd=" << hd << " i=" << i << " got " << inv_freq[i]
                                                         << " want " << want;
      }
    }
  }
}

TEST(Rope, RejectsOddHeadDim) {
  EXPECT_THROW(rope_inverse_frequencies(7, 10000.0f, RopeScaling{}), std::invalid_argument);
}

// Llama 3.1 scaling: factor 32, low 1, high 4, original 8192, head_dim 64, theta 500000. Wavelengths
// above 8192 are divided by 32, below 2048 kept, between interpolated. The expected values are the
// transformers formula evaluated here in double.
TEST(Rope, Llama3ScalingBranches) {
  RopeScaling scaling;
  scaling.llama3 = true;
  scaling.factor = 32.0f;
  scaling.low_freq_factor = 1.0f;
  scaling.high_freq_factor = 4.0f;
  scaling.original_max_position = 8192;
  const uint32_t hd = 64;
  const double theta = 500000.0;
  const auto plain = rope_inverse_frequencies(hd, float(theta), RopeScaling{});
  const auto scaled = rope_inverse_frequencies(hd, float(theta), scaling);
  ASSERT_EQ(scaled.size(), hd / 2);
  const double low_wavelen = 8192.0 / 1.0, high_wavelen = 8192.0 / 4.0;
  int high = 0, mid = 0, low = 0;
  for (uint32_t i = 0; i < hd / 2; ++i) {
    const double base = 1.0 / std::pow(theta, 2.0 * i / hd);
    const double wavelen = 2.0 * std::numbers::pi / base;
    double want;
    if (wavelen > low_wavelen) {
      want = base / 32.0;
      ++low;
    } else if (wavelen < high_wavelen) {
      want = base;
      ++high;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1.0 - smooth) * base / 32.0 + smooth * base;
      ++mid;
    }
    EXPECT_TRUE(close(scaled[i], want, 0.0, 1e-6)) << "i=" << i << " got " << scaled[i] << " want " << want;
  }
  // The three branches are all exercised: wavelengths 2048..8192 are i = 15, 16, 17.
  EXPECT_EQ(high, 15);
  EXPECT_EQ(mid, 3);
  EXPECT_EQ(low, 14);
  EXPECT_EQ(scaled[0], plain[0]);                 // high frequency: untouched, bitwise
  EXPECT_FLOAT_EQ(scaled[31], plain[31] / 32.0f);  // low frequency: divided by factor
  EXPECT_GT(scaled[16], plain[16] / 32.0f);        // mid: strictly between
  EXPECT_LT(scaled[16], plain[16]);
}

// LongRoPE (Phi-3): each frequency divided by its factor, the short ones while the context is within the
// pretrained one and the long ones past it; cos and sin multiplied by its attention factor.
TEST(Rope, LongRopeFactorsByContext) {
  RopeScaling scaling;
  scaling.longrope = true;
  scaling.original_max_position = 4096;
  scaling.attention_factor = 1.25f;
  const uint32_t hd = 96;
  const double theta = 10000.0;
  for (uint32_t i = 0; i < hd / 2; ++i) {
    scaling.short_factor.push_back(1.0f + 0.02f * float(i));
    scaling.long_factor.push_back(1.0f + 1.7f * float(i));
  }
  for (uint32_t context : {0u, 2047u, 4096u, 4097u, 131072u}) {
    SCOPED_TRACE("context " + std::to_string(context));
    const auto got = rope_inverse_frequencies(hd, float(theta), scaling, context);
    ASSERT_EQ(got.size(), hd / 2);
    const std::vector<float>& factors = context > 4096 ? scaling.long_factor : scaling.short_factor;
    for (uint32_t i = 0; i < hd / 2; ++i) {
      const double want = 1.0 / (double(factors[i]) * std::pow(theta, 2.0 * i / hd));
      EXPECT_TRUE(close(got[i], want, 0.0, 1e-6)) << "i=" << i << " got " << got[i] << " want " << want;
    }
  }
  EXPECT_EQ(rope_magnitude(scaling), 1.25f);
  EXPECT_EQ(rope_magnitude(RopeScaling{}), 1.0f);
  // cos and sin multiplied by it: the rotated head is the plain rotation times the magnitude.
  const auto inv_freq = rope_inverse_frequencies(hd, float(theta), scaling, 100);
  std::vector<float> plain(hd), scaled(hd);
  for (uint32_t d = 0; d < hd; ++d) plain[d] = scaled[d] = 0.1f * float(d % 7) - 0.3f;
  rope_apply_head(plain.data(), hd, 37, inv_freq.data());
  rope_apply_head(scaled.data(), hd, 37, inv_freq.data(), 1.25f);
  for (uint32_t d = 0; d < hd; ++d) EXPECT_NEAR(scaled[d], 1.25 * plain[d], 1e-6) << d;
  scaling.long_factor.pop_back();  // a list of the wrong length is refused, not read past its end
  EXPECT_THROW(rope_inverse_frequencies(hd, float(theta), scaling, 8192), std::invalid_argument);
}

TEST(Rope, ApplyMatchesDoubleRotation) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (uint32_t hd : {32u, 64u, 128u}) {
    const auto inv_freq = rope_inverse_frequencies(hd, 500000.0f, RopeScaling{});
    for (uint32_t position : {0u, 1u, 2u, 17u, 300u, 131071u}) {
      std::vector<float> head(hd);
      for (auto& v : head) v = dist(rng);
      const auto original = head;
      rope_apply_head(head.data(), hd, position, inv_freq.data());
      const uint32_t half = hd / 2;
      int mismatches = 0;
      for (uint32_t i = 0; i < half; ++i) {
        // The contract: the angle is the float32 product, the rotation exact from there.
        const double angle = double(float(position) * inv_freq[i]);
        const double c = std::cos(angle), s = std::sin(angle);
        const double want0 = original[i] * c - original[i + half] * s;
        const double want1 = original[i + half] * c + original[i] * s;
        // cos/sin rounded to f32 plus two products and a sum in f32: a few ulp of |x| (<= 3).
        for (auto [got, want] : {std::pair{head[i], want0}, std::pair{head[i + half], want1}}) {
          if (!close(got, want, 2e-6, 1e-6) && mismatches++ < 5)
            ADD_FAILURE() << "hd=" << hd << " pos=" << position << " i=" << i << " got " << got << " want " << want;
        }
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

}  // namespace
}  // namespace tilefire
