// ModelSpec: config.json parsing for each architecture (SmolLM3's, Granite's and Gemma 3's own keys:
// model_spec_architectures_test.cpp), presets, the config round trip, and every way a config can be wrong
// (each must give an InputError naming the file and the key).
#include "graph/model_spec.h"

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/common/compare.h"
#include "tests/common/spec_compare.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

namespace tilefire {
namespace {

// The message of the InputError that `action` throws.
std::string input_error_of(const std::function<void()>& action) { return testing::message_of<InputError>(action); }

using ::testing::HasSubstr;
using nlohmann::json;
using testing::expect_same_spec;

// Meta Llama-3.2-1B's config.json (abridged to the keys that matter plus a few that do not).
const char* kLlama32Config = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
})";

TEST(ModelSpecParse, Llama3WithRopeScalingAndTiedEmbeddings) {
  ModelSpec spec = parse_hf_config_text(kLlama32Config, "llama/config.json");
  EXPECT_EQ(spec.arch, Architecture::llama);
  EXPECT_EQ(spec.arch_name, "LlamaForCausalLM");
  EXPECT_EQ(spec.vocab, 128256u);
  EXPECT_EQ(spec.hidden, 2048u);
  EXPECT_EQ(spec.layers, 16u);
  EXPECT_EQ(spec.heads, 32u);
  EXPECT_EQ(spec.kv_heads, 8u);
  EXPECT_EQ(spec.head_dim, 64u);
  EXPECT_EQ(spec.group(), 4u);
  EXPECT_EQ(spec.ffn, 8192u);
  EXPECT_EQ(spec.max_context, 131072u);
  EXPECT_FLOAT_EQ(spec.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(spec.rope_theta, 500000.0f);
  EXPECT_TRUE(spec.rope_scaling.llama3);
  EXPECT_FLOAT_EQ(spec.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(spec.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(spec.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(spec.rope_scaling.original_max_position, 8192u);
  EXPECT_TRUE(spec.tie_embeddings);
  EXPECT_FALSE(spec.qkv_bias);
  EXPECT_FALSE(spec.qk_norm);
  EXPECT_EQ(spec.dtype, DType::bf16);
  EXPECT_EQ(spec.bos_token, 128000);
  EXPECT_EQ(spec.eos_tokens, (std::vector<int32_t>{128001, 128008, 128009}));
  // Matches the parameter count Hugging Face reports for Llama-3.2-1B.
  EXPECT_EQ(spec.parameter_count(), 1235814400ull);
  ModelSpec preset = preset_spec("llama-3.2-1b", DType::bf16);
  preset.eos_tokens = spec.eos_tokens;  // the preset is the base model; this config is the instruct one
  expect_same_spec(spec, preset);
}

TEST(ModelSpecParse, MistralSlidesEveryLayerPastItsWindow) {
  const char* config = R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000})";
  ModelSpec spec = parse_hf_config_text(config, "mistral/config.json");
  EXPECT_EQ(spec.arch, Architecture::mistral);
  EXPECT_EQ(spec.head_dim, 128u);  // derived: 4096 / 32
  EXPECT_EQ(spec.max_context, 32768u);  // the window does not cap the context: positions past it slide
  EXPECT_EQ(spec.sliding_window, 4096u);
  EXPECT_EQ(spec.sliding_layers, std::vector<bool>(32, true));
  EXPECT_EQ(spec.attention_window(0), 4096u);
  EXPECT_EQ(spec.attention_window(31), 4096u);
  EXPECT_FALSE(spec.qkv_bias);
  EXPECT_EQ(spec.eos_tokens, std::vector<int32_t>{2});
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);

  json no_window = json::parse(config);  // Mistral v0.2 and later
  no_window["sliding_window"] = nullptr;
  const ModelSpec unwindowed = parse_hf_config_text(no_window.dump(), "m");
  EXPECT_EQ(unwindowed.sliding_window, 0u);
  EXPECT_EQ(unwindowed.attention_window(0), 0u);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(unwindowed), "round trip"), unwindowed);
  no_window.erase("sliding_window");  // MistralConfig's default then: 4096
  EXPECT_EQ(parse_hf_config_text(no_window.dump(), "m").sliding_window, 4096u);
  // MistralConfig has no use_sliding_window: transformers slides whatever it says, and so do we.
  json switched = json::parse(config);
  switched["use_sliding_window"] = false;
  EXPECT_EQ(parse_hf_config_text(switched.dump(), "m").sliding_window, 4096u);

  // LlamaConfig has no window: transformers ignores the key, every layer attends to all before it.
  json llama = json::parse(config);
  llama["architectures"] = {"LlamaForCausalLM"};
  llama["sliding_window"] = 16;
  const ModelSpec llama_spec = parse_hf_config_text(llama.dump(), "m");
  EXPECT_EQ(llama_spec.sliding_window, 0u);
  EXPECT_TRUE(llama_spec.sliding_layers.empty());
}

