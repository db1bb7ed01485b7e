// ModelSpec from the configs of the architectures whose layers differ from Llama's beyond its keys: SmolLM3's
// NoPE layers, Granite's multipliers, Gemma 3's layer pattern, RoPE bases and scales, Gemma 2's soft caps,
// Gemma 1's norms without the sandwich (the common keys, the presets and the malformed configs:
// model_spec_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/model_spec.h"
#include "tests/common/compare.h"
#include "tests/common/spec_compare.h"

namespace tilefire {
namespace {

std::string input_error_of(const std::function<void()>& action) { return testing::message_of<InputError>(action); }

using ::testing::HasSubstr;
using nlohmann::json;
using testing::expect_same_spec;

// SmolLM3-3B's shape (abridged; its no_rope_layers written out as the published config has them: 1, 1,
// 1, 0 repeated, a NoPE layer every fourth).
json smollm3_config() {
  json config = json::parse(R"({
    "architectures": ["SmolLM3ForCausalLM"], "attention_bias": false, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 11008, "max_position_embeddings": 65536, "max_window_layers": 28, "model_type": "smollm3",
    "no_rope_layer_interval": 4, "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 5000000.0, "sliding_window": null,
    "use_sliding_window": false, "torch_dtype": "bfloat16", "vocab_size": 128256, "eos_token_id": 128012})");
  json rotates = json::array();
  for (int l = 0; l < 36; ++l) rotates.push_back(l % 4 == 3 ? 0 : 1);
  config["no_rope_layers"] = rotates;
  return config;
}

TEST(ModelSpecParse, SmolLM3LeavesEveryFourthLayerUnrotated) {
  const json config = smollm3_config();
  const ModelSpec spec = parse_hf_config_text(config.dump(), "smollm3/config.json");
  EXPECT_EQ(spec.arch, Architecture::smollm3);
  EXPECT_TRUE(spec.tie_embeddings);  // SmolLM3Config's default, absent from this config
  EXPECT_EQ(spec.head_dim, 128u);
  EXPECT_FLOAT_EQ(spec.rope_theta, 5e6f);
  ASSERT_EQ(spec.nope_layers.size(), 36u);
  for (uint32_t l = 0; l < 36; ++l) EXPECT_EQ(spec.layer_rotates(l), l % 4 != 3) << "layer " << l;
  EXPECT_EQ(spec.sliding_window, 0u);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);

  // Without the list: every no_rope_layer_interval-th layer (SmolLM3Config's default formula).
  json interval = config;
  interval.erase("no_rope_layers");
  interval["no_rope_layer_interval"] = 3;
  const ModelSpec by_interval = parse_hf_config_text(interval.dump(), "m");
  for (uint32_t l = 0; l < 36; ++l) EXPECT_EQ(by_interval.layer_rotates(l), (l + 1) % 3 != 0) << "layer " << l;
  interval.erase("no_rope_layer_interval");
  interval.erase("rope_theta");
  const ModelSpec defaults = parse_hf_config_text(interval.dump(), "m");
  EXPECT_FALSE(defaults.layer_rotates(3));
  EXPECT_TRUE(defaults.layer_rotates(4));
  EXPECT_FLOAT_EQ(defaults.rope_theta, 2e6f);

  // A window: SmolLM3Config slides its NoPE layers unless layer_types says otherwise.
  json windowed = config;
  windowed["use_sliding_window"] = true;
  windowed["sliding_window"] = 2048;
  const ModelSpec slides = parse_hf_config_text(windowed.dump(), "m");
  EXPECT_EQ(slides.attention_window(3), 2048u);
  EXPECT_EQ(slides.attention_window(4), 0u);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(slides), "round trip"), slides);

  json bad = config;
  bad["no_rope_layers"][7] = 2;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "s/config.json"); }),
              HasSubstr("s/config.json: key 'no_rope_layers' entry 7 is 2: 1 (RoPE) or 0 (none)"));
  bad["no_rope_layers"] = json::array({1, 1, 1});
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "s/config.json"); }),
              HasSubstr("key 'no_rope_layers' must be a list of at least num_hidden_layers (36) entries"));
  // Llama's config class has no such key: a list there changes nothing, as in transformers.
  json llama = config;
  llama["architectures"] = {"LlamaForCausalLM"};
  EXPECT_TRUE(parse_hf_config_text(llama.dump(), "m").nope_layers.empty());
}

