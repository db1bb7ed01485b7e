// GenerateRequest::allowed_tokens (constrained decoding) in the engine: greedy replies against a reference
// on the step API that takes the argmax among the allowed tokens of each step's raw logits; the same reply
// from generate(), generate_batch, add_sequence with prompt chunks in the decode steps and speculation;
// sampled tokens always allowed and logprobs the model's own; refusals when nothing is left to choose.
// Then a JSON reply (constrain_to_json) over a byte-level tokenizer: every reply is JSON or, cut by
// max_new_tokens, a prefix of it, by nlohmann::json's parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/json_reply.h"
#include "tests/common/serve_client.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"
#include "tilefire/json_constraint.h"
#include "tilefire/tokenizer.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

// Tokens t with (t + reply length) divisible by 3, or t below 4: a set that moves each step, so a
// reply that ignored it would differ from the reference at once.
bool rotating_rule(int32_t token, size_t generated) { return (size_t(token) + generated) % 3 == 0 || token < 4; }
void rotating_allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
  for (size_t t = 0; t < allowed.size(); ++t) allowed[t] = rotating_rule(int32_t(t), generated.size()) ? 1 : 0;
}

using Rule = bool (*)(int32_t token, size_t generated);

// Greedy among the tokens `rule` allows, on the step API's raw logits.
std::vector<int32_t> reference(Engine& engine, const GenerateRequest& request, Rule rule = rotating_rule) {
  engine.reset();
  std::vector<float> logits = engine.prefill(request.prompt);
  std::vector<int32_t> reply;
  while (reply.size() < request.max_new_tokens) {
    int32_t best = -1;
    for (size_t t = 0; t < logits.size(); ++t)
      if (rule(int32_t(t), reply.size()) && (best < 0 || logits[t] > logits[size_t(best)])) best = int32_t(t);
    reply.push_back(best);
    if (reply.size() < request.max_new_tokens) logits = engine.decode(best);
  }
  return reply;
}

GenerateRequest rotating_request(std::vector<int32_t> prompt) {
  GenerateRequest request;
  request.prompt = std::move(prompt);
  request.max_new_tokens = 12;
  request.stop_at_eos = false;
  request.allowed_tokens = rotating_allowed;
  return request;
}

TEST(AllowedTokens, GreedyTakesTheBestAllowedTokenOnEveryPath) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 3;
  options.prefill_chunk = 4;
  Engine engine(options);
  GenerateRequest request = rotating_request({12, 40, 7, 99, 5, 61, 33});
  const std::vector<int32_t> expected = reference(engine, request);
  GenerateRequest free_request = request;
  free_request.allowed_tokens = nullptr;
  ASSERT_NE(engine.generate(free_request).tokens, expected) << "the rule changes nothing: the test could not tell";

  EXPECT_EQ(engine.generate(request).tokens, expected) << "generate()";
  GenerateRequest other = rotating_request({3, 4, 5});
  std::vector<GenerateResult> batched = engine.generate_batch({request, other});
  EXPECT_EQ(batched[0].tokens, expected) << "generate_batch";
  EXPECT_EQ(batched[1].tokens, reference(engine, other)) << "generate_batch, the other request";

  // Speculation by prompt lookup: three tokens allowed, so the reply repeats itself and drafts are taken
  // and checked (each row's token chosen among the allowed).
  const Rule three = [](int32_t token, size_t) { return token >= 1 && token <= 3; };
  GenerateRequest speculating = rotating_request({7, 8, 9, 1, 2, 3, 1, 2});
  speculating.allowed_tokens = [three](const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
    for (size_t t = 0; t < allowed.size(); ++t) allowed[t] = three(int32_t(t), generated.size()) ? 1 : 0;
  };
  speculating.max_new_tokens = 24;
  speculating.speculation.draft_tokens = 3;
  speculating.speculation.min_ngram = 1;
  const std::vector<int32_t> speculated_expected = reference(engine, speculating, three);
  const GenerateResult speculated = engine.generate(speculating);
  EXPECT_EQ(speculated.tokens, speculated_expected) << "speculating";
  EXPECT_GT(speculated.draft_tokens, 0u);

  // In a batch, a speculating request's drafts checked in the batched steps, beside another request.
  const std::vector<GenerateResult> batched_speculation = engine.generate_batch({speculating, other});
  EXPECT_EQ(batched_speculation[0].tokens, speculated_expected) << "speculating in a batch";
  EXPECT_GT(batched_speculation[0].draft_tokens, 0u);
  EXPECT_EQ(batched_speculation[1].tokens, batched[1].tokens);

  // Continuous batching with prompts prefilled in chunks inside the decode steps.
  EngineOptions chunked = options;
  chunked.prefill_chunks_per_step = 1;
  Engine stepping(chunked);
  const uint64_t first = stepping.add_sequence(other);
  stepping.step_sequences();
  const uint64_t second = stepping.add_sequence(request);
  while (stepping.step_sequences() > 0) {
  }
  EXPECT_EQ(stepping.remove_sequence(second).tokens, expected) << "add_sequence, chunks in the decode steps";
  EXPECT_EQ(stepping.remove_sequence(first).tokens, batched[1].tokens);
}

