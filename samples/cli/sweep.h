#pragma once
// tilefire bench --sweep (samples/cli/sweep.cpp).
#include <string>
#include <vector>

#include "tilefire/engine.h"

namespace tilefire::cli {

// Runs the grid named by `dimensions` ("policy,granularity,threads", any subset) around `base`; writes
// OUT_PREFIX.csv and OUT_PREFIX.md and prints the Markdown table. `flags_given`: the command's flags
// that were given, so a swept setting also fixed by its flag (--policy with --sweep policy) is refused.
int run_sweep(const EngineOptions& base, const std::string& dimensions, const std::string& out_prefix, uint32_t rounds,
              uint32_t steps, const std::vector<std::string>& flags_given);

}  // namespace tilefire::cli
