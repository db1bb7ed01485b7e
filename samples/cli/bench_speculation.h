#pragma once
// tilefire bench --speculate (samples/cli/bench_speculation.cpp).
#include <cstdint>
#include <vector>

#include "tilefire/engine.h"

namespace tilefire::cli {

// What speculative decoding by prompt lookup buys on this machine and this prompt: greedy replies of
// `steps` + 1 tokens to `prompt`, with and without drafts, in interleaved rounds on one
// engine. Prints (or, with `json`, one object) the decode tokens/s of each, their ratio (the median of the
// per-round ratios), the share of drafted tokens taken and the tokens per step, what a check step costs in
// decode steps (the break-even: a check pays when it gives more tokens than that), and whether the two replies
// were the same token for token (a check step's logits are a prefill chunk's, which round apart from a
// decode step's: a near tie may go the other way; it is reported, never hidden).
// `speculation` drafts by prompt lookup, or by the draft model `options.draft` names.
int run_speculation_bench(const EngineOptions& options, const Speculation& speculation, uint32_t rounds, uint32_t steps,
                          const std::vector<int32_t>& prompt, bool json);

// The same in a batch (bench --batch B --speculate K): `batch` greedy requests of `prompt` decoded together
// (generate_batch), plainly and with drafts by prompt lookup checked in the batched steps, in interleaved
// rounds: decode tokens/s over all the sequences (their tokens after the first over the batch's decode
// time), their ratio, the drafts taken, the model's steps, and whether every reply was the same (on the cpu
// a batched row is bitwise a decode step's, so they must be).
int run_batched_speculation_bench(EngineOptions options, const Speculation& speculation, uint32_t batch, uint32_t rounds,
                                  uint32_t steps, const std::vector<int32_t>& prompt, bool json);

}  // namespace tilefire::cli