// Microsoft's Phi-3-mini-4k-instruct config.json (abridged as above).
const char* kPhi3MiniConfig = R"({
  "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1,
  "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
  "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "vocab_size": 32064})";

TEST(ModelSpecParse, Phi3MiniHasFusedProjectionsAndASlidingWindow) {
  ModelSpec spec = parse_hf_config_text(kPhi3MiniConfig, "phi3/config.json");
  EXPECT_EQ(spec.arch, Architecture::phi3);
  EXPECT_TRUE(spec.fused_projections());
  EXPECT_EQ(spec.head_dim, 96u);
  EXPECT_EQ(spec.max_context, 4096u);
  EXPECT_EQ(spec.sliding_window, 2047u);  // each position sees at most 2047, itself included
  EXPECT_EQ(spec.attention_window(31), 2047u);
  EXPECT_FALSE(spec.rope_scaling.longrope);
  EXPECT_FALSE(spec.qkv_bias);
  EXPECT_EQ(spec.eos_tokens, std::vector<int32_t>{32000});
  EXPECT_EQ(spec.parameter_count(), 3821079552ull);  // what Hugging Face reports for Phi-3-mini
  // transformers' Phi3Attention has no bias whatever attention_bias says.
  json biased = json::parse(kPhi3MiniConfig);
  biased["attention_bias"] = true;
  EXPECT_FALSE(parse_hf_config_text(biased.dump(), "m").qkv_bias);
}

// Phi-3.5-mini-instruct's shape: LongRoPE from a 4096-position pretrained context to 131072 (its 48
// factors per list replaced by made-up ones; only their count and order matter here).
json phi35_config() {
  json config = json::parse(kPhi3MiniConfig);
  config["max_position_embeddings"] = 131072;
  config["sliding_window"] = 262144;
  json short_factor = json::array(), long_factor = json::array();
  for (int i = 0; i < 48; ++i) short_factor.push_back(1.0 + 0.01 * i), long_factor.push_back(1.0 + 1.5 * i);
  config["rope_scaling"] = {{"type", "longrope"}, {"short_factor", short_factor}, {"long_factor", long_factor}};
  return config;
}

TEST(ModelSpecParse, Phi3LongRopeReadsItsFactorsAndAttentionFactor) {
  ModelSpec spec = parse_hf_config_text(phi35_config().dump(), "phi3.5/config.json");
  const RopeScaling& scaling = spec.rope_scaling;
  EXPECT_EQ(spec.max_context, 131072u);
  ASSERT_TRUE(scaling.longrope);
  EXPECT_FALSE(scaling.llama3);
  EXPECT_EQ(scaling.original_max_position, 4096u);
  ASSERT_EQ(scaling.short_factor.size(), 48u);
  ASSERT_EQ(scaling.long_factor.size(), 48u);
  EXPECT_EQ(scaling.short_factor[47], 1.47f);
  EXPECT_EQ(scaling.long_factor[2], 4.0f);
  EXPECT_EQ(scaling.factor, 32.0f);  // 131072 / 4096
  // sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12)
  EXPECT_NEAR(scaling.attention_factor, std::sqrt(17.0 / 12.0), 1e-6);

  json su = phi35_config();  // Phi-3's first long-context configs called it "su"
  su["rope_scaling"]["type"] = "su";
  EXPECT_TRUE(parse_hf_config_text(su.dump(), "m").rope_scaling.longrope);
  json given = phi35_config();  // newer configs may give the factors themselves
  given["rope_scaling"]["rope_type"] = "longrope";
  given["rope_scaling"].erase("type");
  given["rope_scaling"]["attention_factor"] = 1.25;
  given["rope_scaling"]["original_max_position_embeddings"] = 8192;  // the top-level key wins, as in transformers
  ModelSpec given_spec = parse_hf_config_text(given.dump(), "m");
  EXPECT_EQ(given_spec.rope_scaling.attention_factor, 1.25f);
  EXPECT_EQ(given_spec.rope_scaling.original_max_position, 4096u);
  EXPECT_EQ(given_spec.rope_scaling.factor, 32.0f);
  given.erase("original_max_position_embeddings");  // then rope_scaling's
  given_spec = parse_hf_config_text(given.dump(), "m");
  EXPECT_EQ(given_spec.rope_scaling.original_max_position, 8192u);
  EXPECT_EQ(given_spec.rope_scaling.factor, 16.0f);
  json neither = phi35_config();  // then Phi-3's pretrained 4096
  neither.erase("original_max_position_embeddings");
  EXPECT_EQ(parse_hf_config_text(neither.dump(), "m").rope_scaling.original_max_position, 4096u);

  // Each list holds one factor per pair of a head's dimensions, or the model would rotate wrongly.
  json short_list = phi35_config();
  short_list["rope_scaling"]["long_factor"].erase(0);
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(short_list.dump(), "phi3.5/config.json"); }),
              HasSubstr("phi3.5/config.json: key 'rope_scaling.long_factor' has 47 factors; LongRoPE needs one per pair of a "
                        "head's dimensions, head_dim / 2 = 48"));
  json zero = phi35_config();
  zero["rope_scaling"]["short_factor"][5] = 0;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(zero.dump(), "c.json"); }),
              HasSubstr("key 'rope_scaling.short_factor' must be a list of positive numbers (item 5 is 0)"));
  json missing = phi35_config();
  missing["rope_scaling"].erase("short_factor");
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(missing.dump(), "c.json"); }),
              HasSubstr("missing required key 'rope_scaling.short_factor'"));

  // The spec reads back from the config text it writes.
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(given_spec), "round trip"), given_spec);
  const ModelSpec mini = parse_hf_config_text(kPhi3MiniConfig, "m");
  expect_same_spec(parse_hf_config_text(to_hf_config_json(mini), "round trip"), mini);
}