// A Granite 3 2B-shaped config (GraniteForCausalLM: 40 layers, 32 query and 8 KV heads of 64, tied), with
// its four multipliers.
json granite_config() {
  return json::parse(R"({
    "architectures": ["GraniteForCausalLM"], "attention_bias": false, "attention_dropout": 0.1,
    "attention_multiplier": 0.015625, "bos_token_id": 0, "embedding_multiplier": 12.0, "eos_token_id": 0,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "logits_scaling": 8.0,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "granite", "num_attention_heads": 32,
    "num_hidden_layers": 40, "num_key_value_heads": 8, "pad_token_id": 0, "residual_multiplier": 0.22,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 5000000.0, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "vocab_size": 49155})");
}

TEST(ModelSpecParse, GraniteReadsItsFourMultipliers) {
  const json config = granite_config();
  const ModelSpec spec = parse_hf_config_text(config.dump(), "granite/config.json");
  EXPECT_EQ(spec.arch, Architecture::granite);
  EXPECT_EQ(spec.head_dim, 64u);
  EXPECT_TRUE(spec.tie_embeddings);
  EXPECT_FLOAT_EQ(spec.embedding_multiplier, 12.0f);
  EXPECT_FLOAT_EQ(spec.residual_multiplier, 0.22f);
  EXPECT_FLOAT_EQ(spec.attention_scale(), 0.015625f);  // not 1/sqrt(64) = 0.125
  EXPECT_FLOAT_EQ(spec.logits_scaling, 8.0f);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);

  // GraniteConfig's defaults: every multiplier 1, the attention's too (scores times 1, not 1/sqrt(64)),
  // rms_norm_eps 1e-6; and no sliding window (the key is not GraniteConfig's).
  json bare = config;
  for (const char* key : {"attention_multiplier", "embedding_multiplier", "logits_scaling", "residual_multiplier", "rms_norm_eps"})
    bare.erase(key);
  bare["sliding_window"] = 16;
  const ModelSpec defaults = parse_hf_config_text(bare.dump(), "m");
  EXPECT_EQ(defaults.embedding_multiplier, 1.0f);
  EXPECT_EQ(defaults.residual_multiplier, 1.0f);
  EXPECT_EQ(defaults.attention_scale(), 1.0f);
  EXPECT_EQ(defaults.logits_scaling, 1.0f);
  EXPECT_FLOAT_EQ(defaults.rms_eps, 1e-6f);
  EXPECT_EQ(defaults.sliding_window, 0u);

  json bad = config;
  bad["residual_multiplier"] = 0;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: key 'residual_multiplier' must be a positive number (got 0)"));
  bad["residual_multiplier"] = "0.22";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'residual_multiplier' must be a positive number"));
  // Llama's config class has no multipliers: the keys change nothing there, as in transformers.
  json llama = config;
  llama["architectures"] = {"LlamaForCausalLM"};
  const ModelSpec as_llama = parse_hf_config_text(llama.dump(), "m");
  EXPECT_EQ(as_llama.embedding_multiplier, 1.0f);
  EXPECT_EQ(as_llama.attention_scale(), 0.125f);
  EXPECT_EQ(as_llama.logits_scaling, 1.0f);
}

// Gemma 3 1B's config (google/gemma-3-1b-it, as copies of it give it; abridged): 26 layers, every sixth
// attending to all and the rest to the last 512 positions, head_dim 256, one KV head.
json gemma3_config() {
  return json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attn_logit_softcapping": null,
    "bos_token_id": 2, "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
    "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
    "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "vocab_size": 262144})");
}

