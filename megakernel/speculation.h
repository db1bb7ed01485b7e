#pragma once
// Speculative decoding by prompt lookup (GenerateRequest::speculation, docs/ARCHITECTURE.md "Speculative
// decoding"): where a draft comes from, and which requests may ask for one.
#include <cstdint>
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
// of draft_tokens + 1 tokens is one prefill step, so it is at most `prefill_chunk` tokens.
void check_speculation(const Speculation& speculation, uint32_t prefill_chunk);

}  // namespace tilefire
