// How a config.json's layers attend: SmolLM3's NoPE layers, each architecture's sliding windows, and RoPE's
// parameters as transformers v5 writes them (graph/model_spec.cpp reads the rest of the config).
#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/config_reader.h"
#include "graph/model_spec_detail.h"

namespace tilefire::model_spec_detail {

using nlohmann::json;

// SmolLM3's NoPE layers, as SmolLM3Config reads them: `no_rope_layers` holds one entry per layer (at
// least), 1 where the layer applies RoPE and 0 where it does not (the name says the opposite of its
// values); without it, every `no_rope_layer_interval`-th layer (default 4: layers 3, 7, 11, ...) is NoPE.
// Other architectures rotate every layer (the keys are not theirs, and transformers ignores them there).
void parse_nope_layers(const ConfigReader& reader, const json& config, const std::string& origin, ModelSpec& spec) {
  spec.nope_layers.clear();
  if (spec.arch != Architecture::smollm3) return;
  if (reader.has_non_null("no_rope_layers")) {
    const json& list = config.at("no_rope_layers");
    if (!list.is_array() || list.size() < spec.layers)
      fail(origin, "key 'no_rope_layers' must be a list of at least num_hidden_layers (" + std::to_string(spec.layers) +
                       ") entries, 1 for a layer with RoPE and 0 for one without");
    for (uint32_t l = 0; l < spec.layers; ++l) {
      const json& entry = list[l];
      if (!entry.is_number_integer() || (entry.get<int64_t>() != 0 && entry.get<int64_t>() != 1))
        fail(origin, "key 'no_rope_layers' entry " + std::to_string(l) + " is " + entry.dump() + ": 1 (RoPE) or 0 (none)");
      spec.nope_layers.push_back(entry.get<int64_t>() == 0);
    }
  } else {
    const uint32_t interval = reader.positive_u32_or("no_rope_layer_interval", 4);
    for (uint32_t l = 0; l < spec.layers; ++l) spec.nope_layers.push_back((l + 1) % interval == 0);
  }
}

// Sliding-window attention, as transformers reads each architecture's config:
// - MistralForCausalLM: `sliding_window` on every layer (MistralConfig's default 4096 when the key is
//   absent; null turns it off);
// - Phi3ForCausalLM: `sliding_window` on every layer (absent or null: none);
// - Qwen2/Qwen3: only with `use_sliding_window` true, on the layers `layer_types` names
//   "sliding_attention", or without that list on layers max_window_layers (default 28) and up;
//   `sliding_window` defaults to 4096;
// - SmolLM3: as Qwen, but without layer_types on its NoPE layers, and no window unless `sliding_window`
//   gives one;
// - Gemma3ForCausalLM: `sliding_window` (default 4096) on the layers `layer_types` names, or without it
//   on all but every sliding_window_pattern-th (default 6: layers 5, 11, 17, ... attend to all; the
//   270m's `_sliding_window_pattern` is not a key transformers reads, so neither do we);
// - Gemma2ForCausalLM: `sliding_window` (default 4096) on the layers `layer_types` names, or without it
//   on the even ones (layers 0, 2, 4, ... slide);
// - LlamaForCausalLM, GraniteForCausalLM, GemmaForCausalLM: none (their configs have no window;
//   transformers ignores the key, and so do we).
// A window no shorter than the context changes nothing; the engine still runs with it.
void parse_sliding_window(const ConfigReader& reader, const json& config, const std::string& origin, ModelSpec& spec) {
  spec.sliding_window = 0;
  spec.sliding_layers.clear();
  // No window in their configs (transformers ignores the key there, and so do we).
  if (spec.arch == Architecture::llama || spec.arch == Architecture::granite || spec.arch == Architecture::gemma) return;
  const bool smollm3 = spec.arch == Architecture::smollm3;
  // layer_types, read whether the window is on or not (transformers checks it)
  auto read_layer_types = [&] {
    std::vector<bool> typed;
    if (!reader.has_non_null("layer_types")) return typed;
    const json& types = config.at("layer_types");
    if (!types.is_array() || types.size() != spec.layers)
      fail(origin, "key 'layer_types' must be a list of num_hidden_layers (" + std::to_string(spec.layers) + ") strings");
    for (size_t l = 0; l < types.size(); ++l) {
      const std::string type = types[l].is_string() ? types[l].get<std::string>() : types[l].dump();
      if (type != "sliding_attention" && type != "full_attention")
        fail(origin, "key 'layer_types' entry " + std::to_string(l) + " is '" + type +
                         "': the layers supported are \"sliding_attention\" and \"full_attention\"");
      typed.push_back(type == "sliding_attention");
    }
    return typed;
  };
  const bool null_window = reader.has("sliding_window") && !reader.has_non_null("sliding_window");
  if (spec.is_gemma()) {
    std::vector<bool> typed = read_layer_types();
    if (typed.empty() && spec.arch == Architecture::gemma2) {  // Gemma2Config's rule: even layers slide
      for (uint32_t l = 0; l < spec.layers; ++l) typed.push_back(l % 2 == 0);
    } else if (typed.empty()) {  // Gemma3TextConfig's rule (the 270m's config also has layer_types, which win)
      const uint32_t pattern = reader.positive_u32_or("sliding_window_pattern", 6);
      for (uint32_t l = 0; l < spec.layers; ++l) typed.push_back((l + 1) % pattern != 0);
    }
    if (null_window) {
      if (std::find(typed.begin(), typed.end(), true) != typed.end())
        fail(origin, "key 'sliding_window' is null, but the model has sliding_attention layers (layer_types or sliding_window_pattern)");
      return;
    }
    spec.sliding_window = reader.positive_u32_or("sliding_window", 4096);
    spec.sliding_layers = typed;
  } else if (is_qwen(spec.arch) || smollm3) {
    std::vector<bool> typed = read_layer_types();
    // Qwen's sliding_window defaults to 4096, SmolLM3's to none.
    const bool window_given = smollm3 ? reader.has_non_null("sliding_window") : !null_window;
    const bool window_on = reader.bool_or("use_sliding_window", false) && window_given;
    // transformers then has sliding layers and no window, and refuses to build their mask.
    if (!window_on && std::find(typed.begin(), typed.end(), true) != typed.end())
      fail(origin, "key 'layer_types' names sliding_attention layers, but the window is off (use_sliding_window false or "
                   "sliding_window null)");
    if (!window_on) return;
    spec.sliding_window = reader.positive_u32_or("sliding_window", 4096);
    if (!typed.empty()) {
      spec.sliding_layers = typed;
    } else if (smollm3) {
      spec.sliding_layers = spec.nope_layers;  // SmolLM3Config slides its NoPE layers
    } else {
      uint32_t first_sliding = 28;  // Qwen2Config's default
      if (reader.has_non_null("max_window_layers")) {
        const json& value = config.at("max_window_layers");
        if (!value.is_number_integer() || value.get<int64_t>() < 0) reader.bad("max_window_layers", "a non-negative integer");
        first_sliding = uint32_t(std::min<int64_t>(value.get<int64_t>(), spec.layers));
      }
      for (uint32_t l = 0; l < spec.layers; ++l) spec.sliding_layers.push_back(l >= first_sliding);
    }
  } else {
    const bool mistral = spec.arch == Architecture::mistral;
    if (!reader.has_non_null("sliding_window") && !(mistral && !reader.has("sliding_window"))) return;
    spec.sliding_window = reader.positive_u32_or("sliding_window", 4096);
    spec.sliding_layers.assign(spec.layers, true);
  }
  if (std::find(spec.sliding_layers.begin(), spec.sliding_layers.end(), true) == spec.sliding_layers.end()) {
    spec.sliding_window = 0;  // no layer slides
    spec.sliding_layers.clear();
  }
}

// transformers v5 writes Gemma 3's RoPE per layer type: `rope_parameters` holds "full_attention" (the full
// layers' base and scaling) and "sliding_attention" (the sliding layers' base, unscaled), as
// Gemma3TextConfig's convert_rope_params_to_dict builds them from rope_theta, rope_scaling and
// rope_local_base_freq. The sliding set is read as rope_local_base_freq (a top-level one that disagrees is
// refused); the full set is stored as the key "rope_parameters.full_attention", which the caller reads as
// one set (so that messages name where a key is). Other classes' per-layer sets are refused.
static const char* lift_rope_parameters_per_layer_type(json& config, const std::string& origin) {
  const json& parameters = config.at("rope_parameters");
  if (config.at("architectures").at(0) != "Gemma3ForCausalLM")  // checked to be a known class before
    fail(origin, "key 'rope_parameters' gives parameters per layer type: supported for Gemma 3 only (one set for every layer is)");
  for (const auto& [layer_type, set] : parameters.items()) {
    if (layer_type != "full_attention" && layer_type != "sliding_attention")
      fail(origin, "key 'rope_parameters' gives parameters per layer type, and '" + layer_type +
                       "' is not one (Gemma 3's are full_attention and sliding_attention)");
    if (!set.is_null() && !set.is_object()) fail(origin, "key 'rope_parameters." + layer_type + "' must be null or an object");
  }
  if (parameters.contains("sliding_attention") && !parameters.at("sliding_attention").is_null()) {
    const json& sliding = parameters.at("sliding_attention");
    auto refuse = [&](const std::string& key, const json& value) {
      fail(origin, "key 'rope_parameters.sliding_attention." + key + "' is " + value.dump().substr(0, 80) +
                       ": Gemma 3's sliding layers rotate unscaled (a rope_theta and the \"default\" type only)");
    };
    for (const char* type_key : {"rope_type", "type"})  // the type first: a scaling's own keys follow from it
      if (sliding.contains(type_key) && sliding.at(type_key) != "default") refuse(type_key, sliding.at(type_key));
    for (const auto& [key, value] : sliding.items())
      if (key != "rope_theta" && key != "rope_type" && key != "type") refuse(key, value);
    if (sliding.contains("rope_theta") && !sliding.at("rope_theta").is_null()) {
      const json& theta = sliding.at("rope_theta");
      if (config.contains("rope_local_base_freq") && !config.at("rope_local_base_freq").is_null() &&
          config.at("rope_local_base_freq") != theta)
        fail(origin, "key 'rope_local_base_freq' is " + config.at("rope_local_base_freq").dump() +
                         " but 'rope_parameters.sliding_attention.rope_theta' is " + theta.dump());
      config["rope_local_base_freq"] = theta;
    }
  }
  const char* full_key = "rope_parameters.full_attention";
  const bool full_given = parameters.contains("full_attention") && !parameters.at("full_attention").is_null();
  config[full_key] = full_given ? parameters.at("full_attention") : json::object();  // none: the default rotation
  return full_key;
}

// transformers v5 writes RoPE as one object, `rope_parameters`: rope_theta, the scaling's type and keys
// (as rope_scaling had them) and partial_rotary_factor. Read without it, such a config would silently
// rotate at the default base. Its rope_theta and partial_rotary_factor are read as the top-level keys
// (a top-level one that disagrees is refused); the scaling from it (refused beside a rope_scaling too).
// Returns the key the scaling is read from.
const char* lift_rope_parameters(json& config, const std::string& origin) {
  if (!config.contains("rope_parameters") || config.at("rope_parameters").is_null()) return "rope_scaling";
  if (!config.at("rope_parameters").is_object()) fail(origin, "key 'rope_parameters' must be null or an object");
  const json& given = config.at("rope_parameters");
  const bool per_layer_type = given.contains("full_attention") || given.contains("sliding_attention");
  // Gemma 3's rotations are per layer type: v5 reads those sets alone (adding default ones beside a flat
  // object), and 4.x ignores rope_parameters. A flat object there would be read as neither reads it.
  if (!per_layer_type && config.at("architectures").at(0) == "Gemma3ForCausalLM")
    fail(origin, "key 'rope_parameters' must give Gemma 3's rotations per layer type ({\"full_attention\": {...}, "
                 "\"sliding_attention\": {...}}, as transformers v5 writes them)");
  const char* key = per_layer_type ? lift_rope_parameters_per_layer_type(config, origin) : "rope_parameters";
  if (config.contains("rope_scaling") && !config.at("rope_scaling").is_null())
    fail(origin, "keys 'rope_scaling' and 'rope_parameters' are both given: the scaling would be ambiguous");
  const json parameters = config.at(key);  // a copy: config gains keys below
  for (const char* lifted : {"rope_theta", "partial_rotary_factor"}) {
    if (!parameters.contains(lifted) || parameters.at(lifted).is_null()) continue;
    if (config.contains(lifted) && !config.at(lifted).is_null() && config.at(lifted) != parameters.at(lifted))
      fail(origin, std::string("key '") + lifted + "' is " + config.at(lifted).dump() + " but '" + key + "." + lifted + "' is " +
                       parameters.at(lifted).dump());
    config[lifted] = parameters.at(lifted);
  }
  return key;
}

}  // namespace tilefire::model_spec_detail
