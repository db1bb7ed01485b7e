#pragma once
// The flags that choose and tune the backend, shared by the commands that run a model, and the engine's
// other flags that `run` and `serve` share.
#include <string>
#include <vector>

#include "args.h"
#include "tilefire/engine.h"

namespace tilefire::cli {

std::vector<std::string> backend_switches();  // --resident, --no-stage-weights
std::vector<std::string> backend_valued();    // --backend, --ctas, --watchdog-ms, --cuda-device
extern const char* const kBackendHelp;
// The placement policies --policy takes, each with its description, from the registry (a policy added
// in scheduler/policies/ is listed without more): the end of the --help of every command that takes it.
std::string policy_help();

// Reads the backend flags into `options`; flags of the other backend are an InputError.
void apply_backend_flags(const Args& args, EngineOptions& options);

// The engine's flags that `tilefire run` and `tilefire serve` share: --model, --threads, --tp,
// --tp-timeout-ms, --schedule, --policy, --granularity, --max-context, --kv-splits; and the options they
// and the backend flags give.
// --tp-timeout-ms with one rank (options.tp set already) would be ignored: refused, saying so.
void refuse_tp_timeout_alone(const Args& args, const EngineOptions& options);
std::vector<std::string> engine_valued();
EngineOptions engine_options_of_flags(const Args& args);

}  // namespace tilefire::cli
