// Prompt-lookup drafts and the bounds of a speculation request (speculation.h).
#include "megakernel/speculation.h"

#include <algorithm>
#include <string>

#include "graph/tensor_parallel.h"
#include "megakernel/tool_spec.h"
#include "tilefire/errors.h"

namespace tilefire {

namespace {
constexpr uint32_t kMaxDraftTokens = 31;  // a check of 32 tokens: past that a wrong guess costs a long step
constexpr uint32_t kMaxNgram = 16;
// Draft and model vocabularies may differ by this much (padded embeddings of one tokenizer).
constexpr uint32_t kMostVocabularyDifference = 256;
}  // namespace

std::vector<int32_t> prompt_lookup_draft(const std::vector<int32_t>& history, uint32_t count, uint32_t min_ngram,
                                         uint32_t max_ngram) {
  const size_t length = history.size();
  if (count == 0 || length < 2 || min_ngram == 0) return {};
  const size_t longest = std::min<size_t>(max_ngram, length - 1);
  for (size_t n = longest; n >= min_ngram && n >= 1; --n) {
    const auto suffix = history.end() - std::ptrdiff_t(n);
    // The latest start before the suffix's own: j + n <= length - 1, so the draft's first token is in history.
    for (size_t j = length - n; j-- > 0;) {
      if (!std::equal(suffix, history.end(), history.begin() + std::ptrdiff_t(j))) continue;
      std::vector<int32_t> draft;
      draft.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        const size_t at = j + n + i;  // in history ++ draft: at - length < i, a token the draft already has
        draft.push_back(at < length ? history[at] : draft[at - length]);
      }
      return draft;
    }
  }
  return {};
}

void check_speculation(const Speculation& s, uint32_t prefill_chunk, bool has_draft_model) {
  if (s.source != DraftSource::prompt_lookup && s.source != DraftSource::draft_model)
    throw InputError("Speculation::source is not prompt_lookup or draft_model");
  if (s.draft_tokens == 0) return;
  if (s.source == DraftSource::draft_model && !has_draft_model)
    throw InputError("Speculation::source is draft_model, but the engine has no draft model (EngineOptions::draft, --draft-model)");
  const uint32_t most = std::min(kMaxDraftTokens, prefill_chunk - 1);
  if (s.draft_tokens > most)
    throw InputError("Speculation::draft_tokens (--speculate) " + std::to_string(s.draft_tokens) + " is more than " +
                     std::to_string(most) + ": a draft is checked in one step of draft + 1 tokens, at most 32" +
                     (prefill_chunk <= kMaxDraftTokens ? " and at most the prefill chunk of " + std::to_string(prefill_chunk) +
                                                             " (EngineOptions::prefill_chunk, --prefill-chunk)"
                                                       : std::string()));
  if (s.max_ngram < 1 || s.max_ngram > kMaxNgram)
    throw InputError("Speculation::max_ngram (--speculate-ngram) must be 1 to " + std::to_string(kMaxNgram) + ", got " +
                     std::to_string(s.max_ngram));
  if (s.min_ngram < 1 || s.min_ngram > s.max_ngram)
    throw InputError("Speculation::min_ngram (--speculate-min-ngram) must be 1 to max_ngram (" + std::to_string(s.max_ngram) +
                     "), got " + std::to_string(s.min_ngram));
}

void check_draft_options(const EngineOptions& options, bool ranks_are_processes) {
  const DraftModel& draft = options.draft;
  if (!draft.given()) {
    if (draft.preset_dtype != DraftModel{}.preset_dtype || draft.preset_seed != 0)
      throw InputError("EngineOptions::draft's preset_dtype and preset_seed apply to a draft preset (draft.preset)");
    return;
  }
  if (options.backend == Backend::cuda && options.cuda_resident)
    throw InputError("EngineOptions::draft (--draft-model) with cuda_resident (--resident): the resident kernel holds every SM, "
                     "so each turn of the draft model would stop it and each turn of the model relaunch it, which costs "
                     "more than the launch per step it saves; leave out --resident");
  if (ranks_are_processes)  // each process would need a draft engine of its own outside the launcher's ranks
    throw InputError("EngineOptions::draft (--draft-model) with one rank per process (mpirun, RANK / WORLD_SIZE) is not "
                     "supported: run the ranks in one process (--tp N without a launcher), or draft by prompt lookup");
}

