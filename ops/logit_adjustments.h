#pragma once
// What a request does to the logits before a token is chosen from them: OpenAI's logit_bias and its
// presence and frequency penalties, and the repetition penalty of Hugging Face's generate (CTRL's). The
// model's own distribution (logprobs) is reported from the logits before these.
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tilefire {

struct LogitAdjustments {
  std::vector<std::pair<int32_t, float>> bias;  // (token, added to its logit); a token listed twice adds both
  float repetition = 1.0f;  // a token of the prompt or the reply so far: logit / r when positive, logit * r when not
  float presence = 0.0f;    // subtracted once from the logit of every token the reply holds
  float frequency = 0.0f;   // subtracted from a token's logit per time the reply holds it
  bool active() const { return !bias.empty() || repetition != 1.0f || presence != 0.0f || frequency != 0.0f; }
};

// One sequence's tokens as the penalties count them: which the prompt holds, and how many times the
// reply holds each.
class TokenCounts {
 public:
  TokenCounts() = default;
  explicit TokenCounts(const std::vector<int32_t>& prompt);
  void add_generated(int32_t token) { ++generated_[token]; }

  // logits[vocab] adjusted into `out` (resized to vocab): the bias, then the repetition penalty, then the
  // presence and frequency penalties, each token's in that order whatever the order of the lists.
  void adjust(const float* logits, uint32_t vocab, const LogitAdjustments& adjustments, std::vector<float>& out) const;

 private:
  std::vector<int32_t> prompt_;  // its distinct tokens, ascending
  std::unordered_map<int32_t, uint32_t> generated_;
};

}  // namespace tilefire
