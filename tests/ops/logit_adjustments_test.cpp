// A request's logit bias and penalties (ops/logit_adjustments.h) on hand-made logits, against values
// worked out by hand from the rules: bias first, then the repetition penalty (prompt and reply, once per
// token, divided when positive, multiplied when not), then presence (once) and frequency (per count).
#include "ops/logit_adjustments.h"

#include <gtest/gtest.h>

#include <vector>

namespace tilefire {
namespace {

TEST(LogitAdjustments, BiasThenRepetitionThenPresenceAndFrequency) {
  const std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.5f, 3.0f, -0.5f};
  TokenCounts counts({1, 2, 2});  // the prompt holds 1 and 2
  for (int32_t token : {2, 3, 3}) counts.add_generated(token);  // the reply holds 2 once, 3 twice
  LogitAdjustments a;
  a.bias = {{0, 1.0f}, {3, -2.0f}, {0, 0.5f}};
  a.repetition = 2.0f;
  a.presence = 0.5f;
  a.frequency = 0.25f;
  std::vector<float> out;
  counts.adjust(logits.data(), 6, a, out);
  const std::vector<float> expected = {
      2.5f,                         // 1 + 1 + 0.5: biased twice, never seen
      1.0f,                         // 2 / 2: in the prompt, positive
      -1.0f * 2.0f - 0.5f - 0.25f,  // -1 * 2 (prompt and reply, penalised once), presence, one count
      (0.5f - 2.0f) * 2.0f - 0.5f - 0.5f,  // biased to -1.5, then * 2 (reply only), presence, two counts
      3.0f,                         // untouched
      -0.5f};
  ASSERT_EQ(out.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(out[i], expected[i]) << "token " << i;
}

TEST(LogitAdjustments, NothingAskedChangesNothingAndNegativePenaltiesEncourage) {
  const std::vector<float> logits = {0.25f, -3.0f, 7.0f};
  TokenCounts counts({0});
  counts.add_generated(2);
  LogitAdjustments none;
  EXPECT_FALSE(none.active());
  std::vector<float> out;
  counts.adjust(logits.data(), 3, none, out);
  EXPECT_EQ(out, logits);
  LogitAdjustments encourage;
  encourage.repetition = 0.5f;
  encourage.presence = -1.0f;
  EXPECT_TRUE(encourage.active());
  counts.adjust(logits.data(), 3, encourage, out);
  EXPECT_FLOAT_EQ(out[0], 0.5f);        // 0.25 / 0.5
  EXPECT_FLOAT_EQ(out[1], -3.0f);       // never seen
  EXPECT_FLOAT_EQ(out[2], 14.0f + 1.0f);  // 7 / 0.5, then + 1
}

}  // namespace
}  // namespace tilefire