std::unique_ptr<Engine> make_draft_engine(const EngineOptions& options, const ModelInfo& target) {
  const DraftModel& draft = options.draft;
  if (!draft.given()) return nullptr;
  EngineOptions d;
  d.model_dir = draft.model_dir;
  d.preset = draft.preset;
  d.preset_dtype = draft.preset_dtype;
  d.preset_seed = draft.preset_seed;
  d.backend = options.backend;
  d.threads = options.threads;
  d.schedule = options.schedule;
  d.policy = options.policy;
  d.granularity = options.granularity;
  d.kv_splits = options.kv_splits;
  d.prefill_chunk = options.prefill_chunk;
  d.max_context = target.max_context;  // it drafts at the model's positions
  d.stress_delay_us = options.stress_delay_us;
  d.stress_seed = options.stress_seed;
  d.cuda_device = options.cuda_device;
  d.cuda_ctas = options.cuda_ctas;
  d.cuda_stage_weights = options.cuda_stage_weights;
  d.cuda_watchdog_ms = options.cuda_watchdog_ms;
  d.cuda_step_deadline_ms = options.cuda_step_deadline_ms;
  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(d);
  } catch (const InputError& e) {
    throw InputError(std::string("the draft model (EngineOptions::draft, --draft-model): ") + e.what());
  }
  // Models of one family may pad their embeddings to different sizes (Qwen2.5's small models have 151,936
  // rows, its large ones 152,064): the tokens they share are one tokenizer's. A larger difference is
  // another tokenizer, whose drafts would be arbitrary tokens.
  const uint32_t vocab = engine->model().vocab;
  if (std::max(vocab, target.vocab) - std::min(vocab, target.vocab) > kMostVocabularyDifference)
    throw InputError("the draft model (EngineOptions::draft, --draft-model) " + engine->model().origin + " has a vocabulary of " +
                     std::to_string(vocab) + " tokens, the model " + std::to_string(target.vocab) +
                     ": its drafts must be the model's tokens (a model of the same family and tokenizer; embeddings padded "
                     "apart by up to " + std::to_string(kMostVocabularyDifference) + " rows are taken)");
  return engine;
}

uint64_t draft_kv_cache_bytes(const EngineOptions& options, uint32_t max_context) {
  if (!options.draft.given()) return 0;
  try {
    std::string label;
    const ModelSpec spec = spec_for_tool(options.draft.model_dir, options.draft.preset, std::nullopt, &label);
    return rank_memory(spec, split_tensor_parallel(spec, 1).ranks.at(0), max_context, 1, 1, options.prefill_chunk).kv_cache_bytes;
  } catch (const InputError&) {
    return 0;
  }
}

std::vector<int32_t> draft_model_draft(Engine& draft, const std::vector<int32_t>& history, uint32_t count, uint32_t target_vocab) {
  const uint32_t vocab = draft.model().vocab;
  for (int32_t t : history)  // a token of the model's padding the draft model has no row for: nothing to draft from
    if (uint32_t(t) >= vocab) return {};
  const std::vector<int32_t>& held = draft.sequence();
  size_t kept = 0;  // what its cache shares with the sequence before the pending token
  while (kept < held.size() && kept + 1 < history.size() && held[kept] == history[kept]) ++kept;
  if (!draft.can_rewind(uint32_t(kept))) kept = 0;  // its sliding layers' rings have moved on: prefill again
  const std::vector<int32_t> rest(history.begin() + std::ptrdiff_t(kept), history.end());
  std::vector<int32_t> out;
  draft.rewind(uint32_t(kept));
  // One step whatever the rest: after a check it is the model's correction, fed by a decode step (whose
  // program is compiled already), or the last drafted token and the bonus one, fed by a prefill of 2
  // (compiled once, and used often enough that the least-recently-used eviction of prefill programs keeps
  // it); a new prompt is prefilled.
  if (rest.size() == 1) {
    out.assign(1, draft.decode_greedy(rest[0]));
  } else {
    const std::vector<float> logits = draft.prefill(rest);
    out.assign(1, int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  while (out.size() < count) out.push_back(draft.decode_greedy(out.back()));
  // The model's tokens only: a draft past a token of the draft model's own padding is cut there.
  const auto outside = std::find_if(out.begin(), out.end(), [&](int32_t t) { return uint32_t(t) >= target_vocab; });
  out.erase(outside, out.end());
  return out;
}

std::vector<int32_t> next_draft(const Speculation& speculation, Engine* draft_engine, const std::vector<int32_t>& history,
                                uint32_t useful, uint32_t target_vocab, std::string* draft_error) {
  const uint32_t count = speculation.draft_tokens;
  if (speculation.source == DraftSource::prompt_lookup)
    return prompt_lookup_draft(history, count, speculation.min_ngram, speculation.max_ngram);
  if (!draft_error->empty()) return {};
  std::vector<int32_t> draft;
  try {
    draft = draft_model_draft(*draft_engine, history, std::min(useful, count), target_vocab);
  } catch (const InputError& e) {
    *draft_error = std::string("the draft model: ") + e.what();
    return {};
  }
  if (!draft.empty()) draft.resize(count, draft.back());  // one check program for every draft
  return draft;
}

}  // namespace tilefire
