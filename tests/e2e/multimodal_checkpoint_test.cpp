// The text model of a multimodal checkpoint (Gemma3ForConditionalGeneration: Gemma 3 4B, 12B, 27B;
// Mistral3ForConditionalGeneration: Mistral Small 3.1, 3.2; LlavaForConditionalGeneration), read from its
// text_config and its language_model tensors, gives exactly the logits of the same weights stored as the
// causal class (whose engine the reference test checks against the double-precision reference forward pass),
// with the image encoder's tensors left unread and no soft cap on the logits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/test_models.h"
#include "tilefire/plan.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A safetensors file as its header and its data.
struct Checkpoint {
  json header;
  std::string data;
};

Checkpoint read_checkpoint(const std::filesystem::path& file) {
  const std::string bytes = read_file_text(file);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  return {json::parse(bytes.substr(8, header_length)), bytes.substr(8 + header_length)};
}

void write_checkpoint(const Checkpoint& checkpoint, const std::filesystem::path& file) {
  std::string header = checkpoint.header.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t header_length = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &header_length, 8);
  write_file_text(file, bytes + header + checkpoint.data);
}

// The folder's tensors renamed: "model.X" to prefix + "X" (the layouts' "language_model.model." and
// "model.language_model."), an untied "lm_head.weight" to `lm_head`, and an f32 tensor of 4 elements added
// under each of `extra`.
Checkpoint renamed(const Checkpoint& causal, const std::string& prefix, const std::string& lm_head, const std::vector<std::string>& extra) {
  Checkpoint out{json::object(), causal.data};
  for (const auto& [name, entry] : causal.header.items()) {
    if (name == "__metadata__") continue;
    out.header[name.rfind("model.", 0) == 0 ? prefix + name.substr(6) : name == "lm_head.weight" ? lm_head : name] = entry;
  }
  for (const std::string& name : extra) {
    const uint64_t begin = out.data.size();
    out.data.append(16, '\0');
    out.header[name] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {begin, begin + 16}}};
  }
  return out;
}

// A multimodal class over one of the test models, tied or not, or with the tie left to the checkpoint
// (a top-level tie_word_embeddings, which transformers v5 reads, over a text_config that 4.x reads and that
// does not tie: ModelSpec::lm_head_tie_from_checkpoint).
struct MultimodalCase {
  const char* name;
  const char* class_name;
  Variant text_model;
  bool tied;
  bool tie_from_checkpoint;
  std::vector<std::string> vision_tensors;  // as published; transformers >= 4.52 saves them under "model."
};

// The class's config.json around the test model's text config: image keys and a vision_config that nothing
// reads, and for Gemma 3 a final_logit_softcapping that Gemma3ForConditionalGeneration does not apply.
json multimodal_config(const ModelSpec& causal, const MultimodalCase& test_case) {
  ModelSpec multimodal = causal;
  multimodal.multimodal_checkpoint = true;
  multimodal.arch_name = test_case.class_name;
  multimodal.lm_head_tie_from_checkpoint = test_case.tie_from_checkpoint;
  json config = json::parse(to_hf_config_json(multimodal));
  if (causal.arch == Architecture::gemma3) {
    config["boi_token_index"] = 255999;
    config["image_token_index"] = 262144;
    config["vision_config"] = {{"hidden_size", 1152}, {"model_type", "siglip_vision_model"}, {"num_hidden_layers", 27}};
    config["text_config"]["final_logit_softcapping"] = 5.0;
  } else {
    config["image_token_index"] = 10;
    config["vision_config"] = {{"hidden_size", 1024}, {"model_type", "pixtral"}, {"num_hidden_layers", 24}};
  }
  return config;
}

class MultimodalCheckpoint : public ::testing::TestWithParam<MultimodalCase> {
 protected:
  void SetUp() override {
    spec_ = variant_spec(GetParam().text_model);
    spec_.tie_embeddings = GetParam().tied;
    write_test_model(spec_, causal_.path());
    causal_checkpoint_ = read_checkpoint(causal_.path() / "model.safetensors");
  }

  // A multimodal folder of the test model's weights under `prefix` (its LM head, if untied, as `lm_head`),
  // with `extra` tensors beside them.
  std::filesystem::path write_multimodal(const TempDir& dir, const std::string& prefix, const std::vector<std::string>& extra,
                                         const std::string& lm_head = "language_model.lm_head.weight") {
    write_file_text(dir.path() / "config.json", multimodal_config(spec_, GetParam()).dump(2));
    write_checkpoint(renamed(causal_checkpoint_, prefix, lm_head, extra), dir.path() / "model.safetensors");
    return dir.path();
  }

