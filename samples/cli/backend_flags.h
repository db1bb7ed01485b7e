#pragma once
// The flags that choose and tune the backend, shared by `tilefire run` and `tilefire bench`.
#include <string>
#include <vector>

#include "args.h"
#include "tilefire/engine.h"

namespace tilefire::cli {

std::vector<std::string> backend_switches();  // --resident, --no-stage-weights
std::vector<std::string> backend_valued();    // --backend, --ctas, --watchdog-ms, --cuda-device
extern const char* const kBackendHelp;

// Reads the backend flags into `options`; flags of the other backend are an InputError.
void apply_backend_flags(const Args& args, EngineOptions& options);

}  // namespace tilefire::cli
