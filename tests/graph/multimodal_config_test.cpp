// ModelSpec from the config.json of the multimodal classes whose text model Tilefire runs beside Gemma 3's
// (model_spec_architectures_test.cpp): Mistral3ForConditionalGeneration (Mistral Small 3.1, 3.2) and
// LlavaForConditionalGeneration, their text_config read with its config class's defaults, and the
// tie_word_embeddings that transformers 4.x and v5 read differently.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

// Mistral Small 3.1's config.json in the shape its copies give it (the vision tower's abridged): the text
// model's sizes under text_config, no tie_word_embeddings at either level.
json mistral3_config() {
  return json::parse(R"({
    "architectures": ["Mistral3ForConditionalGeneration"], "image_token_index": 10, "model_type": "mistral3",
    "multimodal_projector_bias": false, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
    "text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 32768,
                    "max_position_embeddings": 131072, "model_type": "mistral", "num_attention_heads": 32,
                    "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
                    "rope_theta": 1000000000.0, "sliding_window": null, "vocab_size": 131072},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1024, "model_type": "pixtral", "num_hidden_layers": 24, "patch_size": 14},
    "vision_feature_layer": -1})");
}

// LLaVA 1.5 7B's config.json in the shape its copies give it: a text_config that leaves the sizes to
// LlamaConfig's defaults.
json llava_config() {
  return json::parse(R"({
    "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100, "image_token_index": 32000,
    "model_type": "llava", "pad_token_id": 32001, "projector_hidden_act": "gelu",
    "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                    "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
                    "torch_dtype": "float16", "vocab_size": 32064},
    "tie_word_embeddings": false, "torch_dtype": "float16", "transformers_version": "4.36.0.dev0",
    "vision_config": {"hidden_size": 1024, "image_size": 336, "model_type": "clip_vision_model", "patch_size": 14},
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064})");
}

TEST(MultimodalConfig, Mistral3ReadsItsMistralTextModel) {
  json config = mistral3_config();
  const ModelSpec spec = parse_hf_config_text(config.dump(), "mistral-small/config.json");
  EXPECT_EQ(spec.arch, Architecture::mistral);
  EXPECT_EQ(spec.arch_name, "Mistral3ForConditionalGeneration");
  EXPECT_TRUE(spec.multimodal_checkpoint);
  EXPECT_EQ(spec.vocab, 131072u);
  EXPECT_EQ(spec.hidden, 5120u);
  EXPECT_EQ(spec.layers, 40u);
  EXPECT_EQ(spec.heads, 32u);
  EXPECT_EQ(spec.kv_heads, 8u);
  EXPECT_EQ(spec.head_dim, 128u);  // given: not hidden / heads (160)
  EXPECT_EQ(spec.ffn, 32768u);
  EXPECT_EQ(spec.rope_theta, 1e9f);
  EXPECT_EQ(spec.rms_eps, 1e-5f);
  EXPECT_EQ(spec.sliding_window, 0u);  // null: MistralConfig's 4096 does not apply
  EXPECT_EQ(spec.dtype, DType::bf16);
  EXPECT_EQ(spec.final_logit_softcap, 0.0f);
  // MistralConfig's token ids, which neither level gives: transformers stops at 2.
  EXPECT_EQ(spec.bos_token, 1);
  EXPECT_EQ(spec.eos_tokens, (std::vector<int32_t>{2}));
  // No tie stated: transformers 4.x unties it (MistralConfig's default), v5 reads Mistral3Config's own
  // default, true. The checkpoint decides; until it is read, the head is counted as a matrix of its own.
  EXPECT_TRUE(spec.lm_head_tie_from_checkpoint);
  EXPECT_FALSE(spec.tie_embeddings);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);

  // A top-level tie that text_config's agrees with settles it; one that does not (as a v5 save of the
  // above may write it) leaves it to the checkpoint as well.
  config["tie_word_embeddings"] = false;
  const ModelSpec stated = parse_hf_config_text(config.dump(), "m");
  EXPECT_FALSE(stated.lm_head_tie_from_checkpoint);
  EXPECT_FALSE(stated.tie_embeddings);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(stated), "round trip"), stated);
  config["tie_word_embeddings"] = true;
  EXPECT_TRUE(parse_hf_config_text(config.dump(), "m").lm_head_tie_from_checkpoint);
  config["text_config"]["tie_word_embeddings"] = true;
  const ModelSpec tied = parse_hf_config_text(config.dump(), "m");
  EXPECT_TRUE(tied.tie_embeddings);
  EXPECT_FALSE(tied.lm_head_tie_from_checkpoint);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(tied), "round trip"), tied);
  // A text_config that ties, with no top-level key: both readings tie. Under a top level that does not:
  // the checkpoint decides.
  config.erase("tie_word_embeddings");
  EXPECT_TRUE(parse_hf_config_text(config.dump(), "m").tie_embeddings);
  EXPECT_FALSE(parse_hf_config_text(config.dump(), "m").lm_head_tie_from_checkpoint);
  config["tie_word_embeddings"] = false;
  EXPECT_TRUE(parse_hf_config_text(config.dump(), "m").lm_head_tie_from_checkpoint);
  config["tie_word_embeddings"] = "no";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(config.dump(), "m/config.json"); }),
              HasSubstr("m/config.json: key 'tie_word_embeddings' must be true or false, got \"no\""));

  // MistralConfig's defaults for what text_config leaves out: 8 KV heads, a window of 4096 on every layer,
  // 131072 positions, an RMSNorm epsilon of 1e-6.
  json sparse = mistral3_config();
  for (const char* key : {"num_key_value_heads", "sliding_window", "max_position_embeddings", "rms_norm_eps", "model_type"})
    sparse["text_config"].erase(key);
  const ModelSpec defaults = parse_hf_config_text(sparse.dump(), "m");
  EXPECT_EQ(defaults.kv_heads, 8u);
  EXPECT_EQ(defaults.sliding_window, 4096u);
  EXPECT_EQ(defaults.attention_window(39), 4096u);
  EXPECT_EQ(defaults.max_context, 131072u);
  EXPECT_EQ(defaults.rms_eps, 1e-6f);
}

