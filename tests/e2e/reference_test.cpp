// The megakernel against the plain double-precision reference forward pass: logits after the prefill and
// after every decode step, and greedy tokens for 32 steps, for each architecture feature.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "tests/common/compare.h"
#include "tests/common/reference_model.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

int32_t argmax(const std::vector<double>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// From `prompt`: the prefill's logits, the first `checked_steps` decode steps' logits, and 32 greedy
// tokens (the engine fed the reference's choices, so one early slip does not hide the rest).
void expect_greedy_trajectory_matches(Engine& engine, ReferenceModel& reference, const std::vector<int32_t>& prompt,
                                      int checked_steps) {
  std::vector<double> expected = reference.forward(prompt);
  expect_logits_match_reference(engine.prefill(prompt), expected, "prefill");
  std::vector<int32_t> tokens, expected_tokens;
  for (int i = 0; i < 32; ++i) {
    expected_tokens.push_back(argmax(expected));
    const std::vector<float> logits = engine.decode(expected_tokens.back());
    expected = reference.forward({expected_tokens.back()});
    if (i < checked_steps) expect_logits_match_reference(logits, expected, "decode step " + std::to_string(i));
    tokens.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  expected_tokens.erase(expected_tokens.begin());
  expected_tokens.push_back(argmax(expected));
  EXPECT_EQ(tokens, expected_tokens);
}

// A variant's checkpoint written to a fresh folder, the engine on it (2 workers) and the reference on it.
class ReferenceTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    write_test_model(variant_spec(GetParam()), dir_.path());
    EngineOptions options;
    options.model_dir = dir_.path().string();
    options.threads = 2;
    engine_ = std::make_unique<Engine>(options);
    loaded_ = std::make_unique<LoadedModel>(load_hf_model(dir_.path()));
    reference_ = std::make_unique<ReferenceModel>(loaded_->spec, loaded_->weights);
  }

  TempDir dir_{variant_name(GetParam())};
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<ReferenceModel> reference_;
};

TEST_P(ReferenceTest, LogitsMatchAfterPrefillAndEachDecodeStep) {
  Engine& engine = *engine_;
  ReferenceModel& reference = *reference_;

  const std::vector<int32_t> prompt = {1, 17, 256, 3, 511, 42, 7};
  expect_logits_match_reference(engine.prefill(prompt), reference.forward(prompt), "prefill");
  int32_t token = 5;
  for (int step = 0; step < 6; ++step) {
    std::vector<double> expected = reference.forward({token});
    expect_logits_match_reference(engine.decode(token), expected, "decode step " + std::to_string(step));
    token = argmax(expected);
  }
}

TEST_P(ReferenceTest, GreedyTokensAgreeFor32Steps) {
  Engine& engine = *engine_;
  ReferenceModel& reference = *reference_;
  GenerateRequest request;
  request.prompt = {3, 1, 4, 1, 5};
  request.max_new_tokens = 32;
  request.stop_at_eos = false;
  GenerateResult result = engine.generate(request);

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
                                           Variant::tied, Variant::mistral, Variant::phi3, Variant::phi3_longrope,
                                           Variant::phi3_partial, Variant::mistral_window, Variant::qwen2_window,
                                           Variant::smollm3, Variant::granite, Variant::gemma3, Variant::gemma2, Variant::gemma),
                         [](const auto& info) { return std::string(variant_name(info.param)); });

// Split-KV attention at decode (each KV head's positions in chunk tiles, then a merge per head; what a GPU
// runs by default) against the reference: logits at every decode step and 32 greedy tokens, with chunk
// counts that leave chunks empty early on (7 chunks, a 5-token prompt).
TEST(SplitKvReference, DecodeLogitsAndGreedyTokensMatch) {
  TempDir dir("split-kv");
  write_test_model(variant_spec(Variant::llama), dir.path());
  LoadedModel loaded = load_hf_model(dir.path());
  for (uint32_t kv_splits : {3u, 7u}) {
    SCOPED_TRACE(std::to_string(kv_splits) + " KV splits");
    EngineOptions options;
    options.model_dir = dir.path().string();
    options.threads = 2;
    options.kv_splits = kv_splits;
    Engine engine(options);
    ReferenceModel reference(loaded.spec, loaded.weights);
    expect_greedy_trajectory_matches(engine, reference, {3, 1, 4, 1, 5}, 8);
  }
}

// Sliding windows with split-KV decode: the chunks cut each token's window (7 positions, every layer; 4 on
// Qwen2's second layer and Gemma 2's first), not the whole cache, with the prompt already past the window;
// Gemma 2's chunk records hold soft-capped scores.
TEST(SplitKvReference, SlidingWindowDecodeLogitsAndGreedyTokensMatch) {
  for (Variant variant : {Variant::mistral_window, Variant::qwen2_window, Variant::gemma2}) {
    SCOPED_TRACE(variant_name(variant));
    TempDir dir(std::string("split-kv-") + variant_name(variant));
    write_test_model(variant_spec(variant), dir.path());
    LoadedModel loaded = load_hf_model(dir.path());
    EngineOptions options;
    options.model_dir = dir.path().string();
    options.threads = 2;
    options.kv_splits = 3;
    Engine engine(options);
    ReferenceModel reference(loaded.spec, loaded.weights);
    expect_greedy_trajectory_matches(engine, reference, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, 8);
  }
}

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

  expect_greedy_trajectory_matches(engine, reference, {72, 101, 108, 108, 111}, 4);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PresetReferenceTest, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tilefire::testing