TEST(ModelSpecParse, Gemma3ReadsItsLayerPatternRopeBasesAndScales) {
  json config = gemma3_config();
  const ModelSpec spec = parse_hf_config_text(config.dump(), "gemma3/config.json");
  EXPECT_EQ(spec.arch, Architecture::gemma3);
  EXPECT_TRUE(spec.tie_embeddings);  // Gemma3TextConfig's default
  EXPECT_TRUE(spec.qk_norm);
  EXPECT_TRUE(spec.sandwich_norms());
  EXPECT_EQ(spec.norm_weight_offset(), 1.0f);
  EXPECT_EQ(spec.mlp_activation, GateActivation::gelu_tanh);
  EXPECT_EQ(spec.attention_scale(), 0.0625f);  // 256^-1/2
  EXPECT_EQ(spec.embedding_multiplier, 34.0f);    // sqrt(1152) = 33.94, in bf16
  ASSERT_EQ(spec.sliding_layers.size(), 26u);
  for (uint32_t l = 0; l < 26; ++l) {
    EXPECT_EQ(spec.attention_window(l), l % 6 == 5 ? 0u : 512u) << "layer " << l;
    EXPECT_EQ(spec.layer_uses_local_rope(l), l % 6 != 5) << "layer " << l;
  }
  EXPECT_EQ(spec.local_rope_theta, 1e4f);
  EXPECT_EQ(spec.rope_theta, 1e6f);
  EXPECT_EQ(spec.eos_tokens, (std::vector<int32_t>{1, 106}));
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);

  // 4B and up: linear scaling on the full layers; another pattern; f32 weights keep sqrt(hidden) as it is.
  json bigger = config;
  bigger["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  bigger["sliding_window_pattern"] = 3;
  bigger["torch_dtype"] = "float32";
  bigger["hidden_size"] = 640;
  const ModelSpec scaled = parse_hf_config_text(bigger.dump(), "m");
  EXPECT_TRUE(scaled.rope_scaling.linear);
  EXPECT_EQ(scaled.rope_scaling.factor, 8.0f);
  EXPECT_EQ(scaled.attention_window(2), 0u);
  EXPECT_EQ(scaled.attention_window(3), 512u);
  EXPECT_EQ(scaled.embedding_multiplier, float(std::sqrt(640.0)));
  expect_same_spec(parse_hf_config_text(to_hf_config_json(scaled), "round trip"), scaled);
  bigger["torch_dtype"] = "bfloat16";
  EXPECT_EQ(parse_hf_config_text(bigger.dump(), "m").embedding_multiplier, 25.25f);  // sqrt(640) = 25.30, in bf16

  // Gemma3TextConfig's defaults: query_pre_attn_scalar 256, rope_local_base_freq 1e4, a window of 4096 on a
  // pattern of 6, 4 KV heads of 256, 131072 positions.
  json bare = config;
  for (const char* key : {"query_pre_attn_scalar", "rope_local_base_freq", "sliding_window", "sliding_window_pattern", "rope_theta",
                          "hidden_activation", "rms_norm_eps", "head_dim", "num_key_value_heads", "max_position_embeddings"})
    bare.erase(key);
  const ModelSpec defaults = parse_hf_config_text(bare.dump(), "m");
  EXPECT_EQ(defaults.head_dim, 256u);
  EXPECT_EQ(defaults.kv_heads, 4u);
  EXPECT_EQ(defaults.max_context, 131072u);
  EXPECT_EQ(defaults.attention_scale(), 0.0625f);
  EXPECT_EQ(defaults.local_rope_theta, 1e4f);
  EXPECT_EQ(defaults.rope_theta, 1e6f);
  EXPECT_EQ(defaults.attention_window(0), 4096u);
  EXPECT_EQ(defaults.attention_window(5), 0u);
  EXPECT_FLOAT_EQ(defaults.rms_eps, 1e-6f);

  EXPECT_EQ(defaults.attention_softcap, 0.0f);  // Gemma 3's caps are off unless given
  EXPECT_EQ(defaults.final_logit_softcap, 0.0f);
  json capped = config;  // given, they apply as Gemma 2's do (transformers' Gemma 3 reads them too)
  capped["final_logit_softcapping"] = 30.0;
  capped["attn_logit_softcapping"] = 50.0;
  const ModelSpec caps = parse_hf_config_text(capped.dump(), "m");
  EXPECT_EQ(caps.final_logit_softcap, 30.0f);
  EXPECT_EQ(caps.attention_softcap, 50.0f);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(caps), "round trip"), caps);

  json bad = config;
  bad["final_logit_softcapping"] = -1.0;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: key 'final_logit_softcapping' must be a positive number"));
  bad = config;
  bad["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: key 'rope_scaling' is not linear"));
  bad = config;
  bad["hidden_activation"] = "gelu";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'hidden_activation' is \"gelu\": Gemma's MLP supports gelu_pytorch_tanh (GeGLU) only"));
  bad = config;
  bad["sliding_window"] = nullptr;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'sliding_window' is null, but the model has sliding_attention layers"));
}

