// Token selection: greedy ties, temperature / top-k / top-p on hand-made distributions with fixed
// draws, determinism on a 128k vocabulary, NaN rejection, and top_probabilities.
#include "ops/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace tilefire {
namespace {

// Logits log(p): softmax at temperature 1 gives back p.
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> logits;
  for (double x : p) logits.push_back(float(std::log(x)));
  return logits;
}

SamplingParams params(float temperature, uint32_t top_k = 0, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

TEST(Sampling, GreedyTakesLowestIdOnTies) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 2.9f};
  EXPECT_EQ(sample_token(logits.data(), 5, params(0.0f), 0.7f), 1);
  const std::vector<float> all_equal(9, 0.25f);
  EXPECT_EQ(sample_token(all_equal.data(), 9, params(0.0f), 0.3f), 0);
}

TEST(Sampling, TopKOneEqualsGreedy) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> logits(1000);
  for (auto& x : logits) x = dist(rng);
  const int32_t greedy = sample_token(logits.data(), 1000, params(0.0f), 0.0f);
  for (float u : {0.0f, 0.3f, 0.999f})
    EXPECT_EQ(sample_token(logits.data(), 1000, params(1.5f, 1), u), greedy) << "u=" << u;
}

// p = {0.1, 0.2, 0.7}: in probability order 2 (0.7), 1 (0.2), 0 (0.1), so the inverse CDF over u
// picks 2 on [0, 0.7), 1 on [0.7, 0.9), 0 on [0.9, 1).
TEST(Sampling, TemperatureOneInverseCdf) {
  const auto logits = logits_of({0.1, 0.2, 0.7});
  const std::pair<float, int32_t> cases[] = {{0.0f, 2}, {0.5f, 2}, {0.69f, 2}, {0.71f, 1},
                                             {0.89f, 1}, {0.91f, 0}, {0.9999f, 0}};
  for (auto [u, want] : cases) EXPECT_EQ(sample_token(logits.data(), 3, params(1.0f), u), want) << "u=" << u;
}

// T = 0.5 squares the probabilities: {0.01, 0.04, 0.49} / 0.54 = {0.0185, 0.0741, 0.9074}.
TEST(Sampling, TemperatureSharpens) {
  const auto logits = logits_of({0.1, 0.2, 0.7});
  EXPECT_EQ(sample_token(logits.data(), 3, params(0.5f), 0.90f), 2);
  EXPECT_EQ(sample_token(logits.data(), 3, params(0.5f), 0.92f), 1);
  EXPECT_EQ(sample_token(logits.data(), 3, params(0.5f), 0.99f), 0);
}

// top_p 0.8 keeps {2, 1} (0.7 < 0.8 <= 0.9), renormalised to {0.778, 0.222}: token 0 is unreachable.
TEST(Sampling, TopPCutsTheTail) {
  const auto logits = logits_of({0.1, 0.2, 0.7});
  EXPECT_EQ(sample_token(logits.data(), 3, params(1.0f, 0, 0.8f), 0.77f), 2);
  EXPECT_EQ(sample_token(logits.data(), 3, params(1.0f, 0, 0.8f), 0.79f), 1);
  EXPECT_EQ(sample_token(logits.data(), 3, params(1.0f, 0, 0.8f), 0.9999f), 1);
  // top_p 0.5: the most probable alone already reaches it.
  for (float u : {0.0f, 0.5f, 0.9999f}) EXPECT_EQ(sample_token(logits.data(), 3, params(1.0f, 0, 0.5f), u), 2);
}

