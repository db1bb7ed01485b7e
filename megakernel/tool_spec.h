#pragma once
// The model shape the planning tools (plan, inspect, simulate) work on: a Hugging Face folder's
// config.json (no weights needed; when the folder holds them, their dtype wins over config.json's and
// they are checked against it as the engine checks them) or a preset. The JSON files they read: graph/json_file.h.
#include <string>

#include "graph/json_file.h"
#include "graph/model_spec.h"

namespace tilefire {

// `label` gets the folder or "preset NAME". Throws InputError for a folder without config.json.
ModelSpec spec_for_tool(const std::string& model_dir, const std::string& preset, DType dtype, std::string* label);

}  // namespace tilefire
