#pragma once
// tilefire bench --sweep (samples/cli/sweep.cpp).
#include <string>

#include "tilefire/engine.h"

namespace tilefire::cli {

// Runs the grid named by `dimensions` ("policy,granularity,threads", any subset) around `base`; writes
// OUT_PREFIX.csv and OUT_PREFIX.md and prints the Markdown table.
int run_sweep(const EngineOptions& base, const std::string& dimensions, const std::string& out_prefix, uint32_t rounds,
              uint32_t steps);

}  // namespace tilefire::cli
