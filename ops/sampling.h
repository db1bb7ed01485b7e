#pragma once
// Choosing the next token from the LM head's logits: greedy, temperature, top-k, top-p; and the K most
// probable tokens with their probabilities (for --logprobs).
#include <cstdint>
#include <utility>
#include <vector>

namespace tilefire {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id wins ties)
  uint32_t top_k = 0;        // 0: no top-k cut
  float top_p = 1.0f;        // 1: no nucleus cut
  float min_p = 0.0f;        // 0: no cut; else only tokens at least min_p times as probable as the most probable
};

// `uniform01` is one draw in [0, 1) from the caller's seeded generator; the same logits, params and draw
// always give the same token. With temperature > 0: softmax(logits / T) restricted to the top_k most
// probable, then to the smallest prefix (by probability, descending, ties by id) whose mass reaches top_p,
// then to the tokens at least min_p times as probable as the most probable, renormalised, then
// inverse-CDF sampling with `uniform01`. NaN logits throw std::runtime_error.
int32_t sample_token(const float* logits, uint32_t vocab, const SamplingParams& params, float uniform01);

// A token's probability under softmax(logits) (temperature 1), and its natural log, computed as
// logit - max - log(sum) so that it stays finite where the probability underflows to 0.
struct TokenOdds {
  int32_t token = 0;
  float probability = 0.0f;
  float logprob = 0.0f;
};

// softmax(logits) over a vocabulary of at least one token, stable in double (exp(logit - max) / sum,
// summed once): any token's odds, or the k most probable. +inf logits share the mass equally; if every
// logit is -inf it is taken as uniform. NaN logits throw std::runtime_error. `logits` must outlive it.
class Softmax {
 public:
  Softmax(const float* logits, uint32_t vocab);
  TokenOdds odds(int32_t token) const;           // std::out_of_range outside the vocabulary
  std::vector<TokenOdds> top(uint32_t k) const;  // descending by probability, ties by lower id

 private:
  double weight(uint32_t id) const;
  const float* logits_;
  uint32_t vocab_;
  float max_ = 0.0f;
  bool any_positive_infinity_ = false, all_negative_infinity_ = false;
  double total_ = 0.0;
};

// The k most probable tokens (Softmax::top; none for an empty vocabulary).
std::vector<TokenOdds> top_probabilities(const float* logits, uint32_t vocab, uint32_t k);

}  // namespace tilefire
