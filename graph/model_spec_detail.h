#pragma once
// What the config parser (graph/model_spec.cpp, graph/model_spec_attention.cpp,
// graph/model_spec_multimodal.cpp) and the config writer (graph/model_config_writer.cpp) share: the
// architectures' names and the helpers both sides of a round trip must agree on.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "graph/model_spec.h"

namespace tilefire::model_spec_detail {

struct ArchitectureName {
  const char* hf_name;     // config.json's architectures[0]
  const char* model_type;  // config.json's model_type
  Architecture arch;
};

const ArchitectureName& architecture_entry(Architecture arch);
inline bool is_qwen(Architecture arch) { return arch == Architecture::qwen2 || arch == Architecture::qwen3; }

// LongRoPE's attention_factor when the config gives none (transformers' _compute_longrope_parameters).
double longrope_default_attention_factor(float factor, uint32_t original_max_position);

// Shortest decimal text that reads back (as a double, then rounded to float) to exactly `value`, so
// configs say 1e-05 rather than 9.99999974737875e-06.
nlohmann::json float_to_json(float value);

// What the multimodal classes' reading (graph/model_spec_multimodal.cpp) and the causal one share.
// A causal model's config.json (or a multimodal one's text_config) read into its spec.
ModelSpec spec_of_causal_config(nlohmann::json config, const std::string& origin);
// The top level's bos_token_id and eos_token_id, checked (the messages name the top level).
void check_token_ids(const nlohmann::json& config, const std::string& origin);
// The causal class of a config's model_type ("llama": LlamaForCausalLM), or nullptr.
const ArchitectureName* architecture_of_model_type(const std::string& model_type);
// The text model of a multimodal class's config.json, or nullopt when architectures names none.
std::optional<ModelSpec> parse_multimodal_config(const nlohmann::json& config, const std::string& origin);
// The multimodal classes' names, ", "-joined (for the message that lists the known classes).
std::string multimodal_class_names();

// graph/model_spec_attention.cpp: how the layers attend, read into `spec` (its arch and layers set).
class ConfigReader;
void parse_nope_layers(const ConfigReader& reader, const nlohmann::json& config, const std::string& origin, ModelSpec& spec);
void parse_sliding_window(const ConfigReader& reader, const nlohmann::json& config, const std::string& origin, ModelSpec& spec);
// transformers v5's `rope_parameters`, lifted into the keys transformers 4 reads; returns the key the
// scaling is read from ("rope_scaling" when there are none).
const char* lift_rope_parameters(nlohmann::json& config, const std::string& origin);

}  // namespace tilefire::model_spec_detail
