#pragma once
// The model shape the planning tools (plan, inspect, simulate) work on: a Hugging Face folder's
// config.json (no weights needed) or a preset; and the JSON files they read.
#include <string>

#include <nlohmann/json.hpp>

#include "graph/model_spec.h"

namespace tilefire {

// `label` gets the folder or "preset NAME". Throws InputError for a folder without config.json.
ModelSpec spec_for_tool(const std::string& model_dir, const std::string& preset, DType dtype, std::string* label);

// The JSON document in `path`, given by `flag` (for the messages): InputError when the file cannot be
// opened or is not valid JSON.
nlohmann::json read_json_file(const std::string& path, const std::string& flag);

}  // namespace tilefire