// Gemma 3 4B's config.json (google/gemma-3-4b-it's, as copies of it give it; the vision tower's abridged):
// Gemma3ForConditionalGeneration, its text model's keys under text_config, few of them given.
json gemma3_multimodal_config() {
  return json::parse(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
                      "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": false}})");
}

TEST(ModelSpecParse, Gemma3MultimodalReadsItsTextConfigWithGemma3TextConfigsDefaults) {
  json config = gemma3_multimodal_config();
  const ModelSpec spec = parse_hf_config_text(config.dump(), "gemma-3-4b/config.json");
  EXPECT_EQ(spec.arch, Architecture::gemma3);
  EXPECT_EQ(spec.arch_name, "Gemma3ForConditionalGeneration");
  EXPECT_TRUE(spec.multimodal_checkpoint);
  // Gemma3TextConfig's defaults for what text_config leaves out: 262208 tokens, 8 heads, 4 KV heads of 256.
  EXPECT_EQ(spec.vocab, 262208u);
  EXPECT_EQ(spec.hidden, 2560u);
  EXPECT_EQ(spec.layers, 34u);
  EXPECT_EQ(spec.heads, 8u);
  EXPECT_EQ(spec.kv_heads, 4u);
  EXPECT_EQ(spec.head_dim, 256u);
  EXPECT_EQ(spec.ffn, 10240u);
  EXPECT_EQ(spec.max_context, 131072u);
  EXPECT_EQ(spec.attention_scale(), 0.0625f);
  EXPECT_TRUE(spec.tie_embeddings);
  EXPECT_TRUE(spec.qk_norm);
  EXPECT_TRUE(spec.rope_scaling.linear);
  EXPECT_EQ(spec.rope_scaling.factor, 8.0f);
  EXPECT_EQ(spec.rope_theta, 1e6f);
  EXPECT_EQ(spec.local_rope_theta, 1e4f);
  ASSERT_EQ(spec.sliding_layers.size(), 34u);
  for (uint32_t l = 0; l < 34; ++l) EXPECT_EQ(spec.attention_window(l), l % 6 == 5 ? 0u : 1024u) << "layer " << l;
  // The top level's keys: the end-of-turn ids and the dtype (sqrt(2560) = 50.6 in bf16).
  EXPECT_EQ(spec.eos_tokens, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(spec.dtype, DType::bf16);
  EXPECT_EQ(spec.embedding_multiplier, 50.5f);
  EXPECT_EQ(spec.final_logit_softcap, 0.0f);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);

  // The token ids: the top level's first (as transformers' generation config takes them), text_config's
  // where the top has none. Its final_logit_softcapping is not applied (transformers'
  // Gemma3ForConditionalGeneration computes its logits without it). Its own dtype claim stands.
  config["text_config"]["eos_token_id"] = 1;
  config["text_config"]["bos_token_id"] = 2;
  config["text_config"]["final_logit_softcapping"] = 30.0;
  config["text_config"]["num_attention_heads"] = 16;
  config["text_config"]["num_key_value_heads"] = 8;
  config["text_config"]["dtype"] = "float32";
  const ModelSpec own = parse_hf_config_text(config.dump(), "m");
  EXPECT_EQ(own.eos_tokens, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(own.bos_token, 2);
  EXPECT_EQ(own.final_logit_softcap, 0.0f);
  EXPECT_EQ(own.heads, 16u);
  EXPECT_EQ(own.kv_heads, 8u);
  EXPECT_EQ(own.dtype, DType::f32);
  config.erase("eos_token_id");
  EXPECT_EQ(parse_hf_config_text(config.dump(), "m").eos_tokens, (std::vector<int32_t>{1}));
  // The tie: text_config's (default true) as transformers 4.x reads it; a top level that says otherwise
  // (which v5 reads) leaves it to the checkpoint.
  config["tie_word_embeddings"] = true;
  EXPECT_TRUE(parse_hf_config_text(config.dump(), "m").tie_embeddings);
  EXPECT_FALSE(parse_hf_config_text(config.dump(), "m").lm_head_tie_from_checkpoint);
  config["tie_word_embeddings"] = false;
  EXPECT_TRUE(parse_hf_config_text(config.dump(), "m").lm_head_tie_from_checkpoint);
  EXPECT_FALSE(parse_hf_config_text(config.dump(), "m").tie_embeddings);  // until the tensors say
  config["text_config"]["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse_hf_config_text(config.dump(), "m").tie_embeddings);
  EXPECT_FALSE(parse_hf_config_text(config.dump(), "m").lm_head_tie_from_checkpoint);
  // An untied text_config under no top-level key: v5's Gemma3Config ties by default, 4.x does not.
  config.erase("tie_word_embeddings");
  EXPECT_TRUE(parse_hf_config_text(config.dump(), "m").lm_head_tie_from_checkpoint);
  config["tie_word_embeddings"] = "no";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(config.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: key 'tie_word_embeddings' must be true or false, got \"no\""));

  // Its messages say where in the file the key is.
  json bad = gemma3_multimodal_config();
  bad.erase("text_config");
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: key 'text_config' must be an object: Gemma3ForConditionalGeneration keeps its text model's config there"));
  bad = gemma3_multimodal_config();
  bad["text_config"]["sliding_window"] = -4;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: text_config: key 'sliding_window'"));
  bad = gemma3_multimodal_config();
  bad["eos_token_id"] = -1;  // a top-level key's message names the top level
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: key 'eos_token_id' must be a non-negative integer token id"));
  // Another class's text model under a multimodal class is not read as Gemma 3's.
  bad = gemma3_multimodal_config();
  bad["architectures"] = {"PaliGemmaForConditionalGeneration"};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("unknown architecture 'PaliGemmaForConditionalGeneration' (expected one of LlamaForCausalLM"));
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }), HasSubstr(", Gemma3ForConditionalGeneration, "));
  // A text_config under the causal class: Gemma3TextConfig's defaults would stand in for what it holds.
  bad = gemma3_multimodal_config();
  bad["architectures"] = {"Gemma3ForCausalLM"};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: key 'text_config' is given, but architectures names Gemma3ForCausalLM: a Gemma 3 checkpoint "
                        "with a text_config is Gemma3ForConditionalGeneration's"));
  // A causal Gemma 3's config still needs no text_config, and gets the same defaults.
  json causal = gemma3_config();
  for (const char* key : {"vocab_size", "num_attention_heads"}) causal.erase(key);
  const ModelSpec causal_defaults = parse_hf_config_text(causal.dump(), "m");
  EXPECT_EQ(causal_defaults.vocab, 262208u);
  EXPECT_EQ(causal_defaults.heads, 8u);
  EXPECT_FALSE(causal_defaults.multimodal_checkpoint);
}

