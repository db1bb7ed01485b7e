// A prompt's log-probabilities (GenerateRequest::prompt_logprobs): each prompt token after the first,
// after the tokens before it, against a reference that feeds the prompt one token at a time through the
// step API (decode steps, not the prefill's programs: within rounding); bitwise the same through
// generate(), generate_batch and continuous batching by steps; the generation itself unchanged by asking;
// and `run --prompt-logprobs` and its total. The cuda backend's are checked in cuda_engine_test.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"

namespace tilefire::testing {
namespace {

// log softmax(logits)[token], in double.
double log_probability(const std::vector<float>& logits, int32_t token) {
  double max = logits[0];
  for (float l : logits) max = std::max(max, double(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - max);
  return double(logits[size_t(token)]) - max - std::log(sum);
}

// Each prompt token's log-probability after those before it, one decode step at a time.
std::vector<double> stepwise_prompt_logprobs(Engine& engine, const std::vector<int32_t>& prompt) {
  engine.reset();
  std::vector<float> logits = engine.prefill({prompt[0]});
  std::vector<double> out;
  for (size_t i = 1; i < prompt.size(); ++i) {
    out.push_back(log_probability(logits, prompt[i]));
    logits = engine.decode(prompt[i]);
  }
  return out;
}

std::vector<int32_t> prompt_of(uint32_t length, uint32_t vocab) {
  std::vector<int32_t> prompt;
  for (uint32_t i = 0; i < length; ++i) prompt.push_back(int32_t((i * 37 + 11) % vocab));
  return prompt;
}

// Two threads, prompts prefilled in chunks of 16 (so a prompt of 20 or 40 tokens takes several).
EngineOptions chunks_of_16() {
  EngineOptions options;
  options.threads = 2;
  options.prefill_chunk = 16;
  return options;
}

// A request that scores a prompt of `length` tokens (2 most probable per position) and generates
// `max_new_tokens`, eos or not.
GenerateRequest scoring_request(uint32_t length, uint32_t max_new_tokens) {
  GenerateRequest request;
  request.prompt = prompt_of(length, 512);
  request.max_new_tokens = max_new_tokens;
  request.stop_at_eos = false;
  request.prompt_logprobs = 2;
  return request;
}

// `prompt`: the request's, so that a result reporting other prompt tokens cannot set its own reference.
void expect_scores_match_stepwise(Engine& engine, const std::vector<int32_t>& prompt, const GenerateResult& result,
                                  double tolerance) {
  ASSERT_EQ(result.prompt_tokens, prompt);
  const std::vector<double> expected = stepwise_prompt_logprobs(engine, prompt);
  ASSERT_EQ(result.prompt_token_probabilities.size(), expected.size());
  ASSERT_EQ(result.prompt_logprobs.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("prompt token " + std::to_string(i + 1));
    EXPECT_EQ(result.prompt_token_probabilities[i].token, result.prompt_tokens[i + 1]);
    EXPECT_NEAR(result.prompt_token_probabilities[i].logprob, expected[i], tolerance);
    const std::vector<TokenProbability>& top = result.prompt_logprobs[i];
    ASSERT_FALSE(top.empty());
    EXPECT_LE(result.prompt_token_probabilities[i].logprob, top[0].logprob + 1e-6) << "the most probable comes first";
    for (size_t k = 1; k < top.size(); ++k) EXPECT_LE(top[k].probability, top[k - 1].probability);
  }
}

void expect_same_scores(const GenerateResult& a, const GenerateResult& b, const std::string& what) {
  ASSERT_EQ(a.prompt_token_probabilities.size(), b.prompt_token_probabilities.size()) << what;
  for (size_t i = 0; i < a.prompt_token_probabilities.size(); ++i) {
    EXPECT_EQ(a.prompt_token_probabilities[i].logprob, b.prompt_token_probabilities[i].logprob) << what << ", token " << i + 1;
    ASSERT_EQ(a.prompt_logprobs[i].size(), b.prompt_logprobs[i].size()) << what;
    for (size_t k = 0; k < a.prompt_logprobs[i].size(); ++k) {
      EXPECT_EQ(a.prompt_logprobs[i][k].token, b.prompt_logprobs[i][k].token) << what << ", token " << i + 1;
      EXPECT_EQ(a.prompt_logprobs[i][k].logprob, b.prompt_logprobs[i][k].logprob) << what << ", token " << i + 1;
    }
  }
}

// Prompts over one prefill chunk and within one, scored and generated; max_new_tokens 0 scores alone.
TEST(PromptLogprobs, MatchFeedingThePromptOneTokenAtATime) {
  Engine engine(chunks_of_16());  // the 40-token prompt takes three chunks, each row scored
  for (uint32_t length : {1u, 7u, 40u}) {
    SCOPED_TRACE("a prompt of " + std::to_string(length) + " tokens");
    GenerateRequest request;
    request.prompt = prompt_of(length, engine.model().vocab);
    request.max_new_tokens = 5;
    request.stop_at_eos = false;
    request.logprobs = 2;
    const GenerateResult plain = engine.generate(request);
    EXPECT_TRUE(plain.prompt_token_probabilities.empty()) << "not asked for";
    request.prompt_logprobs = 3;
    request.reuse_prefix = true;  // ignored: every position's logits are needed
    const GenerateResult scored = engine.generate(request);
    EXPECT_EQ(scored.reused_tokens, 0u);
    EXPECT_EQ(scored.tokens, plain.tokens) << "asking changes nothing generated";
    for (size_t t = 0; t < plain.tokens.size(); ++t)
      EXPECT_EQ(scored.token_probabilities[t].logprob, plain.token_probabilities[t].logprob) << "token " << t;
    expect_scores_match_stepwise(engine, request.prompt, scored, 1e-4);
    for (const auto& top : scored.prompt_logprobs) EXPECT_EQ(top.size(), 3u);

    request.max_new_tokens = 0;
    const GenerateResult only = engine.generate(request);
    EXPECT_TRUE(only.tokens.empty());
    EXPECT_EQ(only.finish_reason, "length");
    expect_same_scores(only, scored, "scored alone");
    EXPECT_EQ(engine.sequence(), request.prompt) << "the cache holds the scored prompt";
  }
  GenerateRequest too_many;
  too_many.prompt = {1, 2};
  too_many.prompt_logprobs = engine.model().vocab + 1;
  EXPECT_THROW(engine.generate(too_many), InputError);
}

// The same scores, bitwise, from generate_batch (with a second request beside it) and from continuous
// batching that prefills a chunk per step; a sequence of max_new_tokens 0 only scores its prompt.
TEST(PromptLogprobs, BatchesScoreBitwiseAsGenerateDoes) {
  EngineOptions options = chunks_of_16();
  const GenerateRequest scored = scoring_request(40, 4);
  GenerateRequest other = scored;
  other.prompt = prompt_of(9, 500);
  other.prompt_logprobs = 0;
  GenerateRequest score_only = scored;
  score_only.max_new_tokens = 0;

  Engine alone(options);
  const GenerateResult expected = alone.generate(scored);
  const GenerateResult expected_only = alone.generate(score_only);

  options.sequences = 3;
  Engine batched(options);
  const std::vector<GenerateResult> results = batched.generate_batch({other, scored, score_only});
  EXPECT_EQ(results[1].tokens, expected.tokens);
  expect_same_scores(results[1], expected, "generate_batch");
  EXPECT_TRUE(results[0].prompt_token_probabilities.empty());
  EXPECT_TRUE(results[2].tokens.empty());
  EXPECT_EQ(results[2].finish_reason, "length");
  expect_same_scores(results[2], expected_only, "generate_batch, scoring only");

  options.prefill_chunks_per_step = 1;
  Engine stepped(options);
  const uint64_t a = stepped.add_sequence(other), b = stepped.add_sequence(scored), c = stepped.add_sequence(score_only);
  while (stepped.step_sequences() > 0) {
  }
  EXPECT_TRUE(stepped.remove_sequence(a).prompt_token_probabilities.empty());
  const GenerateResult by_steps = stepped.remove_sequence(b);
  EXPECT_EQ(by_steps.tokens, expected.tokens);
  expect_same_scores(by_steps, expected, "prefilled a chunk per step");
  const GenerateResult only_by_steps = stepped.remove_sequence(c);
  EXPECT_TRUE(only_by_steps.tokens.empty());
  expect_same_scores(only_by_steps, expected_only, "scoring only, a chunk per step");
}

// Under tensor parallelism every rank's LM head projects its share of each row, gathered whole: the
// scores of TP 2 are TP 1's within rounding (the partial sums are added in another order).
TEST(PromptLogprobs, TensorParallelRanksScoreAsOneRank) {
  EngineOptions options = chunks_of_16();
  const GenerateRequest request = scoring_request(20, 2);
  Engine one(options);
  const GenerateResult expected = one.generate(request);
  options.tp = 2;
  Engine two(options);
  const GenerateResult got = two.generate(request);
  EXPECT_EQ(got.tokens, expected.tokens);
  ASSERT_EQ(got.prompt_token_probabilities.size(), expected.prompt_token_probabilities.size());
  for (size_t i = 0; i < got.prompt_token_probabilities.size(); ++i) {
    EXPECT_NEAR(got.prompt_token_probabilities[i].logprob, expected.prompt_token_probabilities[i].logprob, 1e-4) << "token " << i + 1;
    EXPECT_EQ(got.prompt_logprobs[i][0].token, expected.prompt_logprobs[i][0].token) << "token " << i + 1;
  }
}

// `run --prompt-logprobs K --json`: null first, then each token's log-probability; their sum is
// prompt_logprob; the text form prints the total and the perplexity.
TEST(PromptLogprobs, RunPrintsTheScoresAndTheirTotal) {
  const nlohmann::json result = run_json({"--prompt-tokens", "5,9,14,20,27", "--max-new-tokens", "0", "--prompt-logprobs", "2",
                                          "--threads", "1"});
  const nlohmann::json& scores = result.at("prompt_token_logprobs");
  ASSERT_EQ(scores.size(), 5u) << result.dump();
  EXPECT_TRUE(scores[0].is_null());
  double total = 0;
  for (size_t i = 1; i < scores.size(); ++i) total += scores[i].get<double>();
  EXPECT_NEAR(result.at("prompt_logprob").get<double>(), total, 1e-4);
  ASSERT_EQ(result.at("prompt_logprobs").size(), 5u);
  EXPECT_EQ(result.at("prompt_logprobs")[1].size(), 2u);
  EXPECT_TRUE(result.at("tokens").empty());
  const RunResult text = run_cli({"run", "--prompt-tokens", "5,9,14,20,27", "--max-new-tokens", "0", "--prompt-logprobs", "1",
                                  "--threads", "1"});
  EXPECT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("prompt: 4 tokens scored, log-probability"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("perplexity"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("prompt scored in"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("decode 0.0 tokens/s"), std::string::npos) << "no decode step ran: " << text.out;
}

}  // namespace
}  // namespace tilefire::testing