TEST(MultimodalConfig, LlavaReadsItsTextModelWithItsConfigClassDefaults) {
  json config = llava_config();
  const ModelSpec spec = parse_hf_config_text(config.dump(), "llava/config.json");
  EXPECT_EQ(spec.arch, Architecture::llama);
  EXPECT_EQ(spec.arch_name, "LlavaForConditionalGeneration");
  EXPECT_TRUE(spec.multimodal_checkpoint);
  // LlamaConfig's defaults for the sizes text_config leaves out (Vicuna 7B's).
  EXPECT_EQ(spec.vocab, 32064u);
  EXPECT_EQ(spec.hidden, 4096u);
  EXPECT_EQ(spec.layers, 32u);
  EXPECT_EQ(spec.heads, 32u);
  EXPECT_EQ(spec.kv_heads, 32u);
  EXPECT_EQ(spec.head_dim, 128u);
  EXPECT_EQ(spec.ffn, 11008u);
  EXPECT_EQ(spec.max_context, 4096u);
  EXPECT_EQ(spec.rms_eps, 1e-5f);
  EXPECT_EQ(spec.dtype, DType::f16);
  EXPECT_EQ(spec.bos_token, 1);  // LlamaConfig's token ids
  EXPECT_EQ(spec.eos_tokens, (std::vector<int32_t>{2}));
  EXPECT_FALSE(spec.tie_embeddings);
  EXPECT_FALSE(spec.lm_head_tie_from_checkpoint);  // both readings untie it
  expect_same_spec(parse_hf_config_text(to_hf_config_json(spec), "round trip"), spec);
  // A text_config that names no model_type is LlamaConfig's, as LlavaConfig builds it.
  config["text_config"].erase("model_type");
  EXPECT_EQ(parse_hf_config_text(config.dump(), "m").arch, Architecture::llama);
  // LlamaConfig's own defaults: 2048 positions, an RMSNorm epsilon of 1e-6.
  config["text_config"].erase("max_position_embeddings");
  config["text_config"].erase("rms_norm_eps");
  EXPECT_EQ(parse_hf_config_text(config.dump(), "m").max_context, 2048u);
  EXPECT_EQ(parse_hf_config_text(config.dump(), "m").rms_eps, 1e-6f);

  // Pixtral 12B (a Mistral text model) and LLaVA-Interleave (Qwen2, its q/k/v biases).
  config = llava_config();
  config["text_config"] = {{"model_type", "mistral"}, {"hidden_size", 5120}, {"head_dim", 128}, {"num_hidden_layers", 40},
                           {"num_key_value_heads", 8}, {"vocab_size", 131072}, {"rope_theta", 1000000000.0},
                           {"sliding_window", nullptr}};
  const ModelSpec pixtral = parse_hf_config_text(config.dump(), "m");
  EXPECT_EQ(pixtral.arch, Architecture::mistral);
  EXPECT_EQ(pixtral.ffn, 14336u);  // MistralConfig's default
  EXPECT_EQ(pixtral.head_dim, 128u);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(pixtral), "round trip"), pixtral);
  config["text_config"] = {{"model_type", "qwen2"}, {"hidden_size", 896}, {"intermediate_size", 4864}, {"num_hidden_layers", 24},
                           {"num_attention_heads", 14}, {"rope_theta", 1000000.0}, {"tie_word_embeddings", true}};
  // Qwen2Config's 32 KV heads do not fit 14 query heads (transformers could not run it either).
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(config.dump(), "m/config.json"); }),
              HasSubstr("m/config.json: text_config: key 'num_key_value_heads' is absent, and Qwen2ForCausalLM's default of 32 KV "
                        "heads does not divide num_attention_heads (14)"));
  config["text_config"]["num_key_value_heads"] = 2;
  // The top level's false: v5's LlavaConfig then takes text_config's true, as 4.x does.
  const ModelSpec interleave = parse_hf_config_text(config.dump(), "m");
  EXPECT_EQ(interleave.arch, Architecture::qwen2);
  EXPECT_TRUE(interleave.qkv_bias);
  EXPECT_EQ(interleave.vocab, 151936u);  // Qwen2Config's default
  EXPECT_EQ(interleave.kv_heads, 2u);
  EXPECT_EQ(interleave.max_context, 32768u);
  EXPECT_TRUE(interleave.eos_tokens.empty());  // Qwen2Config gives none (generation_config.json does)
  EXPECT_TRUE(interleave.tie_embeddings);
  EXPECT_FALSE(interleave.lm_head_tie_from_checkpoint);
  expect_same_spec(parse_hf_config_text(to_hf_config_json(interleave), "round trip"), interleave);
  // A top level that ties over a text model that does not: v5 ties it, 4.x does not; the checkpoint decides.
  config["text_config"]["tie_word_embeddings"] = false;
  config["tie_word_embeddings"] = true;
  EXPECT_TRUE(parse_hf_config_text(config.dump(), "m").lm_head_tie_from_checkpoint);
}