// transformers v5 writes RoPE as one object, rope_parameters (rope_theta beside the scaling's keys): the
// same spec as the older keys give; a disagreement or an ambiguity is refused, naming the keys.
TEST(ModelSpecParse, TransformersV5RopeParametersReadAsTheOlderKeys) {
  const json older = json::parse(kLlama32Config);
  json v5 = older;
  v5["rope_parameters"] = older.at("rope_scaling");
  v5["rope_parameters"]["rope_theta"] = older.at("rope_theta");
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  const ModelSpec spec = parse_hf_config_text(v5.dump(), "v5/config.json");
  expect_same_spec(spec, parse_hf_config_text(older.dump(), "m"));
  EXPECT_FLOAT_EQ(spec.rope_theta, 500000.0f);  // not the default 1e4
  EXPECT_TRUE(spec.rope_scaling.llama3);

  json plain = v5;  // no type: the default rotation at the given base
  plain["rope_parameters"] = {{"rope_theta", 1000000.0}};
  const ModelSpec unscaled = parse_hf_config_text(plain.dump(), "m");
  EXPECT_FLOAT_EQ(unscaled.rope_theta, 1e6f);
  EXPECT_FALSE(unscaled.rope_scaling.llama3);

  json disagreeing = v5;
  disagreeing["rope_theta"] = 10000.0;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(disagreeing.dump(), "v5/config.json"); }),
              HasSubstr("v5/config.json: key 'rope_theta' is 10000.0 but 'rope_parameters.rope_theta' is 500000.0"));
  json both = v5;
  both["rope_scaling"] = older.at("rope_scaling");
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(both.dump(), "m"); }),
              HasSubstr("keys 'rope_scaling' and 'rope_parameters' are both given"));
  json per_type = v5;
  per_type["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}}}, {"sliding_attention", {{"rope_theta", 1e4}}}};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(per_type.dump(), "m"); }),
              HasSubstr("key 'rope_parameters' gives parameters per layer type"));
  json bad_factor = v5;
  bad_factor["rope_parameters"]["factor"] = -2;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad_factor.dump(), "m"); }), HasSubstr("key 'rope_parameters.factor'"));

  // Phi-4-mini's partial rotation inside it, and LongRoPE's factors.
  json phi4 = json::parse(kPhi3MiniConfig);
  json factors = json::array();
  for (int i = 0; i < 36; ++i) factors.push_back(1.0 + 0.1 * i);
  phi4["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.75},
                             {"short_factor", factors}, {"long_factor", factors}};
  phi4.erase("rope_scaling");
  phi4.erase("rope_theta");
  phi4["max_position_embeddings"] = 131072;
  const ModelSpec phi = parse_hf_config_text(phi4.dump(), "m");
  EXPECT_EQ(phi.rotary_dim, 72u);  // 0.75 of 96
  EXPECT_TRUE(phi.rope_scaling.longrope);
  EXPECT_EQ(phi.rope_scaling.short_factor.size(), 36u);
}

