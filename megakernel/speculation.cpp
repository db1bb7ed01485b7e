// Prompt-lookup drafts and the bounds of a speculation request (speculation.h).
#include "megakernel/speculation.h"

#include <algorithm>
#include <string>

#include "tilefire/errors.h"

namespace tilefire {

namespace {
constexpr uint32_t kMaxDraftTokens = 31;  // a check of 32 tokens: past that a wrong guess costs a long step
constexpr uint32_t kMaxNgram = 16;
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

std::unique_ptr<Engine> make_draft_engine(const EngineOptions& options, const ModelInfo& target, bool ranks_are_processes) {
  const DraftModel& draft = options.draft;
  if (!draft.given()) {
    if (draft.preset_dtype != DraftModel{}.preset_dtype || draft.preset_seed != 0)
      throw InputError("EngineOptions::draft's preset_dtype and preset_seed apply to a draft preset (draft.preset)");
    return nullptr;
  }
  if (options.backend == Backend::cuda && options.cuda_resident)
    throw InputError("EngineOptions::draft (--draft-model) with cuda_resident (--resident): the model's resident kernel holds "
                     "every SM, so the draft model's kernel could never run beside it");
  if (ranks_are_processes)  // each process would need a draft engine of its own outside the launcher's ranks
    throw InputError("EngineOptions::draft (--draft-model) with one rank per process (mpirun, RANK / WORLD_SIZE) is not "
                     "supported: run the ranks in one process (--tp N without a launcher), or draft by prompt lookup");
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
  d.cuda_device = options.cuda_device;
  d.cuda_ctas = options.cuda_ctas;
  d.cuda_stage_weights = options.cuda_stage_weights;
  d.cuda_watchdog_ms = options.cuda_watchdog_ms;
  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(d);
  } catch (const InputError& e) {
    throw InputError(std::string("the draft model (EngineOptions::draft, --draft-model): ") + e.what());
  }
  if (engine->model().vocab != target.vocab)
    throw InputError("the draft model (EngineOptions::draft, --draft-model) " + engine->model().origin + " has a vocabulary of " +
                     std::to_string(engine->model().vocab) + " tokens, the model " + std::to_string(target.vocab) +
                     ": its drafts must be the model's tokens (a model of the same family and tokenizer)");
  return engine;
}

std::vector<int32_t> draft_model_draft(Engine& draft, const std::vector<int32_t>& history, uint32_t count) {
  const std::vector<int32_t>& held = draft.sequence();
  size_t kept = 0;  // what its cache shares with the sequence before the pending token
  while (kept < held.size() && kept + 1 < history.size() && held[kept] == history[kept]) ++kept;
  try {
    draft.rewind(uint32_t(kept));
    const std::vector<float> logits = draft.prefill(std::vector<int32_t>(history.begin() + std::ptrdiff_t(kept), history.end()));
    std::vector<int32_t> out{int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    while (out.size() < count) out.push_back(draft.decode_greedy(out.back()));
    return out;
  } catch (const InputError& e) {
    throw InputError(std::string("the draft model: ") + e.what());
  }
}

}  // namespace tilefire
