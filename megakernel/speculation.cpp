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

void check_speculation(const Speculation& s, uint32_t prefill_chunk) {
  if (s.draft_tokens == 0) return;
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

}  // namespace tilefire