// Microsoft's Phi-4-mini-instruct: Phi3ForCausalLM rotating 3/4 of each head (96 of 128), with LongRoPE over
// those 96 (48 factors per list) and tied embeddings.
TEST(ModelSpecParse, Phi4MiniRotatesAShareOfEachHead) {
  json config = phi35_config();
  config["hidden_size"] = 3072;
  config["num_attention_heads"] = 24;
  config["num_key_value_heads"] = 8;
  config["num_hidden_layers"] = 32;
  config["vocab_size"] = 200064;
  config["tie_word_embeddings"] = true;
  config["partial_rotary_factor"] = 0.75;
  config["eos_token_id"] = 199999;
  config["bos_token_id"] = 199999;
  const ModelSpec spec = parse_hf_config_text(config.dump(), "phi4/config.json");
  EXPECT_EQ(spec.head_dim, 128u);
  EXPECT_EQ(spec.rotary_dim, 96u);
  EXPECT_EQ(spec.rotated_dims(), 96u);
  EXPECT_EQ(spec.rope_scaling.short_factor.size(), 48u);
  EXPECT_EQ(spec.parameter_count(), 3836021760ull);  // what Hugging Face reports for Phi-4-mini-instruct
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);

  json odd = config;  // 0.7 of 128 is 89.6: int() makes 89, which pairs cannot rotate
  odd["partial_rotary_factor"] = 0.7;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(odd.dump(), "c.json"); }),
              HasSubstr("key 'partial_rotary_factor' 0.7 rotates 89 of head_dim 128 dimensions: RoPE rotates pairs"));
  json full_factors = config;  // the factors are one per rotated pair, not per pair of the head
  for (const char* key : {"short_factor", "long_factor"}) full_factors["rope_scaling"][key] = json::array();
  for (int i = 0; i < 64; ++i)
    for (const char* key : {"short_factor", "long_factor"}) full_factors["rope_scaling"][key].push_back(1.0);
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(full_factors.dump(), "c.json"); }),
              HasSubstr("has 64 factors; LongRoPE needs one per pair of a head's rotated dimensions, the rotary dimensions / 2 = 48"));
  json llama = json::parse(kLlama32Config);  // Llama's attention rotates whole heads
  llama["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(llama.dump(), "c.json"); }),
              HasSubstr("key 'partial_rotary_factor' is not 1: LlamaForCausalLM rotates whole heads"));
}

