// The cpu backend against the double-precision reference on random model shapes and random engine
// settings (tests/common/random_shapes.h). Each case is drawn from its own seed (the test's index is the
// seed less one), so a failure names a case that reruns alone.
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

void check_case(RandomCase& c, const std::filesystem::path& dir) {
  write_test_model(c.spec, dir, c.dtype);
  c.options.model_dir = dir.string();
  Engine engine(c.options);
  LoadedModel loaded = load_hf_model(dir);
  ReferenceModel reference(loaded.spec, loaded.weights);

  std::vector<double> expected = reference.forward(c.prompt);
  expect_logits_match_reference(engine.prefill(c.prompt), expected, "prefill");
  for (int step = 0; step < 6; ++step) {
    const int32_t token = int32_t(std::max_element(expected.begin(), expected.end()) - expected.begin());
    expected = reference.forward({token});
    expect_logits_match_reference(engine.decode(token), expected, "decode step " + std::to_string(step));
  }
}

TEST_P(RandomShapes, LogitsMatchTheReferenceAfterPrefillAndDecode) {
  RandomCase c = draw_random_case(GetParam());
  SCOPED_TRACE(c.description);
  TempDir dir("random-shape-" + std::to_string(GetParam()));
  try {
    check_case(c, dir.path());
  } catch (const std::exception& e) {  // a refusal or a failure: the case's settings with the message
    ADD_FAILURE() << "threw: " << e.what();
  }
}

// 40 cases by default (about 7 s); TILEFIRE_RANDOM_SHAPES=N runs seeds 1 to N, a longer sweep.
INSTANTIATE_TEST_SUITE_P(Seeds, RandomShapes, ::testing::Range<uint64_t>(1, random_case_count(40) + 1));

}  // namespace
}  // namespace tilefire::testing
