#pragma once
// The model shape the planning tools (plan, inspect, simulate) work on: a Hugging Face folder's
// config.json (no weights needed) or a preset. The JSON files they read: graph/json_file.h.
#include <cstdint>
#include <optional>
#include <string>

#include "graph/json_file.h"
#include "graph/model_spec.h"

namespace tilefire {

// `label` gets the folder or "preset NAME". `dtype`: a preset's weights (none: bf16), or a checkpoint's
// in place of config.json's torch_dtype, which is often wrong (none: as config.json says). Throws
// InputError for a folder without config.json.
ModelSpec spec_for_tool(const std::string& model_dir, const std::string& preset, std::optional<DType> dtype, std::string* label);

// Bytes for a message: "1.50 GiB", or in MiB or KiB below one of the next unit up (megakernel/plan.cpp).
std::string readable_bytes(uint64_t bytes);

}  // namespace tilefire