TEST(ModelSpecParse, Qwen2HasBiasAndIgnoresDisabledSlidingWindow) {
  const char* config = R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_size": 896, "intermediate_size": 4864,
    "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_sliding_window": false,
    "vocab_size": 151936})";
  ModelSpec spec = parse_hf_config_text(config, "qwen2/config.json");
  EXPECT_EQ(spec.arch, Architecture::qwen2);
  EXPECT_TRUE(spec.qkv_bias);
  EXPECT_FALSE(spec.qk_norm);
  EXPECT_EQ(spec.head_dim, 64u);
  EXPECT_EQ(spec.max_context, 32768u);
  EXPECT_FLOAT_EQ(spec.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(spec.rope_theta, 1e6f);

  EXPECT_EQ(spec.sliding_window, 0u);

  json small_window = json::parse(config);
  small_window["sliding_window"] = 1024;  // ignored: use_sliding_window is false
  EXPECT_EQ(parse_hf_config_text(small_window.dump(), "q").sliding_window, 0u);
  small_window["use_sliding_window"] = true;  // on: but max_window_layers 24 of 24 leaves no layer sliding
  EXPECT_EQ(parse_hf_config_text(small_window.dump(), "q").sliding_window, 0u);
  small_window["max_window_layers"] = 20;  // layers 20 to 23 slide
  ModelSpec windowed = parse_hf_config_text(small_window.dump(), "q");
  EXPECT_EQ(windowed.max_context, 32768u);
  EXPECT_EQ(windowed.sliding_window, 1024u);
  EXPECT_EQ(windowed.attention_window(19), 0u);
  EXPECT_EQ(windowed.attention_window(20), 1024u);
  EXPECT_EQ(windowed.attention_window(23), 1024u);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(windowed), "round trip"), windowed);
  small_window.erase("max_window_layers");  // Qwen2Config's default, 28: none of 24
  EXPECT_EQ(parse_hf_config_text(small_window.dump(), "q").sliding_window, 0u);
  small_window["max_window_layers"] = 0;  // every layer
  EXPECT_EQ(parse_hf_config_text(small_window.dump(), "q").sliding_layers, std::vector<bool>(24, true));

  // layer_types names each layer's attention, in place of max_window_layers.
  json typed = small_window;
  json types = json::array();
  for (int l = 0; l < 24; ++l) types.push_back(l % 3 == 2 ? "full_attention" : "sliding_attention");
  typed["layer_types"] = types;
  windowed = parse_hf_config_text(typed.dump(), "q");
  EXPECT_EQ(windowed.attention_window(0), 1024u);
  EXPECT_EQ(windowed.attention_window(2), 0u);
  EXPECT_EQ(windowed.attention_window(23), 0u);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(windowed), "round trip"), windowed);
  typed["layer_types"][5] = "chunked_attention";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(typed.dump(), "q/config.json"); }),
              HasSubstr("q/config.json: key 'layer_types' entry 5 is 'chunked_attention'"));
  typed["layer_types"] = json::array({"full_attention"});
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(typed.dump(), "q/config.json"); }),
              HasSubstr("key 'layer_types' must be a list of num_hidden_layers (24) strings"));
  json off = typed;  // sliding layers named while the window is off: transformers refuses to build them
  off["layer_types"] = types;
  off["use_sliding_window"] = false;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(off.dump(), "q/config.json"); }),
              HasSubstr("key 'layer_types' names sliding_attention layers, but the window is off"));
  for (auto& type : types) type = "full_attention";
  off["layer_types"] = types;  // as transformers saves a config whose window is off
  EXPECT_EQ(parse_hf_config_text(off.dump(), "q").sliding_window, 0u);
  small_window["max_window_layers"] = -1;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(small_window.dump(), "q/config.json"); }),
              HasSubstr("key 'max_window_layers' must be a non-negative integer"));
}

TEST(ModelSpecParse, Qwen3HasQkNormAndGivenHeadDim) {
  const char* config = R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_sliding_window": false, "vocab_size": 151936})";
  ModelSpec spec = parse_hf_config_text(config, "qwen3/config.json");
  EXPECT_EQ(spec.arch, Architecture::qwen3);
  EXPECT_TRUE(spec.qk_norm);
  EXPECT_FALSE(spec.qkv_bias);
  EXPECT_EQ(spec.head_dim, 128u);  // given, and not hidden / heads (64)
  EXPECT_EQ(spec.q_dim(), 2048u);
  EXPECT_FALSE(spec.rope_scaling.llama3);
  EXPECT_EQ(spec.parameter_count(), 596049920ull);  // Qwen3-0.6B as Hugging Face counts it
  expect_same_spec(spec, preset_spec("qwen3-0.6b", DType::bf16));
}

