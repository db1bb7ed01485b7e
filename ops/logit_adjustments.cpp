// The logits a request's bias and penalties make (logit_adjustments.h).
#include "ops/logit_adjustments.h"

#include <algorithm>

namespace tilefire {

TokenCounts::TokenCounts(const std::vector<int32_t>& prompt) : prompt_(prompt) {
  std::sort(prompt_.begin(), prompt_.end());
  prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
}

void TokenCounts::adjust(const float* logits, uint32_t vocab, const LogitAdjustments& adjustments, std::vector<float>& out) const {
  out.assign(logits, logits + vocab);
  auto in_vocabulary = [vocab](int32_t token) { return token >= 0 && uint32_t(token) < vocab; };
  for (const auto& [token, bias] : adjustments.bias)
    if (in_vocabulary(token)) out[size_t(token)] += bias;
  const float r = adjustments.repetition;
  auto penalise = [&](int32_t token) {
    if (!in_vocabulary(token)) return;
    float& logit = out[size_t(token)];
    logit = logit > 0.0f ? logit / r : logit * r;
  };
  if (r != 1.0f) {
    for (int32_t token : prompt_) penalise(token);
    for (const auto& [token, count] : generated_)
      if (!std::binary_search(prompt_.begin(), prompt_.end(), token)) penalise(token);  // once per token
  }
  if (adjustments.presence != 0.0f || adjustments.frequency != 0.0f)
    for (const auto& [token, count] : generated_)
      if (in_vocabulary(token)) out[size_t(token)] -= adjustments.presence + adjustments.frequency * float(count);
}

}  // namespace tilefire