// transformers v5 writes Gemma 3's RoPE per layer type (rope_parameters' full_attention and
// sliding_attention sets, from rope_theta, rope_scaling and rope_local_base_freq): the same spec as the
// older keys give, for the 1B and for the 4B's text_config with its linear scaling.
TEST(ModelSpecParse, Gemma3RopeParametersPerLayerTypeReadAsTheOlderKeys) {
  const json older = gemma3_config();
  json v5 = older;
  for (const char* key : {"rope_theta", "rope_local_base_freq", "rope_scaling"}) v5.erase(key);
  v5["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  expect_same_spec(parse_hf_config_text(v5.dump(), "v5/config.json"), parse_hf_config_text(older.dump(), "m"));
  // Bases that are not the defaults, to show they are read.
  v5["rope_parameters"]["full_attention"]["rope_theta"] = 250000.0;
  v5["rope_parameters"]["sliding_attention"]["rope_theta"] = 5000.0;
  const ModelSpec bases = parse_hf_config_text(v5.dump(), "m");
  EXPECT_EQ(bases.rope_theta, 250000.0f);
  EXPECT_EQ(bases.local_rope_theta, 5000.0f);
  // Sets left out: Gemma3TextConfig's defaults (1e6 for the full layers, 1e4 for the sliding ones).
  v5["rope_parameters"] = {{"full_attention", nullptr}, {"sliding_attention", {{"rope_type", "default"}}}};
  const ModelSpec defaults = parse_hf_config_text(v5.dump(), "m");
  EXPECT_EQ(defaults.rope_theta, 1e6f);
  EXPECT_EQ(defaults.local_rope_theta, 1e4f);

  json multimodal = gemma3_multimodal_config();
  json text_v5 = multimodal;
  text_v5["text_config"]["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  text_v5["text_config"].erase("rope_scaling");
  const ModelSpec four_b = parse_hf_config_text(text_v5.dump(), "m");
  expect_same_spec(four_b, parse_hf_config_text(multimodal.dump(), "m"));
  EXPECT_TRUE(four_b.rope_scaling.linear);
  EXPECT_EQ(four_b.rope_scaling.factor, 8.0f);

  // Refused, naming the key: a scaled sliding set, a scaling Gemma 3 does not take, a set of another layer
  // type, a base that disagrees with the older key beside it, the older scaling beside it, another class's.
  json bad = text_v5;
  bad["text_config"]["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: text_config: key 'rope_parameters.sliding_attention.rope_type' is \"linear\": Gemma 3's sliding "
                        "layers rotate unscaled"));
  bad = text_v5;
  bad["text_config"]["rope_parameters"]["full_attention"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                                             {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'rope_parameters.full_attention' is not linear"));
  bad = text_v5;
  bad["text_config"]["rope_parameters"]["full_attention"]["factor"] = -8.0;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'rope_parameters.full_attention.factor'"));
  bad = v5;
  bad["rope_parameters"]["chunked_attention"] = {{"rope_theta", 1e4}};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'rope_parameters' gives parameters per layer type, and 'chunked_attention' is not one"));
  bad = v5;
  bad["rope_parameters"]["sliding_attention"]["rope_theta"] = 20000.0;
  bad["rope_local_base_freq"] = 10000.0;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'rope_local_base_freq' is 10000.0 but 'rope_parameters.sliding_attention.rope_theta' is 20000.0"));
  bad = v5;
  bad["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("keys 'rope_scaling' and 'rope_parameters' are both given"));
  bad = v5;  // one set for every layer: read neither by v5 (which reads the sets by type) nor by 4.x
  bad["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 250000.0}};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("g/config.json: key 'rope_parameters' must give Gemma 3's rotations per layer type"));
  bad = v5;
  bad.erase("architectures");
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }), HasSubstr("missing required key 'architectures'"));
  bad = v5;
  bad["architectures"] = {"Gemma2ForCausalLM"};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'rope_parameters' gives parameters per layer type: supported for Gemma 3 only"));
}

// Gemma 2 2B's config (google/gemma-2-2b-it's, as copies of it give it): 26 layers, even ones sliding over
// 4096 positions, soft caps of 50 on the scores and 30 on the logits, no q/k norms, one RoPE base.
json gemma2_config() {
  return json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 107],
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
    "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
    "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32",
    "use_cache": true, "vocab_size": 256000})");
}