TEST(ModelSpecParse, DefaultsWhenKeysAreAbsent) {
  const char* llama = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "head_dim": null})";
  ModelSpec spec = parse_hf_config_text(llama, "l");
  EXPECT_EQ(spec.kv_heads, 4u);
  EXPECT_EQ(spec.head_dim, 16u);
  EXPECT_EQ(spec.max_context, 2048u);  // LlamaConfig's defaults
  EXPECT_FLOAT_EQ(spec.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(spec.rope_theta, 10000.0f);
  EXPECT_FALSE(spec.tie_embeddings);
  EXPECT_EQ(spec.dtype, DType::f32);
  EXPECT_EQ(spec.bos_token, -1);
  EXPECT_TRUE(spec.eos_tokens.empty());

  json qwen = json::parse(llama);
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  // Qwen2Config's 32 KV heads, which 4 query heads cannot share; 64 can.
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(qwen.dump(), "q"); }),
              HasSubstr("q: key 'num_key_value_heads' is absent, and Qwen2ForCausalLM's default of 32 KV heads does not divide "
                        "num_attention_heads (4)"));
  json qwen_wide = qwen;
  qwen_wide["num_attention_heads"] = 64;
  qwen_wide["hidden_size"] = 512;
  EXPECT_EQ(parse_hf_config_text(qwen_wide.dump(), "q").kv_heads, 32u);
  qwen["num_key_value_heads"] = nullptr;  // None: one per query head
  EXPECT_EQ(parse_hf_config_text(qwen.dump(), "q").kv_heads, 4u);
  ModelSpec qwen_spec = parse_hf_config_text(qwen.dump(), "q");
  EXPECT_FLOAT_EQ(qwen_spec.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(qwen_spec.rope_theta, 1e4f);  // Qwen2Config's, as PretrainedConfig's
  EXPECT_EQ(qwen_spec.max_context, 32768u);
  EXPECT_EQ(qwen_spec.head_dim, 16u);  // hidden / heads
  // Qwen3Config's head_dim is 128 whatever hidden / heads is; SmolLM3Config's 4 KV heads and 32768
  // positions; GraniteConfig's 2048.
  json qwen3 = json::parse(llama);
  qwen3["architectures"] = {"Qwen3ForCausalLM"};
  qwen3["num_key_value_heads"] = 2;
  const ModelSpec qwen3_spec = parse_hf_config_text(qwen3.dump(), "q3");
  EXPECT_EQ(qwen3_spec.head_dim, 128u);
  EXPECT_EQ(qwen3_spec.max_context, 32768u);
  json smollm3 = json::parse(llama);
  smollm3["architectures"] = {"SmolLM3ForCausalLM"};
  const ModelSpec smollm3_spec = parse_hf_config_text(smollm3.dump(), "s");
  EXPECT_EQ(smollm3_spec.kv_heads, 4u);
  EXPECT_EQ(smollm3_spec.max_context, 32768u);
  json granite = json::parse(llama);
  granite["architectures"] = {"GraniteForCausalLM"};
  EXPECT_EQ(parse_hf_config_text(granite.dump(), "g").max_context, 2048u);

  // MistralConfig's: 8 KV heads, 131072 positions; Phi3Config's: an epsilon of 1e-5, 4096 positions.
  json mistral = json::parse(llama);
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["num_attention_heads"] = 32;
  mistral["hidden_size"] = 256;
  const ModelSpec mistral_spec = parse_hf_config_text(mistral.dump(), "m");
  EXPECT_EQ(mistral_spec.kv_heads, 8u);
  EXPECT_EQ(mistral_spec.max_context, 131072u);
  EXPECT_FLOAT_EQ(mistral_spec.rms_eps, 1e-6f);
  json phi3 = json::parse(llama);
  phi3["architectures"] = {"Phi3ForCausalLM"};
  const ModelSpec phi3_spec = parse_hf_config_text(phi3.dump(), "p");
  EXPECT_FLOAT_EQ(phi3_spec.rms_eps, 1e-5f);
  EXPECT_EQ(phi3_spec.max_context, 4096u);

  json llama_bias = json::parse(llama);
  llama_bias["attention_bias"] = true;
  llama_bias["rope_scaling"] = {{"type", "default"}};
  ModelSpec bias_spec = parse_hf_config_text(llama_bias.dump(), "b");
  EXPECT_TRUE(bias_spec.qkv_bias);
  EXPECT_FALSE(bias_spec.rope_scaling.llama3);
}

TEST(ModelSpecParse, ReadsFromFileAndNamesMissingFile) {
  auto dir = std::filesystem::temp_directory_path() / ("tilefire_spec_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    out << kLlama32Config;
  }
  EXPECT_EQ(parse_hf_config(dir / "config.json").hidden, 2048u);
  std::string message = input_error_of([&] { parse_hf_config(dir / "nowhere" / "config.json"); });
  EXPECT_THAT(message, HasSubstr((dir / "nowhere" / "config.json").string()));
  EXPECT_THAT(message, HasSubstr("cannot open config.json"));
  EXPECT_THAT(message, HasSubstr("No such file"));
  std::filesystem::remove_all(dir);
}

