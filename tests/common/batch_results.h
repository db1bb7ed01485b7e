#pragma once
// Batched decoding's tests (batch_decode_test, prefix_copy_test): results compared bit for bit, and
// requests of counting prompts.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tilefire/engine.h"

namespace tilefire::testing {

// Bitwise equality of two floats (NaN equal to NaN of the same bits, -0 apart from +0).
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Each token, finish reason and probability of `batched` is bitwise `alone`'s (request `index`).
inline void expect_same_result(const GenerateResult& batched, const GenerateResult& alone, size_t index) {
  SCOPED_TRACE("request " + std::to_string(index));
  EXPECT_EQ(batched.prompt_tokens, alone.prompt_tokens);
  EXPECT_EQ(batched.tokens, alone.tokens);
  EXPECT_EQ(batched.finish_reason, alone.finish_reason);
  ASSERT_EQ(batched.logprobs.size(), alone.logprobs.size());
  for (size_t t = 0; t < alone.logprobs.size(); ++t) {
    ASSERT_EQ(batched.logprobs[t].size(), alone.logprobs[t].size()) << "token " << t;
    for (size_t k = 0; k < alone.logprobs[t].size(); ++k) {
      EXPECT_EQ(batched.logprobs[t][k].token, alone.logprobs[t][k].token) << "token " << t << ", rank " << k;
      EXPECT_TRUE(same_bits(batched.logprobs[t][k].probability, alone.logprobs[t][k].probability))
          << "token " << t << ", rank " << k << ": " << batched.logprobs[t][k].probability << " vs "
          << alone.logprobs[t][k].probability;
      EXPECT_TRUE(same_bits(batched.logprobs[t][k].logprob, alone.logprobs[t][k].logprob)) << "token " << t << ", rank " << k;
    }
  }
  ASSERT_EQ(batched.token_probabilities.size(), alone.token_probabilities.size());
  for (size_t t = 0; t < alone.token_probabilities.size(); ++t) {
    EXPECT_EQ(batched.token_probabilities[t].token, alone.token_probabilities[t].token) << "token " << t;
    EXPECT_TRUE(same_bits(batched.token_probabilities[t].logprob, alone.token_probabilities[t].logprob)) << "token " << t;
  }
}

// `length` tokens counting up by 7 from `first`, below 256.
inline std::vector<int32_t> counting_prompt(uint32_t length, int32_t first) {
  std::vector<int32_t> prompt;
  for (uint32_t i = 0; i < length; ++i) prompt.push_back((first + int32_t(i) * 7) % 256);
  return prompt;
}

// A greedy request (unless the test sets its sampling) of counting_prompt(length, first) that runs to
// max_new_tokens, eos or not.
inline GenerateRequest counting_request(uint32_t length, int32_t first, uint32_t max_new_tokens) {
  GenerateRequest request;
  request.prompt = counting_prompt(length, first);
  request.max_new_tokens = max_new_tokens;
  request.stop_at_eos = false;
  return request;
}

}  // namespace tilefire::testing