TEST(ModelSpecParse, Gemma2ReadsItsSoftCapsAndAlternatingLayers) {
  const json config = gemma2_config();
  const ModelSpec spec = parse_hf_config_text(config.dump(), "gemma2/config.json");
  EXPECT_EQ(spec.arch, Architecture::gemma2);
  EXPECT_TRUE(spec.tie_embeddings);
  EXPECT_FALSE(spec.qk_norm);
  EXPECT_TRUE(spec.sandwich_norms());
  EXPECT_EQ(spec.norm_weight_offset(), 1.0f);
  EXPECT_EQ(spec.mlp_activation, GateActivation::gelu_tanh);
  EXPECT_EQ(spec.attention_scale(), 0.0625f);
  EXPECT_EQ(spec.attention_softcap, 50.0f);
  EXPECT_EQ(spec.final_logit_softcap, 30.0f);
  EXPECT_EQ(spec.embedding_multiplier, float(std::sqrt(2304.0)));  // 48, exact
  EXPECT_EQ(spec.local_rope_theta, 0.0f);                          // one RoPE base for every layer
  EXPECT_EQ(spec.rope_theta, 1e4f);
  for (uint32_t l = 0; l < 26; ++l) EXPECT_EQ(spec.attention_window(l), l % 2 == 0 ? 4096u : 0u) << "layer " << l;
  EXPECT_EQ(spec.eos_tokens, (std::vector<int32_t>{1, 107}));
  EXPECT_EQ(spec.parameter_count(), 2614341888ull);  // Gemma 2 2B's published count
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);
  expect_same_spec(preset_spec("gemma-2-2b"), spec);

  // Gemma2Config's defaults: caps 50 and 30, query_pre_attn_scalar 256, a window of 4096 on even layers,
  // 4 KV heads of 256, 8192 positions, RoPE base 1e4; a null cap is no cap.
  json bare = config;
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "sliding_window", "rope_theta",
                          "hidden_activation", "hidden_act", "rms_norm_eps", "head_dim", "num_key_value_heads", "max_position_embeddings"})
    bare.erase(key);
  const ModelSpec defaults = parse_hf_config_text(bare.dump(), "m");
  EXPECT_EQ(defaults.attention_softcap, 50.0f);
  EXPECT_EQ(defaults.final_logit_softcap, 30.0f);
  EXPECT_EQ(defaults.attention_scale(), 0.0625f);
  EXPECT_EQ(defaults.attention_window(0), 4096u);
  EXPECT_EQ(defaults.attention_window(1), 0u);
  EXPECT_EQ(defaults.head_dim, 256u);
  EXPECT_EQ(defaults.kv_heads, 4u);
  EXPECT_EQ(defaults.max_context, 8192u);
  EXPECT_EQ(defaults.rope_theta, 1e4f);
  json uncapped = config;
  uncapped["attn_logit_softcapping"] = nullptr;
  uncapped["final_logit_softcapping"] = nullptr;
  const ModelSpec no_caps = parse_hf_config_text(uncapped.dump(), "m");
  EXPECT_EQ(no_caps.attention_softcap, 0.0f);
  EXPECT_EQ(no_caps.final_logit_softcap, 0.0f);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(no_caps), "round trip"), no_caps);

  // layer_types win over the even-layer rule; another activation is refused.
  json typed = config;
  typed["layer_types"] = json::array();
  for (int l = 0; l < 26; ++l) typed["layer_types"].push_back(l < 2 ? "sliding_attention" : "full_attention");
  const ModelSpec typed_spec = parse_hf_config_text(typed.dump(), "m");
  EXPECT_EQ(typed_spec.attention_window(1), 4096u);
  EXPECT_EQ(typed_spec.attention_window(2), 0u);
  json bad = config;
  bad["hidden_activation"] = "gelu";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'hidden_activation' is \"gelu\": Gemma's MLP supports gelu_pytorch_tanh (GeGLU) only"));
  bad = config;
  bad["final_logit_softcapping"] = 1e-50;  // positive, but 0 as a float: not "no cap"
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'final_logit_softcapping' must be a positive number"));
  bad = config;
  bad["attn_logit_softcapping"] = "50";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'attn_logit_softcapping' must be a positive number"));
}