TEST(ModelSpecPresets, AllPresetsAreValidAndShaped) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    ModelSpec spec = preset_spec(name, DType::bf16);
    EXPECT_NO_THROW(validate_spec(spec, name));
    EXPECT_EQ(spec.dtype, DType::bf16);
    EXPECT_FALSE(spec.arch_name.empty());
  }
  ModelSpec tiny = preset_spec("tiny");
  EXPECT_EQ(tiny.dtype, DType::f32);
  EXPECT_EQ(tiny.vocab, 512u);
  EXPECT_EQ(tiny.hidden, 256u);
  EXPECT_EQ(tiny.layers, 4u);
  EXPECT_EQ(tiny.heads, 8u);
  EXPECT_EQ(tiny.kv_heads, 2u);
  EXPECT_EQ(tiny.head_dim, 32u);
  EXPECT_EQ(tiny.ffn, 688u);
  EXPECT_EQ(tiny.max_context, 1024u);
  EXPECT_FALSE(tiny.tie_embeddings);
  EXPECT_EQ(preset_spec("small").head_dim, 64u);
  ModelSpec llama8b = preset_spec("llama-3.1-8b");
  EXPECT_EQ(llama8b.parameter_count(), 8030261248ull);  // Llama-3.1-8B as Hugging Face counts it
  EXPECT_FLOAT_EQ(llama8b.rope_scaling.factor, 8.0f);
  // Gemma 3 1B: 26 layers of 26,842,112 (four norms, q/k norms, one KV head of 256) and the tied
  // 262,144 x 1,152 table.
  EXPECT_EQ(preset_spec("gemma-3-1b").parameter_count(), 999885952ull);
  ModelSpec qwen8b = preset_spec("qwen3-8b");
  EXPECT_EQ(qwen8b.arch, Architecture::qwen3);
  EXPECT_TRUE(qwen8b.qk_norm);
  EXPECT_FALSE(qwen8b.tie_embeddings);

  std::string message = input_error_of([] { preset_spec("llama-9000"); });
  EXPECT_THAT(message, HasSubstr("llama-9000"));
  EXPECT_THAT(message, HasSubstr("tiny"));
  EXPECT_THAT(message, HasSubstr("qwen3-8b"));
}

TEST(ModelSpecRoundTrip, ConfigTextReadsBackToTheSameSpec) {
  for (const std::string& name : preset_names()) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(name + " " + std::string(dtype_name(dtype)));
      ModelSpec spec = preset_spec(name, dtype);
      expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);
    }
  }
  ModelSpec odd = preset_spec("tiny");
  odd.arch = Architecture::qwen2;
  odd.arch_name = "Qwen2ForCausalLM";
  odd.qkv_bias = true;
  odd.rms_eps = 3.3e-7f;
  odd.rope_theta = 12345.678f;
  odd.eos_tokens = {2, 3, 7};
  odd.bos_token = -1;
  expect_same_spec(parse_hf_config_text(to_hf_config_json(odd), "round trip"), odd);
}

// A valid tiny config; each bad case below changes one thing in it.
json base_config() {
  return json::parse(to_hf_config_json(preset_spec("tiny")));
}

struct BadConfig {
  const char* label;
  std::function<void(json&)> change;
  std::vector<std::string> message_parts;
};

