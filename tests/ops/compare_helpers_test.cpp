// The comparisons every numeric test leans on (tests/common/compare.h), checked on values whose verdict is
// known: a helper that let NaN, an infinity or a short vector through would pass every test built on it.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/common/compare.h"

namespace tilefire::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

TEST(CompareHelpers, CloseEnoughHoldsTheToleranceAndNothingNonFiniteSlipsThrough) {
  EXPECT_TRUE(close_enough(1.0, 1.0, 0, 0));
  EXPECT_TRUE(close_enough(1.05, 1.0, 0.1, 0));
  EXPECT_FALSE(close_enough(1.2, 1.0, 0.1, 0));
  EXPECT_TRUE(close_enough(110, 100, 0, 0.1));
  EXPECT_FALSE(close_enough(111, 100, 0, 0.1));
  // NaN on either side never matches, not even NaN.
  EXPECT_FALSE(close_enough(kNaN, 1.0, 1e9, 1e9));
  EXPECT_FALSE(close_enough(1.0, kNaN, 1e9, 1e9));
  EXPECT_FALSE(close_enough(kNaN, kNaN, 1e9, 1e9));
  // An infinity matches only the same infinity, whatever the tolerances.
  EXPECT_TRUE(close_enough(kInf, kInf, 0.1, 0.1));
  EXPECT_TRUE(close_enough(-kInf, -kInf, 0.1, 0.1));
  EXPECT_FALSE(close_enough(1e300, kInf, 0.1, 0.1));
  EXPECT_FALSE(close_enough(-kInf, kInf, 0.1, 0.1));
  EXPECT_FALSE(close_enough(kInf, 1e300, 0.1, 0.1));
  // An infinite tolerance does not let a non-finite value match a finite one.
  EXPECT_FALSE(close_enough(kInf, 1.0, kInf, 0));
  EXPECT_TRUE(close_enough(5.0, 1.0, kInf, 0));
}

TEST(CompareHelpers, CompareCloseCountsMismatchesAndDifferentSizes) {
  const std::vector<double> want = {1.0, 2.0, kInf, 4.0};
  EXPECT_EQ(compare_close(std::vector<double>{1.0, 2.0, kInf, 4.0}, want, 1e-6, 0).count, 0u);
  EXPECT_EQ(compare_close(std::vector<double>{1.0, kNaN, 1e308, 4.0}, want, 1e-6, 0).count, 2u);
  const Mismatches shorter = compare_close(std::vector<double>{1.0, 2.0}, want, 1e-6, 0);
  EXPECT_EQ(shorter.count, 4u);
  EXPECT_NE(shorter.first.find("sizes differ"), std::string::npos) << shorter.first;
}

TEST(CompareHelpers, RelativeL2ErrorIsNaNForNaNsAndForDifferentSizes) {
  EXPECT_DOUBLE_EQ(relative_l2_error(std::vector<double>{3.0, 4.0}, std::vector<double>{3.0, 4.0}), 0.0);
  EXPECT_DOUBLE_EQ(relative_l2_error(std::vector<double>{3.0, 4.0 + 5.0}, std::vector<double>{3.0, 4.0}), 1.0);
  EXPECT_TRUE(std::isnan(relative_l2_error(std::vector<double>{kNaN, 4.0}, std::vector<double>{3.0, 4.0})));
  double shorter = 0;
  EXPECT_NONFATAL_FAILURE(shorter = relative_l2_error(std::vector<double>{3.0}, std::vector<double>{3.0, 4.0}),
                          "sizes differ");
  EXPECT_TRUE(std::isnan(shorter)) << "a prefix that matches must not read as close";
}

TEST(CompareHelpers, ReferenceLogitsToleranceIgnoresInfiniteLogits) {
  // The tolerance scales with the largest finite reference logit; an infinite one must not make it infinite.
  const std::vector<double> reference = {1.0, 2.0, -kInf};
  EXPECT_NONFATAL_FAILURE(expect_logits_match_reference({1.0f, 5.0f, -std::numeric_limits<float>::infinity()}, reference, "x"),
                          "logits differ from the reference");
}

}  // namespace
}  // namespace tilefire::testing
