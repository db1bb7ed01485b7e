// The config.json text a Hugging Face checkpoint of a ModelSpec carries: graph/model_spec.cpp's parser
// reads it back to the same spec (the round trip model_spec tests check).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "graph/model_spec.h"
#include "graph/model_spec_detail.h"

namespace tilefire {

using nlohmann::json;
using namespace model_spec_detail;

namespace {

// The keys parse_sliding_window (graph/model_spec_attention.cpp) reads back to the same window and layers.
void write_sliding_window(const ModelSpec& spec, json& config) {
  if (spec.arch == Architecture::gemma) {  // no window (GemmaConfig has none)
    if (spec.sliding_window != 0) throw std::invalid_argument("to_hf_config_json: " + spec.arch_name + " slides no layer");
    return;
  }
  if (spec.is_gemma()) {  // every layer's type, so that no default pattern applies
    config["sliding_window"] = spec.sliding_window != 0 ? json(spec.sliding_window) : json(nullptr);
    json types = json::array();
    for (uint32_t l = 0; l < spec.layers; ++l) types.push_back(spec.attention_window(l) != 0 ? "sliding_attention" : "full_attention");
    config["layer_types"] = types;
    return;
  }
  if (is_qwen(spec.arch) || spec.arch == Architecture::smollm3) {
    config["use_sliding_window"] = spec.sliding_window != 0;
    config["sliding_window"] = spec.sliding_window != 0 ? json(spec.sliding_window) : json(nullptr);
    if (spec.sliding_window == 0) return;
    json types = json::array();
    for (bool sliding : spec.sliding_layers) types.push_back(sliding ? "sliding_attention" : "full_attention");
    config["layer_types"] = types;
    // Readers older than layer_types take max_window_layers: the first sliding layer, when the rest slide.
    const auto first = std::find(spec.sliding_layers.begin(), spec.sliding_layers.end(), true);
    if (is_qwen(spec.arch) && std::find(first, spec.sliding_layers.end(), false) == spec.sliding_layers.end())
      config["max_window_layers"] = uint32_t(first - spec.sliding_layers.begin());
  } else if (spec.arch == Architecture::mistral || spec.arch == Architecture::phi3) {
    const bool some_full = std::find(spec.sliding_layers.begin(), spec.sliding_layers.end(), false) != spec.sliding_layers.end();
    if (spec.sliding_window != 0 && some_full)
      throw std::invalid_argument("to_hf_config_json: " + spec.arch_name + " slides every layer or none");
    config["sliding_window"] = spec.sliding_window != 0 ? json(spec.sliding_window) : json(nullptr);
  } else if (spec.sliding_window != 0) {
    throw std::invalid_argument("to_hf_config_json: " + spec.arch_name + " has no sliding window");
  }
}

}  // namespace

std::string to_hf_config_json(const ModelSpec& spec) {
  const ArchitectureName& arch = architecture_entry(spec.arch);
  json config = json::object();
  config["architectures"] = json::array({spec.arch_name.empty() ? arch.hf_name : spec.arch_name});
  config["model_type"] = arch.model_type;
  config["vocab_size"] = spec.vocab;
  config["hidden_size"] = spec.hidden;
  config["num_hidden_layers"] = spec.layers;
  config["num_attention_heads"] = spec.heads;
  config["num_key_value_heads"] = spec.kv_heads;
  config["head_dim"] = spec.head_dim;
  if (spec.rotary_dim && spec.rotary_dim != spec.head_dim) {
    // int(head_dim * factor) must give rotary_dim back: the quotient, nudged up if it rounded below.
    double factor = double(spec.rotary_dim) / double(spec.head_dim);
    while (uint32_t(double(spec.head_dim) * factor) < spec.rotary_dim) factor = std::nextafter(factor, 2.0);
    config["partial_rotary_factor"] = factor;
  }
  config["intermediate_size"] = spec.ffn;
  config["max_position_embeddings"] = spec.max_context;
  config["rms_norm_eps"] = float_to_json(spec.rms_eps);
  config["rope_theta"] = float_to_json(spec.rope_theta);
  if (spec.rope_scaling.longrope) {
    // As Phi-3's configs have it (transformers' Phi3Config wants exactly these three keys in rope_scaling,
    // original_max_position_embeddings beside it); an attention_factor other than the one those imply
    // is written too, as newer configs may.
    const RopeScaling& scaling = spec.rope_scaling;
    json factors_short = json::array(), factors_long = json::array();
    for (float f : scaling.short_factor) factors_short.push_back(float_to_json(f));
    for (float f : scaling.long_factor) factors_long.push_back(float_to_json(f));
    config["rope_scaling"] = {{"type", "longrope"}, {"short_factor", factors_short}, {"long_factor", factors_long}};
    config["original_max_position_embeddings"] = scaling.original_max_position;
    const double implied_factor = double(spec.max_context) / double(scaling.original_max_position);
    if (scaling.factor != float(implied_factor)) config["rope_scaling"]["factor"] = float_to_json(scaling.factor);
    if (scaling.attention_factor != float(longrope_default_attention_factor(scaling.factor, scaling.original_max_position)))
      config["rope_scaling"]["attention_factor"] = float_to_json(scaling.attention_factor);
  } else if (spec.rope_scaling.llama3) {
    config["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", float_to_json(spec.rope_scaling.factor)},
        {"low_freq_factor", float_to_json(spec.rope_scaling.low_freq_factor)},
        {"high_freq_factor", float_to_json(spec.rope_scaling.high_freq_factor)},
        {"original_max_position_embeddings", spec.rope_scaling.original_max_position},
    };
  } else if (spec.rope_scaling.linear) {
    config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", float_to_json(spec.rope_scaling.factor)}};
  } else {
    config["rope_scaling"] = nullptr;
  }
  write_sliding_window(spec, config);
  if (spec.arch == Architecture::smollm3) {  // written whole: 1 where a layer rotates
    json rotates = json::array();
    for (uint32_t l = 0; l < spec.layers; ++l) rotates.push_back(spec.layer_rotates(l) ? 1 : 0);
    config["no_rope_layers"] = rotates;
  } else if (!spec.nope_layers.empty()) {
    throw std::invalid_argument("to_hf_config_json: " + spec.arch_name + " rotates every layer");
  }
  if (spec.arch == Architecture::granite) {
    config["embedding_multiplier"] = float_to_json(spec.embedding_multiplier);
    config["residual_multiplier"] = float_to_json(spec.residual_multiplier);
    config["attention_multiplier"] = float_to_json(spec.attention_scale());
    config["logits_scaling"] = float_to_json(spec.logits_scaling);
  } else if ((!spec.is_gemma() && spec.embedding_multiplier != 1.0f) || spec.residual_multiplier != 1.0f ||
             spec.attention_multiplier != 0.0f || spec.logits_scaling != 1.0f) {
    throw std::invalid_argument("to_hf_config_json: " + spec.arch_name + " has no multipliers (GraniteForCausalLM does)");
  }
  config["tie_word_embeddings"] = spec.tie_embeddings;
  // Qwen2 always has q/k/v biases (its config has no key for it), Phi-3 never; the others say it with
  // attention_bias.
  if (spec.arch != Architecture::qwen2 && spec.arch != Architecture::phi3) config["attention_bias"] = spec.qkv_bias;
  if (spec.is_gemma()) {
    // What the parser derives from these keys must be what the spec holds.
    const bool gemma3 = spec.arch == Architecture::gemma3, gemma1 = spec.arch == Architecture::gemma;
    if (spec.mlp_activation != GateActivation::gelu_tanh || (spec.query_pre_attn_scalar == 0) != gemma1 ||
        (spec.local_rope_theta != 0.0f) != gemma3 || spec.embedding_multiplier != gemma_embedding_scale(spec.hidden, spec.dtype) ||
        (gemma1 && (spec.attention_softcap != 0.0f || spec.final_logit_softcap != 0.0f)))
      throw std::invalid_argument("to_hf_config_json: a Gemma spec gates with the tanh GELU, scales its embedding by "
                                  "gemma_embedding_scale, has a local RoPE base if and only if it is Gemma 3's, and a "
                                  "query_pre_attn_scalar and soft caps only if it is Gemma 2's or 3's");
    config["hidden_activation"] = "gelu_pytorch_tanh";
    if (gemma1) {
      config["hidden_act"] = "gelu_pytorch_tanh";  // what transformers v5 reads (GemmaConfig has no scalar or caps)
    } else {
      config["query_pre_attn_scalar"] = spec.query_pre_attn_scalar;
      if (gemma3) config["rope_local_base_freq"] = float_to_json(spec.local_rope_theta);
      auto cap_json = [](float cap) { return cap != 0.0f ? float_to_json(cap) : json(nullptr); };
      config["attn_logit_softcapping"] = cap_json(spec.attention_softcap);
      config["final_logit_softcapping"] = cap_json(spec.final_logit_softcap);
    }
  } else if (spec.query_pre_attn_scalar != 0 || spec.local_rope_theta != 0.0f || spec.mlp_activation != GateActivation::silu ||
             spec.attention_softcap != 0.0f || spec.final_logit_softcap != 0.0f) {
    throw std::invalid_argument("to_hf_config_json: " + spec.arch_name +
                                " has no query_pre_attn_scalar, local RoPE base, GeGLU or soft caps (Gemma's models do)");
  } else {
    config["hidden_act"] = "silu";
  }
  const char* dtype_names[] = {"float32", "bfloat16", "float16"};
  config["torch_dtype"] = dtype_names[static_cast<int>(spec.dtype)];
  config["bos_token_id"] = spec.bos_token >= 0 ? json(spec.bos_token) : json(nullptr);
  if (spec.eos_tokens.empty()) {
    config["eos_token_id"] = nullptr;
  } else if (spec.eos_tokens.size() == 1) {
    config["eos_token_id"] = spec.eos_tokens[0];
  } else {
    config["eos_token_id"] = spec.eos_tokens;
  }
  if (spec.multimodal_checkpoint) {
    // A multimodal class's layout: the text model's keys under text_config, the token ids and the dtype at
    // the top (the vision tower's config is left out: nothing reads it).
    const bool gemma3 = spec.arch_name == "Gemma3ForConditionalGeneration" && spec.arch == Architecture::gemma3;
    const bool mistral3 = spec.arch_name == "Mistral3ForConditionalGeneration" &&
                          (spec.arch == Architecture::mistral || spec.arch == Architecture::llama);
    const bool llava = spec.arch_name == "LlavaForConditionalGeneration" &&
                       (spec.arch == Architecture::llama || spec.arch == Architecture::mistral || spec.arch == Architecture::qwen2);
    if ((!gemma3 && !mistral3 && !llava) || spec.final_logit_softcap != 0.0f)
      throw std::invalid_argument("to_hf_config_json: " + spec.arch_name + " over a " + arch.hf_name +
                                  " text model (or soft-capped logits) is not a multimodal checkpoint Tilefire reads");
    json top = {{"architectures", json::array({spec.arch_name})}, {"model_type", gemma3 ? "gemma3" : mistral3 ? "mistral3" : "llava"}};
    for (const char* key : {"bos_token_id", "eos_token_id", "torch_dtype"}) {
      top[key] = config.at(key);
      config.erase(key);
    }
    // The top-level tie transformers v5 reads: for Gemma 3 and Mistral3 (whose own default is true) the
    // text model's; where the checkpoint is to decide, a tie that 4.x (reading text_config's: false) does
    // not share.
    if (spec.lm_head_tie_from_checkpoint) {
      config["tie_word_embeddings"] = false;
      top["tie_word_embeddings"] = true;
    } else if (gemma3 || mistral3) {
      top["tie_word_embeddings"] = spec.tie_embeddings;
    }
    config.erase("architectures");
    top["text_config"] = std::move(config);
    return top.dump(2) + "\n";
  }
  return config.dump(2) + "\n";
}

}  // namespace tilefire
