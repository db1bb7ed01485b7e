// The cpu backend against the double-precision reference on random model shapes and random engine
// settings (tests/common/random_shapes.h); and against itself under another draw of threads, schedule,
// policy and granularity, after a longer sequence and a reset: bitwise the same logits (those settings
// move tiles, never a sum, and stale cache entries must not leak). Each case is drawn from its own seed
// (the test's index is the seed less one), so a failure names a case that reruns alone.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/common/compare.h"
#include "tests/common/random_shapes.h"
#include "tests/common/reference_model.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

class RandomShapes : public ::testing::TestWithParam<uint64_t> {};

// Prefill, then six greedy decode steps on the reference's tokens: every step's logits.
std::vector<std::vector<float>> run_case(Engine& engine, const std::vector<int32_t>& prompt, const std::vector<int32_t>& tokens) {
  std::vector<std::vector<float>> logits{engine.prefill(prompt)};
  for (int32_t token : tokens) logits.push_back(engine.decode(token));
  return logits;
}

void check_case(RandomCase& c, const std::filesystem::path& dir, uint64_t seed) {
  write_test_model(c.spec, dir, c.dtype);
  c.options.model_dir = dir.string();
  LoadedModel loaded = load_hf_model(dir);
  ReferenceModel reference(loaded.spec, loaded.weights);
  std::vector<std::vector<double>> expected{reference.forward(c.prompt)};
  std::vector<int32_t> tokens;
  for (int step = 0; step < 6; ++step) {
    const std::vector<double>& last = expected.back();
    tokens.push_back(int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
    expected.push_back(reference.forward({tokens.back()}));
  }

  Engine engine(c.options);
  const std::vector<std::vector<float>> logits = run_case(engine, c.prompt, tokens);
  for (size_t s = 0; s < logits.size(); ++s)
    expect_logits_match_reference(logits[s], expected[s], s == 0 ? "prefill" : "decode step " + std::to_string(s - 1));

  // Other threads, schedule, policy and granularity move tiles, never sums: bitwise the same logits. This
  // engine first runs a longer sequence and is reset, so the KV cache past the case's positions holds
  // stale keys and values that must not leak into it.
  const EngineOptions other = redraw_schedule(c, seed);
  SCOPED_TRACE("against " + describe_schedule(other) + ", after a longer sequence");
  Engine rescheduled(other);
  std::vector<int32_t> longer(std::min<size_t>(c.prompt.size() + 16, other.max_context - 2));
  for (size_t i = 0; i < longer.size(); ++i) longer[i] = int32_t((i * 7 + 3) % c.spec.vocab);
  rescheduled.prefill(longer);
  rescheduled.decode(1);
  rescheduled.reset();
  const std::vector<std::vector<float>> again = run_case(rescheduled, c.prompt, tokens);
  for (size_t s = 0; s < logits.size(); ++s) ASSERT_EQ(again[s], logits[s]) << "step " << s << " is not bitwise the same";
}

TEST_P(RandomShapes, LogitsMatchTheReferenceAfterPrefillAndDecode) {
  RandomCase c = draw_random_case(GetParam());
  SCOPED_TRACE(c.description);
  TempDir dir("random-shape-" + std::to_string(GetParam()));
  try {
    check_case(c, dir.path(), GetParam());
  } catch (const std::exception& e) {  // a refusal or a failure: the case's settings with the message
    ADD_FAILURE() << "threw: " << e.what();
  }
}

// 40 cases by default (about 7 s); TILEFIRE_RANDOM_SHAPES=N runs seeds 1 to N, a longer sweep.
INSTANTIATE_TEST_SUITE_P(Seeds, RandomShapes, ::testing::Range<uint64_t>(1, random_case_count(40) + 1));

}  // namespace
}  // namespace tilefire::testing
