// ModelSpec from a Hugging Face config.json (the way back to config.json text:
// graph/model_config_writer.cpp; the presets: graph/model_presets.cpp).
#include "graph/model_spec.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/config_reader.h"
#include "graph/json_file.h"
#include "graph/model_spec_detail.h"

namespace tilefire {

using nlohmann::json;
using namespace model_spec_detail;

double model_spec_detail::longrope_default_attention_factor(float factor, uint32_t original_max_position) {
  if (factor <= 1.0f) return 1.0;
  return std::sqrt(1.0 + std::log(double(factor)) / std::log(double(original_max_position)));
}

namespace {

constexpr ArchitectureName kArchitectures[] = {
    {"LlamaForCausalLM", "llama", Architecture::llama},
    {"MistralForCausalLM", "mistral", Architecture::mistral},
    {"Qwen2ForCausalLM", "qwen2", Architecture::qwen2},
    {"Qwen3ForCausalLM", "qwen3", Architecture::qwen3},
    {"Phi3ForCausalLM", "phi3", Architecture::phi3},
    {"SmolLM3ForCausalLM", "smollm3", Architecture::smollm3},
    {"GraniteForCausalLM", "granite", Architecture::granite},
    {"Gemma3ForCausalLM", "gemma3_text", Architecture::gemma3},
    {"Gemma2ForCausalLM", "gemma2", Architecture::gemma2},
    {"GemmaForCausalLM", "gemma", Architecture::gemma},
};

}  // namespace

const ArchitectureName& model_spec_detail::architecture_entry(Architecture arch) {
  for (const auto& entry : kArchitectures) {
    if (entry.arch == arch) return entry;
  }
  return kArchitectures[0];
}

namespace {

// LongRoPE (Phi-3 and Phi-3.5's long-context models; "su" is its older name), as transformers'
// _compute_longrope_parameters reads it: the pretrained context is original_max_position_embeddings (beside
// rope_scaling in the config, or in it, or 4096), the factor the context was
// stretched by is rope_scaling.factor or max_position_embeddings over it, and cos and sin are multiplied
// by attention_factor, given or sqrt(1 + ln(factor) / ln(original)) (1 for a factor of at most 1).
RopeScaling parse_longrope(const json& config, const json& node, const std::string& origin, const std::string& key) {
  ConfigReader reader(node, origin, key + "."), top(config, origin);
  RopeScaling scaling;
  scaling.longrope = true;
  scaling.short_factor = reader.positive_floats("short_factor");
  scaling.long_factor = reader.positive_floats("long_factor");
  const uint32_t max_position = top.positive_u32_or("max_position_embeddings", 4096);
  // transformers' Phi3Config gives the top-level key priority (standardize_rope_params), and defaults it to
  // 4096, Phi-3's pretrained context.
  scaling.original_max_position = top.has_non_null("original_max_position_embeddings")
                                      ? top.positive_u32("original_max_position_embeddings")
                                      : reader.positive_u32_or("original_max_position_embeddings", 4096);
  scaling.factor = reader.positive_float_or("factor", float(double(max_position) / double(scaling.original_max_position)));
  if (reader.has_non_null("attention_factor")) {
    scaling.attention_factor = reader.positive_float("attention_factor");
  } else {
    scaling.attention_factor = float(longrope_default_attention_factor(scaling.factor, scaling.original_max_position));
  }
  return scaling;
}

// `key`: "rope_scaling", or transformers v5's "rope_parameters" (the same keys beside rope_theta; no type
// there means the default).
RopeScaling parse_rope_scaling(const json& config, const std::string& origin, const std::string& key) {
  RopeScaling scaling;
  if (!config.contains(key) || config.at(key).is_null()) return scaling;
  const json& node = config.at(key);
  if (!node.is_object()) fail(origin, "key '" + key + "' must be null or an object");
  // Newer configs say "rope_type", older ones "type".
  const char* type_key = node.contains("rope_type") ? "rope_type" : "type";
  if (!node.contains(type_key)) {
    if (key.rfind("rope_parameters", 0) == 0) return scaling;  // v5's object (or Gemma 3's full-layer set in it)
    fail(origin, "key '" + key + "' has no 'rope_type' (or 'type')");
  }
  if (!node.at(type_key).is_string()) fail(origin, "key '" + key + "." + std::string(type_key) + "' must be a string");
  std::string type = node.at(type_key).get<std::string>();
  if (type == "default") return scaling;
  if (type == "longrope" || type == "su") return parse_longrope(config, node, origin, key);
  if (type == "linear") {
    scaling.linear = true;
    scaling.factor = ConfigReader(node, origin, key + ".").positive_float("factor");
    return scaling;
  }
  if (type != "llama3") {
    fail(origin, "key '" + key + "' has unsupported type '" + type + "' (supported: llama3, longrope, linear, default)");
  }
  ConfigReader reader(node, origin, key + ".");
  scaling.llama3 = true;
  scaling.factor = reader.positive_float("factor");
  scaling.low_freq_factor = reader.positive_float("low_freq_factor");
  scaling.high_freq_factor = reader.positive_float("high_freq_factor");
  scaling.original_max_position = reader.positive_u32("original_max_position_embeddings");
  return scaling;
}

void parse_token_ids(const ConfigReader& reader, ModelSpec& spec) {
  if (reader.has_non_null("bos_token_id")) spec.bos_token = reader.token_id("bos_token_id", reader.at("bos_token_id"));
  if (reader.has_non_null("eos_token_id")) {
    const json& eos = reader.at("eos_token_id");
    if (eos.is_array()) {
      for (const json& id : eos) spec.eos_tokens.push_back(reader.token_id("eos_token_id", id));
    } else {
      spec.eos_tokens.push_back(reader.token_id("eos_token_id", eos));
    }
  }
}

// The dtype the config claims; load_hf_model replaces it by the dtype the matrices are stored in.
DType parse_torch_dtype(const json& config, const std::string& origin) {
  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype".
  const char* key = config.contains("torch_dtype") ? "torch_dtype" : "dtype";
  if (!config.contains(key) || config.at(key).is_null()) return DType::f32;
  const json& value = config.at(key);
  if (!value.is_string()) fail(origin, "key '" + std::string(key) + "' must be a string such as \"bfloat16\"");
  std::string name = value.get<std::string>();
  if (name == "float32") return DType::f32;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16") return DType::f16;
  fail(origin, "key '" + std::string(key) + "' names unknown dtype '" + name +
                   "' (expected float32, bfloat16 or float16)");
}

}  // namespace

json model_spec_detail::float_to_json(float value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  double reread = std::strtod(text.c_str(), nullptr);
  if (static_cast<float>(reread) == value) return reread;
  return static_cast<double>(value);
}


uint64_t ModelSpec::parameter_count() const {
  const uint64_t h = hidden, q = uint64_t(heads) * head_dim, kv = uint64_t(kv_heads) * head_dim;
  uint64_t per_layer = 2 * h                        // input and post-attention norms
                       + h * q + 2 * h * kv + q * h  // q, k, v, o projections
                       + 3 * h * uint64_t(ffn);      // gate, up, down
  if (qkv_bias) per_layer += q + 2 * kv;
  if (qk_norm) per_layer += 2 * uint64_t(head_dim);
  if (sandwich_norms()) per_layer += 2 * h;  // Gemma's pre- and post-feedforward norms
  uint64_t total = uint64_t(vocab) * h + uint64_t(layers) * per_layer + h;
  if (!tie_embeddings) total += uint64_t(vocab) * h;
  return total;
}

float ModelSpec::attention_scale() const {
  if (query_pre_attn_scalar != 0) return float(1.0 / std::sqrt(double(query_pre_attn_scalar)));
  return attention_multiplier != 0.0f ? attention_multiplier : float(1.0 / std::sqrt(double(head_dim)));
}

float gemma_embedding_scale(uint32_t hidden, DType dtype) {
  const float root = float(std::sqrt(double(hidden)));
  if (dtype == DType::bf16) return bf16_to_f32(f32_to_bf16(root));
  if (dtype == DType::f16) return f16_to_f32(f32_to_f16(root));
  return root;
}

bool is_special_file(const std::filesystem::path& path) {
  std::error_code ignored;
  return std::filesystem::exists(path, ignored) && !std::filesystem::is_regular_file(path, ignored);
}

ModelSpec parse_hf_config(const std::filesystem::path& config_json) {
  const std::string origin = config_json.string();
  std::error_code ignored;
  if (std::filesystem::is_directory(config_json, ignored)) fail(origin, "is a folder, not a config.json file");
  if (is_special_file(config_json)) fail(origin, "not a regular file");
  std::ifstream in(config_json, std::ios::binary);
  if (!in) fail(origin, std::string("cannot open config.json (") + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(origin, std::string("cannot read config.json (") + std::strerror(errno) + ")");
  return parse_hf_config_text(text.str(), origin);
}

namespace {

ModelSpec spec_of_config(json config, const std::string& origin);

}  // namespace

ModelSpec parse_hf_config_text(const std::string& text, const std::string& origin) {
  json config = parse_json_text(text.data(), text.data() + text.size(), origin);
  if (!config.is_object()) fail(origin, "not a config.json: the top level must be a JSON object");
  if (std::optional<ModelSpec> multimodal = parse_multimodal_config(config, origin)) return *std::move(multimodal);
  return spec_of_config(std::move(config), origin);
}

ModelSpec model_spec_detail::spec_of_causal_config(json config, const std::string& origin) {
  return spec_of_config(std::move(config), origin);
}

void model_spec_detail::check_token_ids(const json& config, const std::string& origin) {
  ModelSpec ids;
  parse_token_ids(ConfigReader(config, origin), ids);
}

const ArchitectureName* model_spec_detail::architecture_of_model_type(const std::string& model_type) {
  for (const auto& entry : kArchitectures)
    if (model_type == entry.model_type) return &entry;
  return nullptr;
}

namespace {

// A causal model's config.json (or a multimodal one's text_config), read into its spec.
ModelSpec spec_of_config(json config, const std::string& origin) {
  ModelSpec spec;
  if (!config.contains("architectures")) fail(origin, "missing required key 'architectures'");
  const json& architectures = config.at("architectures");
  if (!architectures.is_array() || architectures.empty() || !architectures.at(0).is_string()) {
    fail(origin, "key 'architectures' must be a non-empty list of strings");
  }
  spec.arch_name = architectures.at(0).get<std::string>();
  bool known = false;
  std::string expected;
  for (const auto& entry : kArchitectures) {
    if (spec.arch_name == entry.hf_name) {
      spec.arch = entry.arch;
      known = true;
    }
    expected += expected.empty() ? entry.hf_name : std::string(", ") + entry.hf_name;
  }
  expected += ", " + multimodal_class_names();
  if (!known) fail(origin, "unknown architecture '" + spec.arch_name + "' (expected one of " + expected + ")");
  // A text_config is a multimodal class's (read above): under a causal class, Gemma3TextConfig's defaults
  // would stand in for the keys it holds.
  if (spec.arch == Architecture::gemma3 && config.contains("text_config"))
    fail(origin, "key 'text_config' is given, but architectures names " + spec.arch_name +
                     ": a Gemma 3 checkpoint with a text_config is Gemma3ForConditionalGeneration's");
  const char* rope_scaling_key = lift_rope_parameters(config, origin);  // once the class is known

  const bool qwen = is_qwen(spec.arch);
  ConfigReader reader(config, origin);
  const bool gemma3 = spec.arch == Architecture::gemma3, gemma = spec.is_gemma();
  // Gemma3TextConfig's defaults for these (Gemma 3 4B's text_config gives neither a vocabulary nor heads);
  // every other class's configs give them.
  auto size_key = [&](const char* key, uint32_t gemma3_default) {
    return gemma3 ? reader.positive_u32_or(key, gemma3_default) : reader.positive_u32(key);
  };
  spec.vocab = size_key("vocab_size", 262208);
  spec.hidden = size_key("hidden_size", 2304);
  spec.layers = size_key("num_hidden_layers", 26);
  spec.heads = size_key("num_attention_heads", 8);
  // The config classes' defaults: Gemma2Config's and Gemma3TextConfig's 4 KV heads (of 256), GemmaConfig's
  // 16, MistralConfig's 8, SmolLM3Config's 4, Qwen2Config's and Qwen3Config's 32; the rest's one per query
  // head. (A null one is one per query head, as those classes read None, Gemma's aside.)
  const bool kv_null = !gemma && reader.has("num_key_value_heads") && !reader.has_non_null("num_key_value_heads");
  const uint32_t default_kv_heads = kv_null                                      ? spec.heads
                                    : spec.arch == Architecture::gemma           ? 16
                                    : gemma || spec.arch == Architecture::smollm3 ? 4
                                    : spec.arch == Architecture::mistral       ? 8
                                    : qwen                                     ? 32
                                                                               : spec.heads;
  spec.kv_heads = reader.positive_u32_or("num_key_value_heads", default_kv_heads);
  if (!reader.has_non_null("num_key_value_heads") && spec.heads % spec.kv_heads != 0)
    fail(origin, "key 'num_key_value_heads' is absent, and " + spec.arch_name + "'s default of " + std::to_string(spec.kv_heads) +
                     " KV heads does not divide num_attention_heads (" + std::to_string(spec.heads) + ")");
  if ((gemma || spec.arch == Architecture::qwen3) && !reader.has_non_null("head_dim")) {
    spec.head_dim = gemma ? 256 : 128;  // Gemma's and Qwen3Config's defaults, not hidden / heads
  } else if (reader.has_non_null("head_dim")) {
    spec.head_dim = reader.positive_u32("head_dim");
  } else {
    if (spec.hidden % spec.heads != 0) {
      fail(origin, "key 'head_dim' is absent and hidden_size (" + std::to_string(spec.hidden) +
                       ") is not divisible by num_attention_heads (" + std::to_string(spec.heads) + ")");
    }
    spec.head_dim = spec.hidden / spec.heads;
  }
  spec.ffn = size_key("intermediate_size", 9216);
  // The config classes' defaults: Gemma3TextConfig's and MistralConfig's 131072, Gemma2Config's and GemmaConfig's 8192,
  // Qwen2Config's, Qwen3Config's and SmolLM3Config's 32768, LlamaConfig's and GraniteConfig's 2048,
  // Phi3Config's 4096.
  const Architecture arch = spec.arch;
  const uint32_t default_context = gemma3 || arch == Architecture::mistral                        ? 131072
                                   : gemma                                                          ? 8192
                                   : qwen || arch == Architecture::smollm3                         ? 32768
                                   : arch == Architecture::llama || arch == Architecture::granite ? 2048
                                                                                                    : 4096;
  spec.max_context = reader.positive_u32_or("max_position_embeddings", default_context);
  const bool smollm3 = spec.arch == Architecture::smollm3, granite = spec.arch == Architecture::granite;
  // Phi3Config's default is 1e-5; the other classes' (LlamaConfig's and MistralConfig's too) 1e-6.
  spec.rms_eps = reader.positive_float_or("rms_norm_eps", spec.arch == Architecture::phi3 ? 1e-5f : 1e-6f);
  // The config classes' default rope_theta: 1e4 (PretrainedConfig's, and Qwen2Config's and Qwen3Config's
  // in 4.x and v5 alike), SmolLM3Config's 2e6, Gemma3TextConfig's 1e6 (Gemma2Config's 1e4).
  const float default_theta = reader.has("rope_theta") ? 1e4f : gemma3 ? 1e6f : smollm3 ? 2e6f : 1e4f;
  spec.rope_theta = reader.positive_float_or("rope_theta", default_theta);
  spec.rope_scaling = parse_rope_scaling(config, origin, rope_scaling_key);
  spec.tie_embeddings = reader.bool_or("tie_word_embeddings", smollm3 || gemma);  // their config classes tie by default
  // Phi-3's qkv_proj never has a bias (transformers' Phi3Attention ignores attention_bias).
  spec.qkv_bias = spec.arch == Architecture::qwen2 || (spec.arch != Architecture::phi3 && reader.bool_or("attention_bias", false));
  spec.qk_norm = spec.arch == Architecture::qwen3 || gemma3;
  if (gemma && spec.arch != Architecture::gemma) {
    // Gemma2Config and Gemma3TextConfig: scores scaled by query_pre_attn_scalar^-1/2 (default 256) and
    // soft-capped by attn_logit_softcapping, the logits by final_logit_softcapping (null: no cap; Gemma 2's
    // defaults 50 and 30, Gemma 3's null). Gemma 3's sliding layers rotate at rope_local_base_freq (default
    // 1e4, unscaled). The bidirectional attention of Gemma 3's embedding variants is refused.
    spec.query_pre_attn_scalar = reader.positive_u32_or("query_pre_attn_scalar", 256);
    auto cap_or = [&](const char* key, float gemma2_default) {
      if (reader.has(key) && !reader.has_non_null(key)) return 0.0f;
      const float cap = reader.positive_float_or(key, gemma3 ? 0.0f : gemma2_default);
      if (reader.has(key) && cap == 0.0f) reader.bad(key, "a positive number");  // one too small for a float is not "no cap"
      return cap;
    };
    spec.attention_softcap = cap_or("attn_logit_softcapping", 50.0f);
    spec.final_logit_softcap = cap_or("final_logit_softcapping", 30.0f);
    if (gemma3) spec.local_rope_theta = reader.positive_float_or("rope_local_base_freq", 1e4f);
    if (gemma3 && (spec.rope_scaling.llama3 || spec.rope_scaling.longrope))
      fail(origin, "key '" + std::string(rope_scaling_key) + "' is not linear: Gemma 3's sliding layers rotate unscaled beside its full ones, "
                   "which Tilefire supports for linear scaling only");
  }
  // Gemma 1's scores are scaled by head_dim^-1/2, as Llama's (GemmaConfig has no query_pre_attn_scalar or
  // soft caps, and transformers ignores such keys there). v5's GemmaConfig has use_bidirectional_attention too.
  if (gemma && reader.bool_or("use_bidirectional_attention", false))
    fail(origin, "key 'use_bidirectional_attention' is true: Tilefire runs causal decoders only");
  if (reader.bool_or("mlp_bias", false)) fail(origin, "key 'mlp_bias' is true: Tilefire's MLP has no biases");
  // transformers rotates only this share of each head's dimensions, int(head_dim * factor) of them, where
  // the attention applies it: Phi-3's does (its rotary part first, the rest passed through); Llama's,
  // Mistral's and Qwen's rotate whole heads, so a share there is refused rather than run otherwise.
  if (reader.has_non_null("partial_rotary_factor")) {
    reader.positive_float_or("partial_rotary_factor", 1.0f);  // a positive number, or the message says so
    const double factor = config.at("partial_rotary_factor").get<double>();
    if (factor > 1.0) fail(origin, "key 'partial_rotary_factor' is " + config.at("partial_rotary_factor").dump() + ": a share of a head is at most 1");
    if (factor != 1.0) {
      if (spec.arch != Architecture::phi3)
        fail(origin, "key 'partial_rotary_factor' is not 1: " + spec.arch_name + " rotates whole heads (Phi3ForCausalLM rotates a share)");
      spec.rotary_dim = uint32_t(double(spec.head_dim) * factor);  // Python's int(): toward zero
      if (spec.rotary_dim == 0 || spec.rotary_dim % 2 != 0)
        fail(origin, "key 'partial_rotary_factor' " + config.at("partial_rotary_factor").dump() + " rotates " +
                         std::to_string(spec.rotary_dim) + " of head_dim " + std::to_string(spec.head_dim) +
                         " dimensions: RoPE rotates pairs, so it must be a positive even number");
    }
  }
  if (granite) {
    // GraniteConfig's multipliers, each 1.0 when absent (attention_multiplier too: a Granite config
    // without it scales scores by 1, not 1/sqrt(head_dim)). Other architectures' configs have no such
    // keys, and transformers ignores them there.
    spec.embedding_multiplier = reader.positive_float_or("embedding_multiplier", 1.0f);
    spec.residual_multiplier = reader.positive_float_or("residual_multiplier", 1.0f);
    spec.attention_multiplier = reader.positive_float_or("attention_multiplier", 1.0f);
    spec.logits_scaling = reader.positive_float_or("logits_scaling", 1.0f);
  }
  spec.dtype = parse_torch_dtype(config, origin);
  if (gemma) spec.embedding_multiplier = gemma_embedding_scale(spec.hidden, spec.dtype);
  parse_token_ids(reader, spec);
  // The MLP's activation: these architectures' SwiGLU, silu (or its other name, swish); Gemma's GeGLU,
  // its `hidden_activation` (and Gemma 1's `hidden_act` too, below). Another one would run as one of
  // these and give wrong logits, so it is refused.
  if (gemma) {
    spec.mlp_activation = GateActivation::gelu_tanh;
    if (reader.has_non_null("hidden_activation")) {
      const json& act = config.at("hidden_activation");
      if (!act.is_string() || act.get<std::string>() != "gelu_pytorch_tanh")
        fail(origin, "key 'hidden_activation' is " + act.dump() + ": Gemma's MLP supports gelu_pytorch_tanh (GeGLU) only");
    }
    if (spec.arch == Architecture::gemma && reader.has_non_null("hidden_act")) {
      // Gemma 1's first configs say "gelu" (exact), which transformers 4.38 ran; 4.39 to 4.47 and vLLM
      // read hidden_activation (absent: the tanh GELU the model was trained with), and later releases
      // hidden_act again. Tilefire runs the tanh GELU, with hidden_act "gelu" too; another activation,
      // which those later releases would run, is refused (whatever hidden_activation says).
      const json& act = config.at("hidden_act");
      if (!act.is_string() || (act.get<std::string>() != "gelu" && act.get<std::string>() != "gelu_pytorch_tanh"))
        fail(origin, "key 'hidden_act' is " + act.dump() + ": Gemma's MLP supports gelu_pytorch_tanh (GeGLU) only");
    }
  } else if (reader.has_non_null("hidden_act")) {
    const json& act = config.at("hidden_act");
    if (!act.is_string()) fail(origin, "key 'hidden_act' must be a string");
    const std::string name = act.get<std::string>();
    if (name != "silu" && name != "swish")
      fail(origin, "key 'hidden_act' is '" + name + "': the MLP supports silu (SwiGLU) only");
  }

  validate_spec(spec, origin);  // first: the per-layer lists are sized by a checked layer count
  parse_nope_layers(reader, config, origin, spec);
  parse_sliding_window(reader, config, origin, spec);
  validate_spec(spec, origin);
  return spec;
}

}  // namespace

void validate_spec(const ModelSpec& spec, const std::string& origin) {
  auto require_positive = [&](uint64_t value, const char* key) {
    if (value == 0) fail(origin, std::string("key '") + key + "' must be a positive integer (got 0)");
  };
  require_positive(spec.vocab, "vocab_size");
  require_positive(spec.hidden, "hidden_size");
  require_positive(spec.layers, "num_hidden_layers");
  require_positive(spec.heads, "num_attention_heads");
  require_positive(spec.kv_heads, "num_key_value_heads");
  require_positive(spec.head_dim, "head_dim");
  require_positive(spec.ffn, "intermediate_size");
  require_positive(spec.max_context, "max_position_embeddings");
  // Upper bounds far past any published model (Llama 3.1 405B: 126 layers, hidden 16384, FFN 53248; the
  // largest vocabularies near 262k; heads of at most 256 dimensions). A size past them is a damaged or
  // mistyped config.json, and would otherwise make the compiler and the loader work (and allocate) per
  // layer or per row for minutes before a tensor check could say so. They also keep every dimension's
  // tile and offset arithmetic within 32 bits (heads * head_dim at most 2^20).
  auto require_at_most = [&](uint64_t value, uint64_t most, const char* key) {
    if (value > most)
      fail(origin, std::string("key '") + key + "' is " + std::to_string(value) + ", more than the " + std::to_string(most) +
                       " Tilefire accepts (far past any published model: is config.json damaged?)");
  };
  require_at_most(spec.vocab, 1u << 22, "vocab_size");
  require_at_most(spec.hidden, 1u << 16, "hidden_size");
  require_at_most(spec.layers, 1024, "num_hidden_layers");
  require_at_most(spec.heads, 1024, "num_attention_heads");
  require_at_most(spec.head_dim, 1024, "head_dim");
  require_at_most(spec.ffn, 1u << 20, "intermediate_size");
  if (!spec.nope_layers.empty() && spec.nope_layers.size() != spec.layers)
    fail(origin, "the NoPE layer list has " + std::to_string(spec.nope_layers.size()) + " entries for " + std::to_string(spec.layers) +
                     " layers");
  if (spec.sliding_window != 0 && spec.sliding_layers.size() != spec.layers)
    fail(origin, "the sliding window's layer list has " + std::to_string(spec.sliding_layers.size()) + " entries for " +
                     std::to_string(spec.layers) + " layers");
  if (spec.heads % spec.kv_heads != 0) {
    fail(origin, "key 'num_key_value_heads' (" + std::to_string(spec.kv_heads) +
                     ") must divide num_attention_heads (" + std::to_string(spec.heads) + ")");
  }
  if (spec.head_dim % 2 != 0) {
    fail(origin, "key 'head_dim' must be even for rotary embeddings (got " + std::to_string(spec.head_dim) + ")");
  }
  if (spec.rotary_dim % 2 != 0 || spec.rotary_dim > spec.head_dim)
    fail(origin, "key 'partial_rotary_factor' gives " + std::to_string(spec.rotary_dim) + " rotated dimensions of head_dim " +
                     std::to_string(spec.head_dim) + ": an even number, at most head_dim");
  if (!(spec.rms_eps > 0.0f) || !std::isfinite(spec.rms_eps)) {
    fail(origin, "key 'rms_norm_eps' must be a positive number");
  }
  if (!(spec.rope_theta > 0.0f) || !std::isfinite(spec.rope_theta)) {
    fail(origin, "key 'rope_theta' must be a positive number");
  }
  for (const auto& [value, key] : {std::pair{spec.embedding_multiplier, "embedding_multiplier"}, std::pair{spec.residual_multiplier, "residual_multiplier"},
                                   std::pair{spec.logits_scaling, "logits_scaling"}})
    if (!(value > 0.0f) || !std::isfinite(value)) fail(origin, "key '" + std::string(key) + "' must be a positive number");
  if (!(spec.attention_multiplier >= 0.0f) || !std::isfinite(spec.attention_multiplier))
    fail(origin, "key 'attention_multiplier' must be a positive number");
  if (!(spec.local_rope_theta >= 0.0f) || !std::isfinite(spec.local_rope_theta))
    fail(origin, "key 'rope_local_base_freq' must be a positive number");
  for (const auto& [cap, key] : {std::pair{spec.attention_softcap, "attn_logit_softcapping"}, std::pair{spec.final_logit_softcap, "final_logit_softcapping"}})
    if (!(cap >= 0.0f) || !std::isfinite(cap)) fail(origin, "key '" + std::string(key) + "' must be null or a positive number");
  if (spec.rope_scaling.linear && (!(spec.rope_scaling.factor > 0.0f) || !std::isfinite(spec.rope_scaling.factor)))
    fail(origin, "key 'rope_scaling.factor' must be a positive number");
  const RopeScaling& scaling = spec.rope_scaling;
  if (scaling.llama3) {
    if (!(scaling.factor > 0.0f)) fail(origin, "key 'rope_scaling.factor' must be a positive number");
    if (!(scaling.low_freq_factor > 0.0f)) fail(origin, "key 'rope_scaling.low_freq_factor' must be positive");
    // The llama3 rule interpolates between the two wavelengths, dividing by (high - low).
    if (!(scaling.high_freq_factor > scaling.low_freq_factor)) {
      fail(origin, "key 'rope_scaling.high_freq_factor' must be greater than rope_scaling.low_freq_factor");
    }
    require_positive(scaling.original_max_position, "rope_scaling.original_max_position_embeddings");
  }
  if (scaling.longrope) {
    // transformers checks the same: one factor per rotated pair of a head's dimensions.
    for (const auto& [factors, key] : {std::pair{&scaling.short_factor, "short_factor"}, std::pair{&scaling.long_factor, "long_factor"}}) {
      if (factors->size() != spec.rotated_dims() / 2)
        fail(origin, "key 'rope_scaling." + std::string(key) + "' has " + std::to_string(factors->size()) +
                         " factors; LongRoPE needs one per pair of a head's " +
                         (spec.rotary_dim ? "rotated dimensions, the rotary dimensions / 2 = " : "dimensions, head_dim / 2 = ") +
                         std::to_string(spec.rotated_dims() / 2));
      for (float factor : *factors)
        if (!(factor > 0.0f) || !std::isfinite(factor)) fail(origin, "key 'rope_scaling." + std::string(key) + "' must hold positive numbers");
    }
    if (!(scaling.attention_factor > 0.0f) || !std::isfinite(scaling.attention_factor))
      fail(origin, "key 'rope_scaling.attention_factor' must be a positive number");
    require_positive(scaling.original_max_position, "original_max_position_embeddings");
  }
  if (spec.bos_token >= 0 && uint32_t(spec.bos_token) >= spec.vocab) {
    fail(origin, "key 'bos_token_id' (" + std::to_string(spec.bos_token) + ") is not below vocab_size (" +
                     std::to_string(spec.vocab) + ")");
  }
  for (int32_t eos : spec.eos_tokens) {
    if (eos < 0 || uint32_t(eos) >= spec.vocab) {
      fail(origin, "key 'eos_token_id' (" + std::to_string(eos) + ") is not below vocab_size (" +
                       std::to_string(spec.vocab) + ")");
    }
  }
  // Each size within its bound can still add up to a model no machine holds (1024 layers of hidden 65536
  // and FFN 2^20), whose program alone the compiler would build for minutes until the OS killed it.
  // Llama 3.1 405B, the largest published dense model, has 4.1e11 parameters. Checked last, so that a
  // mistyped size that breaks a rule above is named by that rule.
  constexpr uint64_t kMostParameters = 1'000'000'000'000ull;
  if (const uint64_t parameters = spec.parameter_count(); parameters > kMostParameters)
    fail(origin, "its sizes (hidden_size, intermediate_size, num_hidden_layers, vocab_size, the heads) add up to " +
                     std::to_string(parameters) + " parameters, more than the 10^12 Tilefire accepts (far past any " +
                     "published dense model: is config.json damaged?)");
}

}  // namespace tilefire