TEST(Sampling, TopKRenormalises) {
  const auto logits = logits_of({0.1, 0.2, 0.05, 0.65});  // order 3, 1, 0, 2
  // top_k 2 keeps {3: 0.65, 1: 0.2} -> {0.765, 0.235}.
  EXPECT_EQ(sample_token(logits.data(), 4, params(1.0f, 2), 0.76f), 3);
  EXPECT_EQ(sample_token(logits.data(), 4, params(1.0f, 2), 0.77f), 1);
  EXPECT_EQ(sample_token(logits.data(), 4, params(1.0f, 2), 0.9999f), 1);
  // top_k 3, then top_p over the renormalised {3: 0.684, 1: 0.211, 0: 0.105}: the prefix {3, 1} holds
  // 0.895, enough for top_p 0.85 (token 0 cut) but not for 0.9 (token 0 kept).
  EXPECT_EQ(sample_token(logits.data(), 4, params(1.0f, 3, 0.9f), 0.9999f), 0);
  EXPECT_EQ(sample_token(logits.data(), 4, params(1.0f, 3, 0.85f), 0.9999f), 1);
}

// min_p keeps the tokens at least min_p times as probable as the most probable, renormalised: with
// {0.05, 0.3, 0.15, 0.4, 0.1} and min_p 0.3 (threshold 0.12) the kept are {3: 0.4, 1: 0.3, 2: 0.15},
// 0.85 in all, so a draw below 0.4 / 0.85 = 0.4706 takes 3, below 0.7 / 0.85 = 0.8235 takes 1, else 2.
TEST(Sampling, MinPCutsBelowAShareOfTheMostProbable) {
  const auto logits = logits_of({0.05, 0.3, 0.15, 0.4, 0.1});
  SamplingParams p = params(1.0f);
  p.min_p = 0.3f;
  EXPECT_EQ(sample_token(logits.data(), 5, p, 0.47f), 3);
  EXPECT_EQ(sample_token(logits.data(), 5, p, 0.48f), 1);
  EXPECT_EQ(sample_token(logits.data(), 5, p, 0.82f), 1);
  EXPECT_EQ(sample_token(logits.data(), 5, p, 0.83f), 2);
  EXPECT_EQ(sample_token(logits.data(), 5, p, 0.9999f), 2);
  // At temperature 2 the weights are sqrt(p / 0.4): 0.354, 0.866, 0.612, 1, 0.5; min_p 0.55 keeps 3, 1, 2.
  p = params(2.0f);
  p.min_p = 0.55f;
  for (float u = 0.0f; u < 1.0f; u += 0.01f) {
    const int32_t token = sample_token(logits.data(), 5, p, u);
    EXPECT_TRUE(token == 1 || token == 2 || token == 3) << "draw " << u << " took " << token;
  }
  p.min_p = 1.0f;  // the most probable alone
  for (float u : {0.0f, 0.5f, 0.9999f}) EXPECT_EQ(sample_token(logits.data(), 5, p, u), 3);
}

// Over an even grid of draws the empirical frequencies are the probabilities.
TEST(Sampling, FrequenciesFollowTheDistribution) {
  const std::vector<double> p = {0.05, 0.3, 0.15, 0.4, 0.1};
  const auto logits = logits_of(p);
  std::vector<int> counts(p.size(), 0);
  const int draws = 10000;
  for (int i = 0; i < draws; ++i) ++counts[sample_token(logits.data(), 5, params(1.0f), (i + 0.5f) / draws)];
  for (size_t t = 0; t < p.size(); ++t) EXPECT_NEAR(double(counts[t]) / draws, p[t], 2e-3) << "token " << t;
}

TEST(Sampling, DeterministicOnLargeVocabulary) {
  const uint32_t vocab = 128256;
  std::mt19937 rng(77);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> logits(vocab);
  for (auto& x : logits) x = dist(rng);
  const SamplingParams settings[] = {params(0.8f), params(0.8f, 50), params(1.0f, 0, 0.9f), params(0.7f, 40, 0.95f)};
  for (const auto& s : settings) {
    for (float u : {0.01f, 0.5f, 0.97f}) {
      const int32_t first = sample_token(logits.data(), vocab, s, u);
      EXPECT_GE(first, 0);
      EXPECT_LT(first, int32_t(vocab));
      EXPECT_EQ(sample_token(logits.data(), vocab, s, u), first);
    }
  }
}

