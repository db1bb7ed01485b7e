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
};

// `uniform01` is one draw in [0, 1) from the caller's seeded generator; the same logits, params and draw
// always give the same token. With temperature > 0: softmax(logits / T) restricted to the top_k most
// probable, then to the smallest prefix (by probability, descending, ties by id) whose mass reaches top_p,
// renormalised, then inverse-CDF sampling with `uniform01`. NaN logits throw std::runtime_error.
int32_t sample_token(const float* logits, uint32_t vocab, const SamplingParams& params, float uniform01);

// A token's probability under softmax(logits) (temperature 1), and its natural log, computed as
// logit - max - log(sum) so that it stays finite where the probability underflows to 0.
struct TokenOdds {
  int32_t token = 0;
  float probability = 0.0f;
  float logprob = 0.0f;
};

// The k most probable tokens, descending by probability, ties by lower id.
std::vector<TokenOdds> top_probabilities(const float* logits, uint32_t vocab, uint32_t k);
// One token's (the one sampled, which need not be among the k most probable).
TokenOdds token_probability(const float* logits, uint32_t vocab, int32_t token);

}  // namespace tilefire
