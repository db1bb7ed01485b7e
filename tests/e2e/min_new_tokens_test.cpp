// GenerateRequest::min_new_tokens: until that many tokens are generated the tokens that would end the
// generation (its stop tokens, the eos tokens it stops at) are not chosen. Against a reference on the step
// API that takes the argmax with those tokens left out for the first N choices; through generate() and
// generate_batch; a minimum above the maximum is refused (and by `run --min-new-tokens`).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"

namespace tilefire::testing {
namespace {

// Greedy, `banned` left out of the first `min_new_tokens` choices; stops after a banned token once allowed.
std::vector<int32_t> reference(Engine& engine, const GenerateRequest& request, const std::vector<int32_t>& banned) {
  engine.reset();
  std::vector<float> logits = engine.prefill(request.prompt);
  std::vector<int32_t> reply;
  while (reply.size() < request.max_new_tokens) {
    if (reply.size() < request.min_new_tokens)
      for (int32_t t : banned) logits[size_t(t)] = -1e30f;
    const int32_t token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    reply.push_back(token);
    if (std::find(banned.begin(), banned.end(), token) != banned.end()) break;
    logits = engine.decode(token);
  }
  return reply;
}

// The stop tokens are the tokens greedy generation takes first and third, so without a minimum it ends at
// once; with one of 4 it cannot end before its fifth token.
TEST(MinNewTokens, EndingTokensWaitForTheMinimum) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 2;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = {12, 40, 7, 99};
  request.max_new_tokens = 10;
  request.stop_at_eos = false;
  const std::vector<int32_t> free_run = engine.generate(request).tokens;
  ASSERT_EQ(free_run.size(), 10u);
  request.stop_tokens = {free_run[0], free_run[2]};
  const GenerateResult at_once = engine.generate(request);
  EXPECT_EQ(at_once.tokens.size(), 1u);
  EXPECT_EQ(at_once.finish_reason, "eos");

  request.min_new_tokens = 4;
  const GenerateResult waited = engine.generate(request);
  EXPECT_EQ(waited.tokens, reference(engine, request, request.stop_tokens));
  ASSERT_GE(waited.tokens.size(), 5u) << "an ending token came before the minimum";
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(std::count(request.stop_tokens.begin(), request.stop_tokens.end(), waited.tokens[i]), 0) << "token " << i;
  GenerateRequest other = request;
  other.prompt = {3, 4};
  const std::vector<GenerateResult> batched = engine.generate_batch({request, other});
  EXPECT_EQ(batched[0].tokens, waited.tokens) << "in a batch";
  EXPECT_EQ(batched[0].finish_reason, waited.finish_reason);

  request.min_new_tokens = 11;
  EXPECT_THROW(engine.generate(request), InputError);
}

// The flag reaches the request: a minimum above the maximum is the engine's refusal, named by the flag.
TEST(MinNewTokens, RunRefusesAMinimumAboveTheMaximum) {
  EXPECT_EQ(run_json({"--prompt-tokens", "12,40", "--max-new-tokens", "3", "--threads", "1", "--min-new-tokens", "3"})
                .at("tokens")
                .size(),
            3u);
  const RunResult refused = run_cli({"run", "--max-new-tokens", "3", "--min-new-tokens", "4"});
  EXPECT_EQ(refused.status, 2) << describe(refused);
  EXPECT_NE(refused.err.find("--min-new-tokens 4 is more than --max-new-tokens 3"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace tilefire::testing