  static std::unique_ptr<Engine> engine_on(const std::filesystem::path& folder) {
    EngineOptions options;
    options.model_dir = folder.string();
    options.threads = 2;
    return std::make_unique<Engine>(options);
  }

  ModelSpec spec_;
  TempDir causal_{"multimodal-causal"};
  Checkpoint causal_checkpoint_;
};

TEST_P(MultimodalCheckpoint, BothLayoutsGiveTheCausalModelsLogitsAndTokens) {
  TempDir published{"multimodal-published"}, resaved{"multimodal-resaved"};
  std::vector<std::string> resaved_vision;
  for (const std::string& name : GetParam().vision_tensors) resaved_vision.push_back("model." + name);
  const std::vector<std::filesystem::path> folders = {
      write_multimodal(published, "language_model.model.", GetParam().vision_tensors),  // as the publishers give them
      write_multimodal(resaved, "model.language_model.", resaved_vision, "lm_head.weight")};  // as transformers >= 4.52 saves them
  const std::unique_ptr<Engine> causal = engine_on(causal_.path());
  const std::vector<int32_t> prompt = {2, 17, 256, 3, 511, 42, 7};
  const std::vector<float> expected_prefill = causal->prefill(prompt);
  const std::vector<float> expected_decode = causal->decode(5);
  GenerateRequest request;
  request.prompt = {3, 1, 4, 1, 5};
  request.max_new_tokens = 24;
  request.stop_at_eos = false;
  const std::vector<int32_t> expected_tokens = causal->generate(request).tokens;

  for (const std::filesystem::path& folder : folders) {
    SCOPED_TRACE(folder.string());
    const std::unique_ptr<Engine> multimodal = engine_on(folder);
    EXPECT_EQ(multimodal->model().architecture, GetParam().class_name);
    EXPECT_EQ(multimodal->prefill(prompt), expected_prefill);  // the same weights and math: the same floats
    EXPECT_EQ(multimodal->decode(5), expected_decode);
    EXPECT_EQ(multimodal->generate(request).tokens, expected_tokens);
  }
  // A plan counts the same weights (a tie left to the checkpoint: as the checkpoint has it), from the
  // tensors' names alone: a folder of the config and an index whose shards are not there plans too.
  const TensorParallelPlan causal_plan = plan_tensor_parallel(causal_.path().string(), "", 1, 80ull << 30, 0);
  TempDir index_only{"multimodal-index-only"};
  write_file_text(index_only.path() / "config.json", read_file_text(published.path() / "config.json"));
  json weight_map = json::object();
  const Checkpoint stored = read_checkpoint(published.path() / "model.safetensors");
  for (const auto& [name, entry] : stored.header.items())
    if (name != "__metadata__") weight_map[name] = "model-00001-of-00002.safetensors";
  write_file_text(index_only.path() / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  for (const std::filesystem::path& folder : {folders[0], folders[1], index_only.path()})
    EXPECT_EQ(plan_tensor_parallel(folder.string(), "", 1, 80ull << 30, 0).ranks.at(0).weight_bytes, causal_plan.ranks.at(0).weight_bytes)
        << folder;
  // The check once more on a loaded store (take_language_model again) finds the same tensors.
  LoadedModel loaded = load_hf_model(folders[0]);
  const size_t tensors = loaded.weights.size();
  EXPECT_EQ(tensors, causal_checkpoint_.header.size() - causal_checkpoint_.header.count("__metadata__"));
  check_weights_against_spec(loaded.spec, loaded.weights, loaded.origin);
  EXPECT_EQ(loaded.weights.size(), tensors);
}

TEST_P(MultimodalCheckpoint, WhatTheTextModelCannotReadIsRefusedByName) {
  TempDir extra_layer{"multimodal-extra"}, twice{"multimodal-twice"}, missing{"multimodal-missing"}, no_text{"multimodal-no-text"};
  auto refusal = [](const std::filesystem::path& folder) {
    try {
      load_hf_model(folder);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  // A layer past num_hidden_layers, under the multimodal layout: read as the causal model's would be, and
  // named as the file names it.
  EXPECT_THAT(refusal(write_multimodal(extra_layer, "language_model.model.", {"language_model.model.layers.2.input_layernorm.weight"})),
              HasSubstr("the checkpoint holds 'language_model.model.layers.2.input_layernorm.weight' (in "));
  EXPECT_THAT(refusal(extra_layer.path()), HasSubstr("a layer past config.json's num_hidden_layers 2"));
  // Both layouts of one tensor: which one is meant?
  EXPECT_THAT(refusal(write_multimodal(twice, "language_model.model.", {"model.language_model.norm.weight"})),
              HasSubstr("holds the text model's tensor 'model.norm.weight' twice, as 'language_model.model.norm.weight' and as "
                        "'model.language_model.norm.weight'"));
  // A tensor misnamed (as missing: its bytes stay, which the loader wants read): the message names the
  // checkpoint's own names for it.
  write_multimodal(missing, "language_model.model.", {});
  Checkpoint checkpoint = read_checkpoint(missing.path() / "model.safetensors");
  checkpoint.header["language_model.model.final_norm.weight"] = checkpoint.header.at("language_model.model.norm.weight");
  checkpoint.header.erase("language_model.model.norm.weight");
  write_checkpoint(checkpoint, missing.path() / "model.safetensors");
  EXPECT_THAT(refusal(missing.path()), HasSubstr("missing tensor 'model.norm.weight' (expected shape [256]): a " +
                                                 std::string(GetParam().class_name) +
                                                 " checkpoint holds it as 'language_model.model.norm.weight' or "
                                                 "'model.language_model.norm.weight'"));
  // A config without its text model's config.
  write_multimodal(no_text, "language_model.model.", {});
  json config = multimodal_config(spec_, GetParam());
  config.erase("text_config");
  write_file_text(no_text.path() / "config.json", config.dump());
  EXPECT_THAT(refusal(no_text.path()), HasSubstr("config.json: key 'text_config' must be an object: " + std::string(GetParam().class_name) +
                                                 " keeps its text model's config there"));
  config = multimodal_config(spec_, GetParam());
  config["text_config"]["hidden_size"] = "wide";
  write_file_text(no_text.path() / "config.json", config.dump());
  EXPECT_THAT(refusal(no_text.path()), HasSubstr("config.json: text_config: key 'hidden_size' must be a positive integer"));
}

const std::vector<std::string> kGemma3Vision = {"vision_tower.vision_model.post_layernorm.weight",
                                                "multi_modal_projector.mm_soft_emb_norm.weight"};
const std::vector<std::string> kPixtralVision = {"vision_tower.transformer.layers.0.attention_norm.weight",
                                                 "multi_modal_projector.patch_merger.merging_layer.weight"};
const std::vector<std::string> kClipVision = {"vision_tower.vision_model.post_layernorm.weight", "multi_modal_projector.linear_1.weight"};

INSTANTIATE_TEST_SUITE_P(
    Classes, MultimodalCheckpoint,
    ::testing::Values(MultimodalCase{"Gemma3Tied", "Gemma3ForConditionalGeneration", Variant::gemma3, true, false, kGemma3Vision},
                      MultimodalCase{"Gemma3Untied", "Gemma3ForConditionalGeneration", Variant::gemma3, false, false, kGemma3Vision},
                      MultimodalCase{"Mistral3Untied", "Mistral3ForConditionalGeneration", Variant::mistral, false, false, kPixtralVision},
                      MultimodalCase{"Mistral3Tied", "Mistral3ForConditionalGeneration", Variant::mistral_window, true, false, kPixtralVision},
                      // No tie stated: a stored LM head unties it, none ties it.
                      MultimodalCase{"Mistral3HeadStored", "Mistral3ForConditionalGeneration", Variant::mistral, false, true, kPixtralVision},
                      MultimodalCase{"Mistral3NoHeadStored", "Mistral3ForConditionalGeneration", Variant::mistral, true, true, kPixtralVision},
                      MultimodalCase{"Gemma3HeadStored", "Gemma3ForConditionalGeneration", Variant::gemma3, false, true, kGemma3Vision},
                      MultimodalCase{"LlavaLlama", "LlavaForConditionalGeneration", Variant::llama, false, false, kClipVision},
                      MultimodalCase{"LlavaNoHeadStored", "LlavaForConditionalGeneration", Variant::llama, true, true, kClipVision},
                      MultimodalCase{"LlavaQwen2Tied", "LlavaForConditionalGeneration", Variant::qwen2_bias, true, false, kClipVision}),
    [](const ::testing::TestParamInfo<MultimodalCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tilefire::testing
