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

// The k most probable tokens under softmax(logits) (temperature 1), descending by probability, ties by
// lower id: pairs (token, probability).
std::vector<std::pair<int32_t, float>> top_probabilities(const float* logits, uint32_t vocab, uint32_t k);

}  // namespace tilefire
