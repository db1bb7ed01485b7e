// The text model of a multimodal checkpoint's config.json (ModelSpec::multimodal_checkpoint): Gemma 3's,
// Mistral Small 3.1's and 3.2's, LLaVA's. The causal config under text_config is read by
// graph/model_spec.cpp, as a causal checkpoint's is.
#include <array>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "graph/model_spec.h"
#include "graph/config_reader.h"  // fail
#include "graph/model_spec_detail.h"

namespace tilefire {

using nlohmann::json;
using namespace model_spec_detail;

namespace {

// The multimodal classes whose text model Tilefire runs, for text prompts: their config.json keeps the text
// model's config as text_config (of the class its model_type names), their tensors the text model's under
// language_model.model.* (as published) or model.language_model.* (as transformers >= 4.52 saves them),
// beside an image encoder's that nothing reads.
struct MultimodalClass {
  // How transformers v5 reads the tie (4.x reads text_config's): Gemma3Config and Mistral3Config have a
  // top-level key of their own, true by default; LlavaConfig's is false by default and turns true when
  // text_config's is.
  enum class V5Tie { top_default_true, top_or_text };

  const char* hf_name;
  const char* default_text_type;          // text_config's model_type where it names none, as the config class sets it
  std::array<const char*, 3> text_types;  // the text models its published checkpoints use (nullptr: none more)
  V5Tie v5_tie;
};

constexpr MultimodalClass kMultimodalClasses[] = {
    // Gemma 3 4B, 12B, 27B
    {"Gemma3ForConditionalGeneration", "gemma3_text", {"gemma3_text", nullptr, nullptr}, MultimodalClass::V5Tie::top_default_true},
    // Mistral Small 3.1, 3.2
    {"Mistral3ForConditionalGeneration", "mistral", {"mistral", "llama", nullptr}, MultimodalClass::V5Tie::top_default_true},
    // LLaVA 1.5 (llava-hf's), Pixtral 12B, LLaVA-Interleave
    {"LlavaForConditionalGeneration", "llama", {"llama", "mistral", "qwen2"}, MultimodalClass::V5Tie::top_or_text},
};

const MultimodalClass* multimodal_class(const json& config) {
  const json* architectures = config.contains("architectures") ? &config.at("architectures") : nullptr;
  if (!architectures || !architectures->is_array() || architectures->empty() || !architectures->begin()->is_string()) return nullptr;
  for (const MultimodalClass& entry : kMultimodalClasses)
    if (*architectures->begin() == entry.hf_name) return &entry;
  return nullptr;
}

// The config class defaults of the text models under a multimodal class, for the keys a text_config may
// leave out (LLaVA 1.5's gives no sizes: LlamaConfig's stand in). spec_of_config reads Gemma3TextConfig's
// itself; a causal model's config.json must give its sizes.
void fill_text_class_defaults(json& text, const std::string& model_type) {
  struct Defaults {
    const char* model_type;
    uint32_t vocab, hidden, ffn, layers, heads, kv_heads, max_context;  // kv_heads 0: as many as the heads
    int32_t bos, eos;                                                  // -1: none
  };
  // (Qwen2Config's 32 KV heads are spec_of_config's default, which says so when it does not fit.)
  constexpr Defaults kDefaults[] = {
      {"llama", 32000, 4096, 11008, 32, 32, 0, 2048, 1, 2},      // LlamaConfig
      {"mistral", 32000, 4096, 14336, 32, 32, 8, 131072, 1, 2},  // MistralConfig
      {"qwen2", 151936, 4096, 22016, 32, 32, 0, 32768, -1, -1},  // Qwen2Config
  };
  for (const Defaults& entry : kDefaults) {
    if (model_type != entry.model_type) continue;
    auto fill = [&](const char* key, uint32_t value) {
      if (!text.contains(key) || text.at(key).is_null()) text[key] = value;
    };
    fill("vocab_size", entry.vocab);
    fill("hidden_size", entry.hidden);
    fill("intermediate_size", entry.ffn);
    fill("num_hidden_layers", entry.layers);
    fill("num_attention_heads", entry.heads);
    if (entry.kv_heads != 0) fill("num_key_value_heads", entry.kv_heads);
    fill("max_position_embeddings", entry.max_context);
    // The token ids too (LLaVA 1.5's and Mistral Small's configs give none, and transformers stops at
    // these); the top level's, where given, replace them.
    if (entry.bos >= 0 && !text.contains("bos_token_id")) text["bos_token_id"] = entry.bos;
    if (entry.eos >= 0 && !text.contains("eos_token_id")) text["eos_token_id"] = entry.eos;
  }
}

// A multimodal class's config.json: the text model's config is its text_config, to which some keys of the
// top level are given (below). Messages about text_config's keys name "config.json: text_config".
ModelSpec spec_of_multimodal_config(const json& config, const MultimodalClass& mm, const std::string& origin) {
  if (!config.contains("text_config") || !config.at("text_config").is_object())
    fail(origin, std::string("key 'text_config' must be an object: ") + mm.hf_name + " keeps its text model's config there");
  json text = config.at("text_config");
  // The text model's class, by text_config's model_type (as the config class builds it).
  std::string text_type = mm.default_text_type;
  if (text.contains("model_type") && !text.at("model_type").is_null()) {
    if (!text.at("model_type").is_string()) fail(origin + ": text_config", "key 'model_type' must be a string");
    text_type = text.at("model_type").get<std::string>();
  }
  std::string supported;
  const char* text_class = nullptr;
  for (const char* type : mm.text_types) {
    if (type == nullptr) continue;
    supported += (supported.empty() ? "'" : ", '") + std::string(type) + "'";
    if (const ArchitectureName* entry = architecture_of_model_type(type); entry && text_type == type) text_class = entry->hf_name;
  }
  if (text_class == nullptr)
    fail(origin + ": text_config", "key 'model_type' is '" + text_type + "': the text models of " + mm.hf_name +
                                       " that Tilefire runs are " + supported);
  fill_text_class_defaults(text, text_type);
  // The token ids: the top level's first, as transformers' GenerationConfig.from_model_config takes them
  // (Gemma 3's published ones are there), text_config's where the top has none. Read here first, so that a
  // message about one names the top level.
  check_token_ids(config, origin);
  for (const char* key : {"bos_token_id", "eos_token_id"})
    if (config.contains(key) && !config.at(key).is_null()) text[key] = config.at(key);
  // The dtype the config claims (the tensors decide when they load): the top level's where text_config
  // claims none.
  if (!text.contains("torch_dtype") && !text.contains("dtype"))
    for (const char* key : {"torch_dtype", "dtype"})
      if (config.contains(key)) text[key] = config.at(key);
  text["architectures"] = json::array({text_class});
  text["model_type"] = text_type;
  ModelSpec spec = spec_of_causal_config(text, origin + ": text_config");
  // Whether the LM head is the embedding: transformers 4.x reads text_config's (its class's default where
  // it gives none), v5 the top level's (MultimodalClass::V5Tie). Where the two differ, only one of them
  // runs the checkpoint: a stored LM head is an untied model's (a tied model is saved without it), and
  // without one only the embedding can be the head. So there the checkpoint decides.
  const bool text_ties = spec.tie_embeddings;
  std::optional<bool> top_tie;
  if (config.contains("tie_word_embeddings") && !config.at("tie_word_embeddings").is_null()) {
    const json& top = config.at("tie_word_embeddings");
    if (!top.is_boolean()) fail(origin, "key 'tie_word_embeddings' must be true or false, got " + top.dump().substr(0, 80));
    top_tie = top.get<bool>();
  }
  bool v5_ties = text_ties;
  switch (mm.v5_tie) {
    case MultimodalClass::V5Tie::top_default_true: v5_ties = top_tie.value_or(true); break;
    case MultimodalClass::V5Tie::top_or_text: v5_ties = top_tie.value_or(false) || text_ties; break;
  }
  if (v5_ties != text_ties) {
    spec.lm_head_tie_from_checkpoint = true;
    spec.tie_embeddings = false;  // until the tensors are checked: the larger model, for plans
  }
  spec.arch_name = mm.hf_name;
  spec.multimodal_checkpoint = true;
  // These classes' logits are the LM head's alone, whatever text_config says (Gemma3ForConditionalGeneration
  // in transformers >= 4.52; 4.50 and 4.51 wrapped Gemma3ForCausalLM, which applies a cap when given: every
  // published config gives none).
  spec.final_logit_softcap = 0.0f;
  return spec;
}

}  // namespace

std::optional<ModelSpec> model_spec_detail::parse_multimodal_config(const json& config, const std::string& origin) {
  if (const MultimodalClass* mm = multimodal_class(config)) return spec_of_multimodal_config(config, *mm, origin);
  return std::nullopt;
}

std::string model_spec_detail::multimodal_class_names() {
  std::string names;
  for (const MultimodalClass& entry : kMultimodalClasses) names += (names.empty() ? "" : ", ") + std::string(entry.hf_name);
  return names;
}

}  // namespace tilefire
