#pragma once
// generate() with a request's logit bias and penalties, greedy, against a reference built on the step API:
// the raw logits of each step (prefill, then decode), adjusted here by the rules written out again (bias;
// repetition over the prompt and the reply, once per token; presence; frequency per count), their argmax
// (lowest id on ties) fed back. Also checks that the adjustments change the choice at a decode step (not
// only the first token, which the prefill's logits give), so the comparison can tell them from nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "tilefire/engine.h"

namespace tilefire::testing {

struct AdjustedGreedy {
  std::vector<int32_t> tokens;
  uint32_t decode_steps_changed = 0;  // steps after the first whose adjusted argmax is not the raw one
};

inline size_t argmax_lowest_id(const std::vector<float>& values) {
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = i;
  return best;
}

inline AdjustedGreedy adjusted_greedy_reference(Engine& engine, const GenerateRequest& request) {
  const Sampling& s = request.sampling;
  engine.reset();
  std::vector<float> logits = engine.prefill(request.prompt);
  AdjustedGreedy reference;
  std::vector<int32_t>& reply = reference.tokens;
  std::map<int32_t, int> counts;
  while (reply.size() < request.max_new_tokens) {
    std::vector<float> adjusted = logits;
    for (const auto& [token, bias] : s.logit_bias) adjusted[size_t(token)] += bias;
    std::set<int32_t> seen(request.prompt.begin(), request.prompt.end());
    seen.insert(reply.begin(), reply.end());
    for (int32_t token : seen) {
      float& l = adjusted[size_t(token)];
      l = l > 0 ? l / s.repetition_penalty : l * s.repetition_penalty;
    }
    for (const auto& [token, count] : counts) adjusted[size_t(token)] -= s.presence_penalty + s.frequency_penalty * float(count);
    const size_t best = argmax_lowest_id(adjusted);
    if (!reply.empty() && best != argmax_lowest_id(logits)) ++reference.decode_steps_changed;
    reply.push_back(int32_t(best));
    ++counts[int32_t(best)];
    if (reply.size() < request.max_new_tokens) logits = engine.decode(int32_t(best));
  }
  return reference;
}

// A greedy request (no eos stop) with every adjustment, on a model of at least 8 tokens. Mild: they move
// a close choice now and then. Strong: token 5's bias and negative penalties (a random model rarely
// repeats a token on its own) make the reply repeat it, which the raw logits would not choose.
inline GenerateRequest adjusted_greedy_request(std::vector<int32_t> prompt, uint32_t max_new_tokens, bool strong) {
  GenerateRequest request;
  request.prompt = std::move(prompt);
  request.max_new_tokens = max_new_tokens;
  request.stop_at_eos = false;
  request.sampling.logit_bias = {{5, strong ? 3.0f : 0.4f}, {7, -100.0f}, {5, strong ? 0.5f : 0.1f}};
  request.sampling.repetition_penalty = 1.3f;
  request.sampling.presence_penalty = strong ? -1.0f : 0.4f;
  request.sampling.frequency_penalty = strong ? -0.6f : 0.15f;
  return request;
}

// Both requests on `prompt` match the reference; the strong one's adjustments moved a decode step's choice.
inline void expect_adjusted_greedy_matches_reference(Engine& engine, const std::vector<int32_t>& prompt, uint32_t max_new_tokens) {
  for (const bool strong : {false, true}) {
    SCOPED_TRACE(strong ? "strong adjustments" : "mild adjustments");
    const GenerateRequest request = adjusted_greedy_request(prompt, max_new_tokens, strong);
    const GenerateResult result = engine.generate(request);
    const AdjustedGreedy reference = adjusted_greedy_reference(engine, request);
    EXPECT_EQ(result.tokens, reference.tokens);
    if (strong) {
      EXPECT_GT(reference.decode_steps_changed, 0u) << "the adjustments changed no decode step's choice: the test cannot tell";
    }
  }
}

}  // namespace tilefire::testing