TEST(Sampling, NanLogitsThrowNamingTheToken) {
  std::vector<float> logits(10, 0.0f);
  logits[5] = std::numeric_limits<float>::quiet_NaN();
  for (const auto& s : {params(0.0f), params(1.0f), params(1.0f, 3, 0.9f)}) {
    try {
      sample_token(logits.data(), 10, s, 0.5f);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "sampling: logits contain NaN at token 5");
    }
  }
  EXPECT_THROW(top_probabilities(logits.data(), 10, 3), std::runtime_error);
}

TEST(Sampling, InfiniteLogitTakesAllTheMass) {
  std::vector<float> logits = {0.0f, std::numeric_limits<float>::infinity(), 5.0f};
  EXPECT_EQ(sample_token(logits.data(), 3, params(1.0f), 0.99f), 1);
  const auto top = top_probabilities(logits.data(), 3, 2);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[0].probability, 1.0f);
  EXPECT_EQ(top[0].logprob, 0.0f);
  EXPECT_EQ(top[1].probability, 0.0f);
  EXPECT_EQ(top[1].logprob, -std::numeric_limits<float>::infinity());
}

TEST(TopProbabilities, OrderValuesAndSum) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -1.0f, 2.0f, 1000.0f - 1000.0f};
  const auto top = top_probabilities(logits.data(), 6, 4);
  ASSERT_EQ(top.size(), 4u);
  const int32_t want_order[] = {1, 2, 4, 0};  // ties (1, 2) and (0, 5) by lower id
  double denominator = 0.0;
  for (float l : logits) denominator += std::exp(double(l) - 3.0);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(top[i].token, want_order[i]);
    EXPECT_NEAR(top[i].probability, std::exp(double(logits[want_order[i]]) - 3.0) / denominator, 1e-7);
    EXPECT_NEAR(top[i].logprob, double(logits[want_order[i]]) - 3.0 - std::log(denominator), 1e-6);
  }
  // k >= vocab returns everything, summing to 1; large logits do not overflow (stable softmax).
  const std::vector<float> big = {800.0f, 801.0f, 799.5f};
  const auto all = top_probabilities(big.data(), 3, 10);
  ASSERT_EQ(all.size(), 3u);
  double sum = 0.0;
  for (const TokenOdds& odds : all) {
    EXPECT_TRUE(std::isfinite(odds.probability));
    sum += odds.probability;
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(all[0].token, 1);
  EXPECT_TRUE(top_probabilities(big.data(), 3, 0).empty());
}

// One token's probability, the sampled one whether or not it is among the most probable: the top list's
// figures for a token in it; a log-probability that stays finite (-2000 - log(sum)) where the probability
// underflows to 0; a token outside the vocabulary refused.
TEST(TopProbabilities, OneTokensOddsMatchTheListsAndStayFiniteInLogs) {
  const std::vector<float> logits = {1.0f, 3.0f, -2000.0f, 2.0f};
  const auto all = top_probabilities(logits.data(), 4, 4);
  for (const TokenOdds& listed : all) {
    const TokenOdds alone = Softmax(logits.data(), 4).odds(listed.token);
    EXPECT_EQ(alone.token, listed.token);
    EXPECT_EQ(alone.probability, listed.probability);
    EXPECT_EQ(alone.logprob, listed.logprob);
  }
  const TokenOdds unlikely = Softmax(logits.data(), 4).odds(2);
  EXPECT_EQ(unlikely.probability, 0.0f);
  double denominator = 0.0;
  for (float l : logits) denominator += std::exp(double(l) - 3.0);
  EXPECT_NEAR(unlikely.logprob, -2003.0 - std::log(denominator), 1e-3);
  EXPECT_THROW(Softmax(logits.data(), 4).odds(4), std::out_of_range);
  EXPECT_THROW(Softmax(logits.data(), 4).odds(-1), std::out_of_range);
  EXPECT_THROW(Softmax(logits.data(), 0), std::invalid_argument);
}

}  // namespace
}  // namespace tilefire
