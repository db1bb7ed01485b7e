#pragma once
// tilefire bench --batch (samples/cli/bench_batch.cpp).
#include <cstdint>
#include <string>

#include "tilefire/engine.h"

namespace tilefire::cli {

// Decode throughput of `batch` sequences per step (Engine::generate_batch) against one, in interleaved
// rounds on one engine: prints a table (or, with `json`, one object) of the step time, tokens/s over all
// sequences and the throughput gain. `options` is the engine's, sequences set here. With `predict` (cpu
// backend, one rank), also the simulator's prediction of each round's batched step. With `trace_path`, an
// untimed batch after the rounds writes the timeline of one of its decode steps of `batch` sequences there.
int run_batch_bench(EngineOptions options, uint32_t batch, uint32_t rounds, uint32_t steps, uint32_t prompt_len, bool predict,
                    bool json, const std::string& trace_path);

// What a long prompt joining costs the sequences decoding (continuous batching): batch - 1 sequences
// decode while a request with a `join_len`-token prompt joins, on an engine that prefills it whole at
// add_sequence and on two that prefill `chunks` chunks per step (EngineOptions::prefill_chunks_per_step),
// one running each chunk as a program of its own after the decode step, one the first in the decode
// step's program (EngineOptions::prefill_in_decode_step). Prints, per engine, the longest wait of a
// decoding sequence for its next token and the newcomer's time to first token (medians over rounds in
// rotating order); with `json`, one object.
int run_join_bench(EngineOptions options, uint32_t batch, uint32_t rounds, uint32_t join_len, uint32_t chunks, bool json);

// What sharing a prompt's beginning buys (a system prompt, several choices of one prompt): `batch`
// requests whose prompts are one `prefix_len`-token prefix and 8 tokens of their own each, one token each,
// in one generate_batch call, with GenerateRequest::reuse_prefix (the later ones copy the prefix from the
// first's slot of the KV cache) against without (each prefills its whole prompt), in interleaved rounds
// on one engine (each round a prefix of its own, so no free slot holds one from before). Prints the
// time to every first token, the prompt tokens prefilled and whether the first tokens agree; with `json`,
// one object.
int run_shared_prefix_bench(EngineOptions options, uint32_t batch, uint32_t rounds, uint32_t prefix_len, bool json);

}  // namespace tilefire::cli
