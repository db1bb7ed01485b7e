#pragma once
// tilefire bench --batch (samples/cli/bench_batch.cpp).
#include <cstdint>

#include "tilefire/engine.h"

namespace tilefire::cli {

// Decode throughput of `batch` sequences per step (Engine::generate_batch) against one, in interleaved
// rounds on one engine: prints a table (or, with `json`, one object) of the step time, tokens/s over all
// sequences and the throughput gain. `options` is the engine's (one rank), sequences set here.
int run_batch_bench(EngineOptions options, uint32_t batch, uint32_t rounds, uint32_t steps, uint32_t prompt_len, bool json);

}  // namespace tilefire::cli
