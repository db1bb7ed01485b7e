// norm_residual (Gemma's post-norm before the residual add) against a double-precision reference: every
// tile of a row, however the columns are cut, normalises by the whole row's RMS.
#include "ops/norm_residual.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/common/compare.h"

namespace tilefire {
namespace {

using testing::count_mismatches;

TEST(NormResidual, MatchesDoubleReferenceInAnyTiling) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (uint32_t cols : {1u, 7u, 64u, 1000u})
    for (uint32_t tokens : {1u, 3u})
      for (uint32_t width : {1u, 16u, 333u}) {
        std::vector<float> y(size_t(tokens) * cols), residual(y.size()), g(cols), out(y.size(), NAN);
        for (float& v : y) v = normal(rng);
        for (float& v : residual) v = normal(rng);
        for (float& v : g) v = 1.0f + 0.1f * normal(rng);  // Gemma's (1 + w), folded in on load
        std::vector<double> want(y.size());
        for (uint32_t m = 0; m < tokens; ++m) {
          double sum = 0;
          for (uint32_t c = 0; c < cols; ++c) sum += double(y[m * cols + c]) * y[m * cols + c];
          const double inverse = 1.0 / std::sqrt(sum / cols + 1e-6);
          for (uint32_t c = 0; c < cols; ++c)
            want[m * cols + c] = double(residual[m * cols + c]) + double(y[m * cols + c]) * inverse * double(g[c]);
        }
        NormResidualParams p{0, 1, 2, 3, cols, 1e-6f};
        void* slots[] = {y.data(), g.data(), residual.data(), out.data()};
        const StepInputs step{nullptr, tokens, 0};
        const TileContext ctx{slots, &step, nullptr};
        for (uint32_t begin = 0; begin < cols; begin += width)
          NormResidualOp::run_tile(p, {begin, std::min(cols, begin + width)}, ctx);
        // The scale rounded once from double, then two multiplies and an add: a few f32 ulps of the
        // larger of the two terms.
        EXPECT_EQ(count_mismatches(out, want, 1e-5, 1e-6,
                                   "cols " + std::to_string(cols) + ", tokens " + std::to_string(tokens) + ", width " + std::to_string(width)),
                  0u);
      }
}

}  // namespace
}  // namespace tilefire