// Sampled: every token allowed, the callback asked with the reply so far before each; the logprobs stay
// the model's own (the first token's are those of an unconstrained request's first token).
TEST(AllowedTokens, SampledTokensAreAllowedAndLogprobsStayTheModels) {
  EngineOptions options;
  options.threads = 2;
  Engine engine(options);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    GenerateRequest request = rotating_request({12, 40, 7});
    request.sampling.temperature = 1.5f;
    request.sampling.seed = seed;
    request.logprobs = 3;
    std::vector<size_t> asked;
    request.allowed_tokens = [&](const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
      asked.push_back(generated.size());
      rotating_allowed(generated, allowed);
    };
    const GenerateResult result = engine.generate(request);
    ASSERT_EQ(result.tokens.size(), 12u);
    for (size_t i = 0; i < result.tokens.size(); ++i) {
      EXPECT_TRUE(rotating_rule(result.tokens[i], i)) << "seed " << seed << ", token " << i << ": " << result.tokens[i];
      EXPECT_EQ(asked[i], i);
    }
    GenerateRequest free_request = request;
    free_request.allowed_tokens = nullptr;
    free_request.max_new_tokens = 1;
    const GenerateResult free_result = engine.generate(free_request);
    ASSERT_EQ(result.logprobs[0].size(), free_result.logprobs[0].size());
    for (size_t k = 0; k < free_result.logprobs[0].size(); ++k) {
      EXPECT_EQ(result.logprobs[0][k].token, free_result.logprobs[0][k].token);
      EXPECT_EQ(result.logprobs[0][k].logprob, free_result.logprobs[0][k].logprob);
    }
  }
}

