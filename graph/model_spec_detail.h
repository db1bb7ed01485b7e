#pragma once
// What the config parser (graph/model_spec.cpp) and the config writer (graph/model_config_writer.cpp)
// share: the architectures' names and the helpers both sides of a round trip must agree on.
#include <cstdint>

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

}  // namespace tilefire::model_spec_detail
