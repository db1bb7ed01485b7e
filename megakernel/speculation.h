#pragma once
// Speculative decoding (GenerateRequest::speculation, docs/ARCHITECTURE.md "Speculative decoding"): where
// a draft comes from (prompt lookup, or the engine's draft model), and which requests may ask for one.
#include <cstdint>
#include <memory>
#include <string>
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

// The next check's draft (`speculation.draft_tokens` long, or empty: a decode step instead): by prompt lookup
// over `history`, or by `draft_engine` (only the first `useful` tokens drafted by it, the rest padded with its
// last: with `useful` the tokens the reply has left, a check never reaches the padding). A draft model's InputError (its
// non-finite logits) ends its drafting for the request: `*draft_error` takes the message and the draft is
// empty from then on, the reply going on by decode steps.
std::vector<int32_t> next_draft(const Speculation& speculation, Engine* draft_engine, const std::vector<int32_t>& history,
                                uint32_t useful, uint32_t target_vocab, std::string* draft_error);

// InputError when EngineOptions::draft cannot be honoured, checked before anything loads: draft fields
// without a draft model, a resident cuda kernel, ranks as processes.
void check_draft_options(const EngineOptions& options, bool ranks_are_processes);

// The engine's draft model (EngineOptions::draft; null without one) for the model `target` it holds: the
// same backend, threads, schedule, chunk and context, one sequence on one rank. InputError naming the draft
// model when it cannot be built (its own refusals, a vocabulary of another tokenizer).
std::unique_ptr<Engine> make_draft_engine(const EngineOptions& options, const ModelInfo& target);

// The bytes of the draft model's KV cache for a context of `max_context` positions (make_draft_engine's
// engine: one sequence, one rank, f32), from its config alone (a folder's config.json, a preset's shape),
// so that the model's engine can check both caches against the host's memory before either is built.
// 0 without a draft model, or for one whose config cannot be read (its engine refuses it by name later).
uint64_t draft_kv_cache_bytes(const EngineOptions& options, uint32_t max_context);

// The draft model's greedy continuation of `history` (the sequence so far and its pending last token), up
// to `count` tokens, all below `target_vocab`: it keeps what its cache shares with `history` and feeds the
// rest, then decodes. Empty when `history` holds a token the draft model has no row for. Throws what the
// draft engine throws (its non-finite logits: InputError).
std::vector<int32_t> draft_model_draft(Engine& draft, const std::vector<int32_t>& history, uint32_t count, uint32_t target_vocab);

}  // namespace tilefire
