// The megakernel against the plain double-precision reference forward pass: logits after the prefill and
// after every decode step, and greedy tokens for 32 steps, for each architecture feature.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/common/compare.h"
#include "tests/common/reference_model.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

// f32 weights, f32 activations: the megakernel's logits are within 1e-4 of the largest reference logit.
void expect_logits_match(const std::vector<float>& actual, const std::vector<double>& expected, const std::string& where) {
  double scale = 0;
  for (double v : expected) scale = std::max(scale, std::fabs(v));
  Mismatches m = compare_close(actual, expected, 1e-4 * scale, 1e-4);
  EXPECT_EQ(m.count, 0u) << where << ": " << m.count << " logits differ from the reference\n" << m.first;
}

int32_t argmax(const std::vector<double>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

class ReferenceTest : public ::testing::TestWithParam<Variant> {};

TEST_P(ReferenceTest, LogitsMatchAfterPrefillAndEachDecodeStep) {
  const ModelSpec spec = variant_spec(GetParam());
  TempDir dir(variant_name(GetParam()));
  write_test_model(spec, dir.path());
  EngineOptions options;
  options.model_dir = dir.path().string();
  options.threads = 2;
  Engine engine(options);
  LoadedModel loaded = load_hf_model(dir.path());
  ReferenceModel reference(loaded.spec, loaded.weights);

  const std::vector<int32_t> prompt = {1, 17, 256, 3, 511, 42, 7};
  expect_logits_match(engine.prefill(prompt), reference.forward(prompt), "prefill");
  int32_t token = 5;
  for (int step = 0; step < 6; ++step) {
    std::vector<double> expected = reference.forward({token});
    expect_logits_match(engine.decode(token), expected, "decode step " + std::to_string(step));
    token = argmax(expected);
  }
}

TEST_P(ReferenceTest, GreedyTokensAgreeFor32Steps) {
  const ModelSpec spec = variant_spec(GetParam());
  TempDir dir(variant_name(GetParam()));
  write_test_model(spec, dir.path());
  EngineOptions options;
  options.model_dir = dir.path().string();
  options.threads = 2;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = {3, 1, 4, 1, 5};
  request.max_new_tokens = 32;
  request.stop_at_eos = false;
  GenerateResult result = engine.generate(request);

  LoadedModel loaded = load_hf_model(dir.path());
  ReferenceModel reference(loaded.spec, loaded.weights);
  std::vector<int32_t> expected;
  std::vector<double> logits = reference.forward(request.prompt);
  for (int i = 0; i < 32; ++i) {
    expected.push_back(argmax(logits));
    logits = reference.forward({expected.back()});
  }
  EXPECT_EQ(result.tokens, expected);
}

INSTANTIATE_TEST_SUITE_P(Architectures, ReferenceTest,
                         ::testing::Values(Variant::llama, Variant::llama3_rope, Variant::qwen2_bias, Variant::qwen3_qk_norm,
                                           Variant::tied, Variant::mistral),
                         [](const auto& info) { return std::string(variant_name(info.param)); });

// The whole `tiny` preset (4 layers) in each weight dtype: the reference reads the same stored weights,
// widened to double, so the tolerance stays 1e-4 whatever the dtype.
class PresetReferenceTest : public ::testing::TestWithParam<DType> {};

TEST_P(PresetReferenceTest, TinyLogitsAndGreedyTokensMatch) {
  const ModelSpec spec = preset_spec("tiny", GetParam());
  TempDir dir(std::string("tiny-") + std::string(dtype_name(GetParam())));
  write_test_model(spec, dir.path(), GetParam());
  EngineOptions options;
  options.model_dir = dir.path().string();
  options.threads = 2;
  Engine engine(options);
  ASSERT_EQ(engine.model().dtype, dtype_name(GetParam()));
  LoadedModel loaded = load_hf_model(dir.path());
  ReferenceModel reference(loaded.spec, loaded.weights);

  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111};
  std::vector<double> expected = reference.forward(prompt);
  expect_logits_match(engine.prefill(prompt), expected, "prefill");
  std::vector<int32_t> tokens, expected_tokens;
  for (int i = 0; i < 32; ++i) {
    expected_tokens.push_back(argmax(expected));
    std::vector<float> logits = engine.decode(expected_tokens.back());
    expected = reference.forward({expected_tokens.back()});
    if (i < 4) expect_logits_match(logits, expected, "decode step " + std::to_string(i));
    tokens.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  expected_tokens.erase(expected_tokens.begin());
  expected_tokens.push_back(argmax(expected));
  EXPECT_EQ(tokens, expected_tokens);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PresetReferenceTest, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tilefire::testing
