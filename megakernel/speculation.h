#pragma once
// Speculative decoding by prompt lookup (GenerateRequest::speculation, docs/ARCHITECTURE.md "Speculative
// decoding"): where a draft comes from, and which requests may ask for one.
#include <cstdint>
#include <memory>
#include <vector>

#include "tilefire/engine.h"

namespace tilefire {

// The `count` tokens that followed the latest earlier occurrence in `history` of its last n tokens, for
// the first n from max_ngram down to min_ngram that occurred (never n = history.size(): the suffix must
// occur before itself). A draft reaching the end of `history` reads on into the draft itself, so a
// repeating pattern continues for all `count` tokens. Empty when no such n-gram occurred.
std::vector<int32_t> prompt_lookup_draft(const std::vector<int32_t>& history, uint32_t count, uint32_t min_ngram,
                                         uint32_t max_ngram);

// InputError naming the field (and run's flag) unless `speculation` is off or within its bounds: a check
// of draft_tokens + 1 tokens is one prefill step, so it is at most `prefill_chunk` tokens; a draft model's
// drafts need the engine to have one (`has_draft_model`).
void check_speculation(const Speculation& speculation, uint32_t prefill_chunk, bool has_draft_model);

// The engine's draft model (EngineOptions::draft) for the model `target` it holds: the same backend,
// threads, schedule, chunk and context, one sequence on one rank. InputError naming the draft model when it
// cannot be built (its own refusals, a vocabulary other than the model's, a resident cuda kernel, ranks
// as processes) or when draft fields are given without a model.
std::unique_ptr<Engine> make_draft_engine(const EngineOptions& options, const ModelInfo& target, bool ranks_are_processes);

// The draft model's greedy continuation of `history` (the sequence so far and its pending last token),
// `count` tokens: it keeps what its cache shares with `history`, prefills the rest, then decodes. Its
// non-finite logits are an InputError naming the draft model.
std::vector<int32_t> draft_model_draft(Engine& draft, const std::vector<int32_t>& history, uint32_t count);

}  // namespace tilefire