TEST(AllowedTokens, NothingLeftToChooseIsRefused) {
  EngineOptions options;
  options.threads = 1;
  options.sequences = 2;
  Engine engine(options);
  GenerateRequest request = rotating_request({12, 40});
  const auto expect_refused = [&](const GenerateRequest& r, const std::string& named) {
    try {
      engine.generate(r);
      ADD_FAILURE() << "generate() took it; expected " << named;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
    EXPECT_THROW(engine.generate_batch({r, rotating_request({3})}), InputError) << named;
  };
  GenerateRequest none = request;
  none.allowed_tokens = [](const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
    if (generated.size() == 2) std::fill(allowed.begin(), allowed.end(), 0);
    else allowed[5] = 1;
  };
  expect_refused(none, "allowed_tokens, asked for generated token 2, allowed no token");
  GenerateRequest resized = request;
  resized.allowed_tokens = [](const std::vector<int32_t>&, std::vector<uint8_t>& allowed) { allowed.resize(3, 1); };
  expect_refused(resized, "resized its list");
  GenerateRequest only_ending = request;
  only_ending.stop_tokens = {5};
  only_ending.min_new_tokens = 2;
  only_ending.allowed_tokens = [](const std::vector<int32_t>&, std::vector<uint8_t>& allowed) { allowed[5] = 1; };
  expect_refused(only_ending, "min_new_tokens");
  // The engine goes on.
  EXPECT_EQ(engine.generate(request).tokens, reference(engine, request));
}

// With continuous batching, a sequence whose constraint leaves nothing to choose fails alone: a
// SequenceError naming it, at a decode row and where its prompt's last chunk gives its first token (in the
// decode step's program, or in a prefill step of its own); it is finished (no step feeds it again) and,
// removed, leaves the other's reply what it is alone, whether it came before or after it in the step. A
// prompt prefilled whole by add_sequence fails there, its sequence never in.
TEST(AllowedTokens, ASequenceWithNothingToChooseFailsAlone) {
  struct Setting {
    const char* name;
    uint32_t chunks_per_step;
    bool in_decode_step;
  };
  for (const Setting setting : {Setting{"chunk in the decode step", 1, true}, Setting{"chunks apart", 1, false},
                                Setting{"prompts whole", 0, true}}) {
    EngineOptions options;
    options.threads = 2;
    options.sequences = 3;
    options.prefill_chunk = 4;
    options.prefill_chunks_per_step = setting.chunks_per_step;
    options.prefill_in_decode_step = setting.in_decode_step;
    Engine engine(options);
    const GenerateRequest good = rotating_request({12, 40, 7, 99, 5});
    const std::vector<int32_t> expected = reference(engine, good);
    for (const size_t failing_at : {size_t(0), size_t(3)}) {  // its first token (the prompt's end), a decode row
      for (const bool bad_first : {true, false}) {
        SCOPED_TRACE(std::string(setting.name) + ", failing at generated token " + std::to_string(failing_at) +
                     (bad_first ? ", added first" : ", added second"));
        GenerateRequest failing = rotating_request({3, 4, 5, 6, 7, 8});
        failing.allowed_tokens = [failing_at](const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
          if (generated.size() != failing_at) rotating_allowed(generated, allowed);
        };
        const bool fails_when_added = setting.chunks_per_step == 0 && failing_at == 0;
        uint64_t first = 0, bad = 0;
        bool failed = false;
        const auto add_bad = [&] {
          try {
            bad = engine.add_sequence(failing);
          } catch (const InputError& e) {
            EXPECT_TRUE(fails_when_added) << e.what();
            EXPECT_EQ(std::string(e.what()).rfind("GenerateRequest::allowed_tokens", 0), 0u) << "no sequence named: " << e.what();
            failed = true;
          }
        };
        if (bad_first) add_bad();
        first = engine.add_sequence(good);
        if (!bad_first) add_bad();
        for (int step = 0; step < 40 && engine.sequences_in() > 0; ++step) {
          try {
            if (engine.step_sequences() == 0) break;
          } catch (const SequenceError& e) {
            EXPECT_EQ(e.sequence, bad) << e.what();
            EXPECT_NE(std::string(e.what()).find("allowed no token"), std::string::npos) << e.what();
            EXPECT_TRUE(engine.sequence_finished(bad));
            EXPECT_EQ(engine.remove_sequence(bad).tokens.size(), failing_at);
            failed = true;
          }
        }
        EXPECT_TRUE(failed);
        EXPECT_EQ(engine.remove_sequence(first).tokens, expected);
        if (!failed && engine.sequences_in() > 0) engine.remove_sequence(bad);
      }
    }
  }
}

// A JSON object reply over the text model's byte-level tokenizer: sampled replies are JSON objects when they
// end ("stopped" where the object closes) and prefixes of one when max_new_tokens cuts them; a logit bias
// towards "}" makes the greedy reply "{}" in two tokens.
TEST(AllowedTokens, JsonRepliesAreJson) {
  const TempDir dir("allowed-tokens");
  const std::filesystem::path model = text_model(dir);
  const Tokenizer tokenizer((model / "tokenizer.json").string());
  // The model's vocabulary (512) is past the tokenizer's (263): ids past the tokenizer's have no bytes.
  EXPECT_EQ(vocabulary_bytes(&tokenizer, 512).size(), 263u);
  EXPECT_EQ(vocabulary_bytes(&tokenizer, 100).size(), 100u);  // cut to a smaller model's
  EXPECT_EQ(vocabulary_bytes(nullptr, 512).size(), 256u);     // without a tokenizer: the byte tokens
  EXPECT_EQ(vocabulary_bytes(nullptr, 100).size(), 100u);
  EXPECT_EQ(vocabulary_bytes(nullptr, 512)[123], "{");
  const auto trie = std::make_shared<const TokenTrie>(vocabulary_bytes(&tokenizer, 512));
  EngineOptions options;
  options.model_dir = model.string();
  options.threads = 2;
  Engine engine(options);
  const std::vector<int32_t> prompt = tokenizer.encode("reply in JSON:");
  uint32_t ended = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    GenerateRequest request;
    request.prompt = prompt;
    request.max_new_tokens = 40;
    request.sampling.temperature = 0.8f;
    request.sampling.seed = seed;
    constrain_to_json(request, trie);
    const GenerateResult result = engine.generate(request);
    const std::string text = tokenizer.continuation(prompt, result.tokens);
    EXPECT_TRUE(result.finish_reason == "stopped" || result.finish_reason == "length") << result.finish_reason;
    ended += expect_json_object_or_prefix(text, result.finish_reason == "stopped") ? 1 : 0;
  }
  GenerateRequest closing;
  closing.prompt = prompt;
  closing.max_new_tokens = 40;
  closing.sampling.logit_bias = {{int32_t('{'), 100.0f}, {int32_t('}'), 100.0f}};
  constrain_to_json(closing, trie);
  const GenerateResult closed = engine.generate(closing);
  EXPECT_EQ(tokenizer.continuation(prompt, closed.tokens), "{}");
  EXPECT_EQ(closed.finish_reason, "stopped");
  EXPECT_GT(ended, 0u) << "no sampled reply ended: the check of whole replies never ran";
}

}  // namespace
}  // namespace tilefire::testing
