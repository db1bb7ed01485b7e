// The step-level API under random call sequences: on random shapes and settings
// (tests/common/random_shapes.h) with a small context, one engine takes a seeded run of resets, prefills
// of 1 to 200 tokens (across the 128-token chunk), decodes, greedy decodes, schedule switches, whole
// generate() calls, and calls that must be refused (a token outside the vocabulary, a step past the
// context). A double-precision reference mirrors every accepted call. After each call the engine's
// position and sequence() are the mirror's; its logits are within 1e-4 of the reference's largest, and a greedy token is
// the reference's where the winner is clear, as are generate()'s greedy tokens; every probability it
// reports (logprobs, greedy or sampled) is the reference's softmax within 1e-4. A refused call leaves
// position() where it was, and the sequence goes on from there. rewind() and generate() with
// reuse_prefix (a prompt that begins with part of the sequence) go on from a kept prefix: their logits
// and greedy tokens are the reference's rewound to the same place. TILEFIRE_RANDOM_SHAPES=N runs N seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tests/common/compare.h"
#include "tests/common/random_shapes.h"
#include "tests/common/reference_model.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

// The reference's greedy token when it wins by a clear margin (1e-3 of the largest logit), else -1:
// within the engine's 1e-4 tolerance two near-equal logits may rank either way.
int32_t clear_greedy_token(const std::vector<double>& logits) {
  std::vector<size_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  double scale = 0;
  for (double v : logits) scale = std::max(scale, std::fabs(v));
  return logits[order[0]] - logits[order[1]] > 1e-3 * scale ? int32_t(order[0]) : -1;
}

class EngineSequences : public ::testing::TestWithParam<uint64_t> {};