TEST(ModelSpecErrors, EveryBadConfigNamesFileAndKey) {
  const std::vector<BadConfig> cases = {
      {"missing hidden_size", [](json& c) { c.erase("hidden_size"); }, {"'hidden_size'", "missing"}},
      {"missing vocab_size", [](json& c) { c.erase("vocab_size"); }, {"'vocab_size'"}},
      {"missing intermediate_size", [](json& c) { c.erase("intermediate_size"); }, {"'intermediate_size'"}},
      {"missing architectures", [](json& c) { c.erase("architectures"); }, {"'architectures'"}},
      {"string hidden_size", [](json& c) { c["hidden_size"] = "256"; },
       {"key 'hidden_size' must be a positive integer"}},
      {"float layers", [](json& c) { c["num_hidden_layers"] = 4.5; }, {"'num_hidden_layers'", "positive integer"}},
      {"zero heads", [](json& c) { c["num_attention_heads"] = 0; }, {"'num_attention_heads'"}},
      {"negative vocab", [](json& c) { c["vocab_size"] = -5; }, {"'vocab_size'"}},
      {"huge ffn", [](json& c) { c["intermediate_size"] = 1ull << 40; }, {"'intermediate_size'"}},
      {"string eps", [](json& c) { c["rms_norm_eps"] = "small"; }, {"'rms_norm_eps'"}},
      {"negative theta", [](json& c) { c["rope_theta"] = -1.0; }, {"'rope_theta'"}},
      {"tie not bool", [](json& c) { c["tie_word_embeddings"] = 1; }, {"'tie_word_embeddings'"}},
      {"eos string", [](json& c) { c["eos_token_id"] = "</s>"; }, {"'eos_token_id'"}},
      {"eos beyond vocab", [](json& c) { c["eos_token_id"] = {2, 999}; }, {"'eos_token_id'", "999"}},
      {"unknown architecture", [](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; },
       {"unknown architecture 'GPT2LMHeadModel'", "LlamaForCausalLM", "Qwen3ForCausalLM"}},
      {"architectures not a list", [](json& c) { c["architectures"] = "LlamaForCausalLM"; }, {"'architectures'"}},
      {"unknown dtype", [](json& c) { c["torch_dtype"] = "float8_e4m3fn"; },
       {"'torch_dtype'", "unknown dtype 'float8_e4m3fn'"}},
      {"bad rope type", [](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; },
       {"rope_scaling", "'yarn'", "supported: llama3, longrope, linear, default"}},
      {"rope scaling missing factor",
       [](json& c) {
         c["rope_scaling"] = {{"rope_type", "llama3"}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 8192}};
       },
       {"'rope_scaling.factor'"}},
      {"rope scaling not an object", [](json& c) { c["rope_scaling"] = 8; }, {"'rope_scaling'"}},
      {"heads not divisible", [](json& c) { c["num_key_value_heads"] = 3; },
       {"'num_key_value_heads'", "must divide num_attention_heads"}},
      {"odd head_dim", [](json& c) { c["head_dim"] = 33; }, {"'head_dim'", "even"}},
      {"underived head_dim",
       [](json& c) {
         c.erase("head_dim");
         c["num_attention_heads"] = 6;
         c["num_key_value_heads"] = 6;
       },
       {"'head_dim'", "hidden_size"}},
      {"sliding window zero",
       [](json& c) {
         c["architectures"] = {"MistralForCausalLM"};
         c["sliding_window"] = 0;
       },
       {"'sliding_window'"}},
      {"every size at its bound",  // each is accepted alone; together 2.3e14 parameters
       [](json& c) {
         c["num_hidden_layers"] = 1024;
         c["hidden_size"] = 65536;
         c["num_attention_heads"] = 1024;
         c["num_key_value_heads"] = 1024;
         c["head_dim"] = 64;
         c["intermediate_size"] = 1 << 20;
         c["vocab_size"] = 1 << 22;
       },
       {"add up to 229248308674560 parameters", "more than the 10^12"}},
      {"a mistyped KV head count", [](json& c) { c["num_key_value_heads"] = 100000; }, {"'num_key_value_heads' (100000) must divide"}},
  };
  for (const BadConfig& bad : cases) {
    SCOPED_TRACE(bad.label);
    json config = base_config();
    bad.change(config);
    std::string message = input_error_of([&] { parse_hf_config_text(config.dump(), "model/config.json"); });
    EXPECT_THAT(message, HasSubstr("model/config.json: "));
    for (const std::string& part : bad.message_parts) EXPECT_THAT(message, HasSubstr(part));
  }
}

// The largest published dense model is within the bound on the parameter count.
TEST(ModelSpecParse, TheLargestPublishedDenseShapeIsAccepted) {
  json config = base_config();
  config["num_hidden_layers"] = 126;  // Llama 3.1 405B
  config["hidden_size"] = 16384;
  config["num_attention_heads"] = 128;
  config["num_key_value_heads"] = 8;
  config["head_dim"] = 128;
  config["intermediate_size"] = 53248;
  config["vocab_size"] = 128256;
  config["eos_token_id"] = 128001;
  const ModelSpec spec = parse_hf_config_text(config.dump(), "405b/config.json");
  EXPECT_NEAR(double(spec.parameter_count()), 4.06e11, 0.01e11);
}

TEST(ModelSpecErrors, MalformedJsonAndWrongTopLevel) {
  std::string message = input_error_of([] { parse_hf_config_text("{\"vocab_size\": 12,", "m/config.json"); });
  EXPECT_THAT(message, HasSubstr("m/config.json: not valid JSON: "));
  message = input_error_of([] { parse_hf_config_text("[1, 2]", "m/config.json"); });
  EXPECT_THAT(message, HasSubstr("m/config.json"));
  EXPECT_THAT(message, HasSubstr("JSON object"));
}

TEST(ModelSpecErrors, ValidateSpecNamesTheKey) {
  ModelSpec spec = preset_spec("tiny");
  spec.kv_heads = 3;
  EXPECT_THAT(input_error_of([&] { validate_spec(spec, "origin"); }), HasSubstr("'num_key_value_heads'"));
  spec = preset_spec("tiny");
  spec.ffn = 0;
  EXPECT_THAT(input_error_of([&] { validate_spec(spec, "origin"); }), HasSubstr("origin: key 'intermediate_size'"));
  spec = preset_spec("llama-3.2-1b");
  spec.rope_scaling.high_freq_factor = spec.rope_scaling.low_freq_factor;
  EXPECT_THAT(input_error_of([&] { validate_spec(spec, "origin"); }), HasSubstr("'rope_scaling.high_freq_factor'"));
}

}  // namespace
}  // namespace tilefire