// Gemma 7B's config (google/gemma-7b's, as copies of it give it, with the "gelu" its first release wrote):
// Llama's layer with Gemma's (1 + w) norms, scaled embedding and GeGLU, no window and no soft caps.
json gemma1_config() {
  return json::parse(R"({
    "architectures": ["GemmaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 2,
    "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 24576, "max_position_embeddings": 8192, "model_type": "gemma", "num_attention_heads": 16,
    "num_hidden_layers": 28, "num_key_value_heads": 16, "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 10000.0, "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0", "use_cache": true,
    "vocab_size": 256000})");
}

TEST(ModelSpecParse, Gemma1ReadsLlamasLayerWithGemmasNormsEmbeddingAndGeglu) {
  const json config = gemma1_config();
  const ModelSpec spec = parse_hf_config_text(config.dump(), "gemma/config.json");
  EXPECT_EQ(spec.arch, Architecture::gemma);
  EXPECT_TRUE(spec.is_gemma());
  EXPECT_FALSE(spec.sandwich_norms());
  EXPECT_FALSE(spec.qk_norm);
  EXPECT_TRUE(spec.tie_embeddings);  // GemmaConfig's default
  EXPECT_EQ(spec.norm_weight_offset(), 1.0f);
  // "gelu" as transformers 4.39 to 4.47 and vLLM read it: hidden_activation absent, the tanh GELU.
  EXPECT_EQ(spec.mlp_activation, GateActivation::gelu_tanh);
  EXPECT_EQ(spec.attention_scale(), 0.0625f);  // head_dim^-1/2
  EXPECT_EQ(spec.query_pre_attn_scalar, 0u);
  EXPECT_EQ(spec.attention_softcap, 0.0f);
  EXPECT_EQ(spec.final_logit_softcap, 0.0f);
  EXPECT_EQ(spec.embedding_multiplier, 55.5f);  // sqrt(3072) = 55.43 in bfloat16
  for (uint32_t l = 0; l < 28; ++l) EXPECT_EQ(spec.attention_window(l), 0u) << "layer " << l;
  EXPECT_EQ(spec.bos_token, 2);
  EXPECT_EQ(spec.eos_tokens, (std::vector<int32_t>{1}));
  EXPECT_EQ(spec.parameter_count(), 8537680896ull);  // Gemma 7B's published count
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);

  // GemmaConfig's defaults: 16 KV heads of 256, 8192 positions, the tanh GELU; keys of Gemma 2's that
  // GemmaConfig does not have (a window, a query scalar, caps) change nothing, as in transformers.
  json bare = config;
  for (const char* key : {"head_dim", "num_key_value_heads", "max_position_embeddings", "hidden_act", "tie_word_embeddings"}) bare.erase(key);
  bare["sliding_window"] = 16;
  bare["query_pre_attn_scalar"] = 100;
  bare["attn_logit_softcapping"] = 50.0;
  bare["final_logit_softcapping"] = 30.0;
  const ModelSpec defaults = parse_hf_config_text(bare.dump(), "m");
  EXPECT_EQ(defaults.head_dim, 256u);
  EXPECT_EQ(defaults.kv_heads, 16u);
  EXPECT_EQ(defaults.max_context, 8192u);
  EXPECT_TRUE(defaults.tie_embeddings);
  EXPECT_EQ(defaults.mlp_activation, GateActivation::gelu_tanh);
  EXPECT_EQ(defaults.attention_scale(), 0.0625f);
  EXPECT_EQ(defaults.attention_window(0), 0u);
  EXPECT_EQ(defaults.attention_softcap, 0.0f);
  EXPECT_EQ(defaults.final_logit_softcap, 0.0f);

  // hidden_activation decides where given (gemma-1.1's configs); another activation is refused either way.
  json updated = config;
  updated["hidden_activation"] = "gelu_pytorch_tanh";
  EXPECT_EQ(parse_hf_config_text(updated.dump(), "m").mlp_activation, GateActivation::gelu_tanh);
  json bad = config;
  bad["hidden_activation"] = "gelu";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'hidden_activation' is \"gelu\": Gemma's MLP supports gelu_pytorch_tanh (GeGLU) only"));
  bad = config;
  bad["hidden_act"] = "silu";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'hidden_act' is \"silu\": Gemma's MLP supports gelu_pytorch_tanh (GeGLU) only"));
  bad["hidden_activation"] = "gelu_pytorch_tanh";  // which a release reading hidden_act would not run
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'hidden_act' is \"silu\""));
  bad = config;
  bad["use_bidirectional_attention"] = true;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "g/config.json"); }),
              HasSubstr("key 'use_bidirectional_attention' is true"));
}

}  // namespace
}  // namespace tilefire