TEST_P(EngineSequences, FollowTheReferenceThroughRandomCalls) {
  const uint64_t seed = GetParam();
  RandomCase c = draw_random_case(seed);
  c.options.max_context = uint32_t(24 + seed * 37 % 200);  // small, so steps past it come up
  SCOPED_TRACE(c.description + ", context " + std::to_string(c.options.max_context));
  TempDir dir("engine-sequence-" + std::to_string(seed));
  write_test_model(c.spec, dir.path(), c.dtype);
  c.options.model_dir = dir.path().string();
  const LoadedModel loaded = load_hf_model(dir.path());
  ReferenceModel reference(loaded.spec, loaded.weights);
  Engine engine(c.options);
  const uint32_t vocab = c.spec.vocab, context = c.options.max_context;

  std::mt19937_64 rng(seed * 7919 + 1);
  auto below = [&](uint64_t n) { return uint32_t(rng() % n); };
  auto tokens = [&](uint32_t count) {
    std::vector<int32_t> out(count);
    for (int32_t& t : out) t = int32_t(below(vocab));
    return out;
  };
  uint32_t position = 0;     // the mirror's
  std::vector<int32_t> fed;  // the tokens the mirror holds
  for (int call = 0; call < 30 && !::testing::Test::HasFailure(); ++call) {
    const uint32_t kind = below(12);
    std::string what;
    if (kind == 0) {
      what = "reset";
      engine.reset();
      reference.reset();
      position = 0;
      fed.clear();
    } else if (kind == 10) {
      const uint32_t to = below(position + 1);
      what = "rewind to " + std::to_string(to) + " of " + std::to_string(position);
      EXPECT_THROW(engine.rewind(position + 1), InputError) << what;
      engine.rewind(to);
      reference.rewind(to);
      position = to;
      fed.resize(to);
    } else if (kind == 11) {  // generate() reusing the part of the sequence its prompt begins with
      GenerateRequest request;
      const uint32_t kept_part = std::min<uint32_t>(below(position + 1), context - 5);
      request.prompt.assign(fed.begin(), fed.begin() + kept_part);
      for (int32_t t : tokens(1 + below(4))) request.prompt.push_back(t);
      request.max_new_tokens = 1 + below(3);
      request.stop_at_eos = false;
      request.reuse_prefix = true;
      uint32_t expected_reuse = 0;
      while (expected_reuse < fed.size() && expected_reuse + 1 < request.prompt.size() && fed[expected_reuse] == request.prompt[expected_reuse])
        ++expected_reuse;
      what = "greedy generate from " + std::to_string(request.prompt.size()) + " tokens reusing " + std::to_string(expected_reuse);
      const GenerateResult result = engine.generate(request);
      EXPECT_EQ(result.reused_tokens, expected_reuse) << what;
      reference.rewind(expected_reuse);
      std::vector<double> logits = reference.forward(std::vector<int32_t>(request.prompt.begin() + expected_reuse, request.prompt.end()));
      for (size_t i = 0; i < result.tokens.size(); ++i) {
        const int32_t expected = clear_greedy_token(logits);
        if (expected < 0) break;  // a near tie: the two may go different ways from here
        EXPECT_EQ(result.tokens[i], expected) << what << ", token " << i;
        if (result.tokens[i] != expected) break;
        logits = reference.forward({result.tokens[i]});
      }
      // The cache holds the prompt and every generated token but the last: the mirror rebuilt so.
      fed = request.prompt;
      if (!result.tokens.empty()) fed.insert(fed.end(), result.tokens.begin(), result.tokens.end() - 1);
      reference.reset();
      reference.forward(fed);
      position = uint32_t(fed.size());
    } else if (kind <= 2) {
      const uint32_t lengths[] = {1, 2, 5, 8, 127, 128, 129, below(200) + 1};
      const std::vector<int32_t> prompt = tokens(lengths[below(std::size(lengths))]);
      what = "prefill of " + std::to_string(prompt.size()) + " at " + std::to_string(position);
      if (position + prompt.size() > context) {
        EXPECT_THROW(engine.prefill(prompt), InputError) << what << " past the context";
      } else {
        expect_logits_match_reference(engine.prefill(prompt), reference.forward(prompt), what);
        position += uint32_t(prompt.size());
        fed.insert(fed.end(), prompt.begin(), prompt.end());
      }
    } else if (kind <= 5) {
      const int32_t token = int32_t(below(vocab));
      const bool greedy = kind == 5;
      what = std::string(greedy ? "decode_greedy" : "decode") + " at " + std::to_string(position);
      if (position + 1 > context) {
        EXPECT_THROW(greedy ? (void)engine.decode_greedy(token) : (void)engine.decode(token), InputError) << what << " past the context";
      } else if (greedy) {
        const int32_t got = engine.decode_greedy(token);
        const int32_t expected = clear_greedy_token(reference.forward({token}));
        if (expected >= 0) { EXPECT_EQ(got, expected) << what; }
        ++position;
        fed.push_back(token);
      } else {
        expect_logits_match_reference(engine.decode(token), reference.forward({token}), what);
        ++position;
        fed.push_back(token);
      }
    } else if (kind == 6) {  // a token outside the vocabulary (a step past the context is refused anyway)
      std::vector<int32_t> prompt = tokens(1 + below(4));
      prompt[below(uint32_t(prompt.size()))] = below(2) ? int32_t(vocab) : -1;
      what = "a step with a token outside the vocabulary";
      const std::string message = message_of<InputError>(
          [&] { prompt.size() == 1 ? (void)engine.decode(prompt[0]) : (void)engine.prefill(prompt); });
      if (position + prompt.size() <= context) { EXPECT_NE(message.find("vocabulary"), std::string::npos) << what << ": " << message; }
    } else if (kind == 7) {
      const Schedule schedule = below(2) ? Schedule::bsp : Schedule::dataflow;
      what = schedule == Schedule::bsp ? "set_schedule(bsp)" : "set_schedule(dataflow)";
      engine.set_schedule(schedule);
    } else {  // generate(): a new sequence; greedy tokens and every reported probability the reference's
      GenerateRequest request;
      request.prompt = tokens(1 + below(std::min<uint32_t>(context - 1, 12)));
      request.max_new_tokens = 1 + below(4);
      request.stop_at_eos = false;
      request.logprobs = below(3);
      const bool sampled = below(3) == 0;
      if (sampled) request.sampling = {.temperature = 0.8f, .top_k = below(2) ? 5u : 0u, .top_p = below(2) ? 0.9f : 1.0f, .seed = seed + uint64_t(call)};
      what = std::string(sampled ? "sampled" : "greedy") + " generate from " + std::to_string(request.prompt.size()) +
             " tokens with " + std::to_string(request.logprobs) + " logprobs";
      std::vector<int32_t> streamed;  // on_token sees every token, in order, as it comes
      request.on_token = [&](int32_t token) { streamed.push_back(token); };
      const GenerateResult result = engine.generate(request);
      EXPECT_EQ(streamed, result.tokens) << what;
      const uint32_t room = context - uint32_t(request.prompt.size()) + 1;  // the last token is never fed back
      EXPECT_EQ(result.tokens.size(), std::min(request.max_new_tokens, room)) << what;
      ASSERT_EQ(result.logprobs.size(), request.logprobs ? result.tokens.size() : 0u) << what;
      reference.reset();
      std::vector<double> logits = reference.forward(request.prompt);
      for (size_t i = 0; i < result.tokens.size(); ++i) {
        const int32_t token = result.tokens[i];
        ASSERT_TRUE(token >= 0 && uint32_t(token) < vocab) << what;
        if (request.logprobs) {  // the reported probabilities: the reference's softmax, in falling order
          const double top = *std::max_element(logits.begin(), logits.end());
          double sum = 0;
          for (double v : logits) sum += std::exp(v - top);
          ASSERT_EQ(result.logprobs[i].size(), std::min<size_t>(request.logprobs, vocab)) << what;
          for (size_t k = 0; k < result.logprobs[i].size(); ++k) {
            const TokenProbability& reported = result.logprobs[i][k];
            EXPECT_NEAR(reported.probability, std::exp(logits[size_t(reported.token)] - top) / sum, 1e-4) << what << ", position " << i;
            if (k > 0) { EXPECT_LE(reported.probability, result.logprobs[i][k - 1].probability) << what; }
          }
        }
        const int32_t expected = clear_greedy_token(logits);
        if (!sampled && expected >= 0) { EXPECT_EQ(token, expected) << what; }
        if (!sampled && token != expected) break;  // a near tie: the two may go different ways from here
        logits = reference.forward({token});  // a sampled token is followed as it came
      }
      engine.reset();  // generate() leaves its sequence in the cache: start the mirror afresh
      reference.reset();
      position = 0;
      fed.clear();
    }
    ASSERT_EQ(engine.position(), position) << "after call " << call << ": " << what;
    ASSERT_EQ(engine.sequence(), fed) << "after call " << call << ": " << what;
  }
}

// 12 seeds by default (a few seconds); TILEFIRE_RANDOM_SHAPES=N runs seeds 1 to N.
INSTANTIATE_TEST_SUITE_P(Seeds, EngineSequences, ::testing::Range<uint64_t>(1, random_case_count(12) + 1));

}  // namespace
}  // namespace tilefire::testing