TEST(MultimodalConfig, WhatTheTextModelCannotBeIsRefusedByName) {
  // A text model Tilefire does not run under these classes.
  json bad = llava_config();
  bad["text_config"]["model_type"] = "gemma";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "l/config.json"); }),
              HasSubstr("l/config.json: text_config: key 'model_type' is 'gemma': the text models of LlavaForConditionalGeneration that "
                        "Tilefire runs are 'llama', 'mistral', 'qwen2'"));
  bad = mistral3_config();
  bad["text_config"]["model_type"] = "qwen2";
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "m/config.json"); }),
              HasSubstr("text_config: key 'model_type' is 'qwen2': the text models of Mistral3ForConditionalGeneration that Tilefire "
                        "runs are 'mistral', 'llama'"));
  bad["text_config"]["model_type"] = 7;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "m/config.json"); }),
              HasSubstr("m/config.json: text_config: key 'model_type' must be a string"));
  // No text_config; a key of it malformed, named where it is.
  bad = mistral3_config();
  bad.erase("text_config");
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "m/config.json"); }),
              HasSubstr("m/config.json: key 'text_config' must be an object: Mistral3ForConditionalGeneration keeps its text model's "
                        "config there"));
  bad = mistral3_config();
  bad["text_config"]["hidden_size"] = 0;
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "m/config.json"); }),
              HasSubstr("m/config.json: text_config: key 'hidden_size' must be a positive integer"));
  // The unknown-class message lists the multimodal classes too.
  bad["architectures"] = {"Qwen2VLForConditionalGeneration"};
  EXPECT_THAT(input_error_of([&] { parse_hf_config_text(bad.dump(), "m/config.json"); }),
              HasSubstr(", Gemma3ForConditionalGeneration, Mistral3ForConditionalGeneration, LlavaForConditionalGeneration)"));
}

}  // namespace
}  // namespace tilefire
