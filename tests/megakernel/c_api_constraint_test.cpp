// The C API's constrained decoding (tilefire_generate_request.allowed_tokens, json_object or json_schema
// with json_tokenizer and json_whitespace, regex, choices or grammar) against the C++ engine given the same constraint: the same
// tokens, whole calls and batches; a JSON reply over a tokenizer and over a model's byte tokens; refusals
// named.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/c_api_calls.h"
#include "tests/common/cli_runner.h"
#include "tests/common/json_reply.h"
#include "tests/common/serve_client.h"
#include "tilefire/engine.h"
#include "tilefire/json_constraint.h"
#include "tilefire/json_schema.h"
#include "tilefire/reply_grammar.h"
#include "tilefire/reply_pattern.h"
#include "tilefire/tilefire.h"
#include "tilefire/tokenizer.h"

namespace tilefire::testing {
namespace {

// A request initialised with its defaults, for `prompt` (which must outlive it).
tilefire_generate_request c_request(const std::vector<int32_t>& prompt) {
  tilefire_generate_request request;
  tilefire_generate_request_init(&request);
  request.prompt = prompt.data();
  request.prompt_count = prompt.size();
  return request;
}

// Tokens t with (t + reply length) % 4 == 1: a set that moves each step. Counts its calls in user_data.
void every_fourth(void* user_data, const int32_t*, size_t generated_count, uint8_t* allowed, size_t vocab) {
  ++*static_cast<int*>(user_data);
  for (size_t t = 0; t < vocab; ++t) allowed[t] = (t + generated_count) % 4 == 1 ? 1 : 0;
}

TEST(CApiConstraint, AllowedTokensGiveTheCppEnginesReply) {
  const std::vector<int32_t> prompt = {12, 40, 7, 99};
  GenerateRequest cpp_request;
  cpp_request.prompt = prompt;
  cpp_request.max_new_tokens = 10;
  cpp_request.stop_at_eos = false;
  cpp_request.allowed_tokens = [](const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
    int ignored = 0;
    every_fourth(&ignored, generated.data(), generated.size(), allowed.data(), allowed.size());
  };
  Engine cpp = cpp_sample();
  const std::vector<int32_t> expected = cpp.generate(cpp_request).tokens;
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ((size_t(expected[i]) + i) % 4, 1u) << i;

  CEngine c;
  int calls = 0;
  tilefire_generate_request request = c_request(prompt);
  request.max_new_tokens = 10;
  request.stop_at_eos = 0;
  request.allowed_tokens = every_fourth;
  request.user_data = &calls;
  tilefire_generate_result result = empty_result();
  ASSERT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(std::vector<int32_t>(result.tokens, result.tokens + result.token_count), expected);
  tilefire_generate_result_free(&result);

  const CEngine batching(2, nullptr, 2);
  const tilefire_generate_request requests[2] = {request, request};
  tilefire_generate_result results[2] = {empty_result(), empty_result()};
  ASSERT_EQ(tilefire_generate_batch(batching.engine, requests, 2, results), TILEFIRE_OK) << tilefire_last_error();
  for (tilefire_generate_result& r : results) {
    EXPECT_EQ(std::vector<int32_t>(r.tokens, r.tokens + r.token_count), expected) << "in a batch";
    tilefire_generate_result_free(&r);
  }
}

// The text model's folder and its tokenizer, opened for the C++ engine and through the C API.
struct TextModelTokenizer {
  TempDir dir;
  std::filesystem::path model;
  Tokenizer cpp;
  tilefire_tokenizer* c = nullptr;
  explicit TextModelTokenizer(const std::string& name) : dir(name), model(text_model(dir)), cpp((model / "tokenizer.json").string()) {
    EXPECT_EQ(tilefire_tokenizer_open((model / "tokenizer.json").string().c_str(), &c), TILEFIRE_OK) << tilefire_last_error();
  }
  ~TextModelTokenizer() { tilefire_tokenizer_free(c); }
};

// A C++ request sampling at 0.8 with `seed`.
GenerateRequest sampled_request(const std::vector<int32_t>& prompt, uint32_t max_new_tokens, uint64_t seed) {
  GenerateRequest request;
  request.prompt = prompt;
  request.max_new_tokens = max_new_tokens;
  request.sampling.temperature = 0.8f;
  request.sampling.seed = seed;
  return request;
}

// json_object (schema null) or json_schema, with a whitespace bound: over the text model's tokenizer and,
// with json_tokenizer NULL, over the sample's byte tokens; the same reply as the C++ engine's
// constrain_to_json or constrain_to_json_schema, a JSON object where it stopped.
void expect_cpp_engines_json_replies(const char* schema, uint32_t whitespace) {
  const TextModelTokenizer text("c-api-json");
  const std::filesystem::path& model = text.model;
  const Tokenizer& cpp_tokenizer = text.cpp;
  tilefire_tokenizer* const c_tokenizer = text.c;
  ASSERT_NE(c_tokenizer, nullptr);
  uint32_t ended = 0;
  for (const bool with_tokenizer : {true, false}) {
    SCOPED_TRACE(with_tokenizer ? "the text model's tokenizer" : "the sample's byte tokens");
    EngineOptions cpp_options;
    cpp_options.threads = 2;
    if (with_tokenizer) cpp_options.model_dir = model.string();
    Engine cpp(cpp_options);
    const std::vector<int32_t> prompt = with_tokenizer ? cpp_tokenizer.encode("JSON:") : std::vector<int32_t>{9, 10};
    CEngine c(2, with_tokenizer ? cpp_options.model_dir.c_str() : nullptr);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      GenerateRequest cpp_request = sampled_request(prompt, 30, seed);
      auto trie = std::make_shared<const TokenTrie>(vocabulary_bytes(with_tokenizer ? &cpp_tokenizer : nullptr, cpp.model().vocab));
      if (schema) constrain_to_json_schema(cpp_request, std::move(trie), JsonSchema::compile(schema), whitespace);
      else constrain_to_json(cpp_request, std::move(trie), JsonTop::object, whitespace);
      const GenerateResult expected = cpp.generate(cpp_request);

      tilefire_generate_request request = c_request(prompt);
      request.max_new_tokens = 30;
      request.temperature = 0.8f;
      request.seed = seed;
      request.json_object = schema ? 0 : 1;
      request.json_schema = schema;
      request.json_whitespace = whitespace;
      request.json_tokenizer = with_tokenizer ? c_tokenizer : nullptr;
      tilefire_generate_result result = empty_result();
      ASSERT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
      const std::vector<int32_t> tokens(result.tokens, result.tokens + result.token_count);
      EXPECT_EQ(tokens, expected.tokens) << "seed " << seed;
      EXPECT_EQ(std::string(result.finish_reason), expected.finish_reason);
      const std::string text = with_tokenizer ? cpp_tokenizer.continuation(prompt, tokens) : bytes_text(tokens);
      ended += expect_json_object_or_prefix(text, std::string(result.finish_reason) == "stopped") ? 1 : 0;
      tilefire_generate_result_free(&result);
    }
  }
  EXPECT_GT(ended, 0u) << "no reply ended: the check of whole replies never ran";
}

TEST(CApiConstraint, JsonObjectGivesTheCppEnginesReply) { expect_cpp_engines_json_replies(nullptr, kMostJsonWhitespace); }
TEST(CApiConstraint, CompactJsonObjectGivesTheCppEnginesReply) { expect_cpp_engines_json_replies(nullptr, 0); }
TEST(CApiConstraint, JsonSchemaGivesTheCppEnginesReply) {
  expect_cpp_engines_json_replies(R"({"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 3}},
                                      "required": ["n", "s"]})", 0);
}

// regex or choices (API version 11) and grammar (version 12) over the text model's tokenizer: the C++
// engine's reply with constrain_to_pattern or constrain_to_grammar (its eos allowed where the text is
// whole), which matches where it stopped.
TEST(CApiConstraint, RegexChoicesAndGrammarGiveTheCppEnginesReply) {
  const TextModelTokenizer text("c-api-pattern");
  const Tokenizer& cpp_tokenizer = text.cpp;
  ASSERT_NE(text.c, nullptr);
  EngineOptions cpp_options;
  cpp_options.threads = 2;
  cpp_options.model_dir = text.model.string();
  Engine cpp(cpp_options);
  CEngine c(2, cpp_options.model_dir.c_str());
  const std::vector<int32_t> prompt = cpp_tokenizer.encode("Code:");
  const char* const regex = "[a-f]{2,5}-\\d{1,3}";
  const char* const choices[] = {"red", "green", "blue-green"};
  const char* const gbnf = "root ::= code (\",\" code)?\ncode ::= [a-f]{2,5} \"-\" [0-9]{1,3}";
  uint32_t ended = 0;
  for (const char* held : {"regex", "choices", "grammar"}) {
    const std::string kind = held;
    const auto pattern = kind == "regex" ? ReplyPattern::compile(regex) : ReplyPattern::of_choices({choices[0], choices[1], choices[2]});
    const auto grammar = ReplyGrammar::compile(gbnf);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      GenerateRequest cpp_request = sampled_request(prompt, 20, seed);
      auto tokens = std::make_shared<const TokenTrie>(vocabulary_bytes(&cpp_tokenizer, cpp.model().vocab));
      if (kind == "grammar") constrain_to_grammar(cpp_request, tokens, grammar, cpp.model().eos_tokens);
      else constrain_to_pattern(cpp_request, tokens, pattern, cpp.model().eos_tokens);
      const GenerateResult expected = cpp.generate(cpp_request);

      tilefire_generate_request request = c_request(prompt);
      request.max_new_tokens = 20;
      request.temperature = 0.8f;
      request.seed = seed;
      request.regex = kind == "regex" ? regex : nullptr;
      request.choices = kind == "choices" ? choices : nullptr;
      request.choice_count = kind == "choices" ? 3 : 0;
      request.grammar = kind == "grammar" ? gbnf : nullptr;
      request.json_tokenizer = text.c;
      tilefire_generate_result result = empty_result();
      ASSERT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
      std::vector<int32_t> tokens_out(result.tokens, result.tokens + result.token_count);
      EXPECT_EQ(tokens_out, expected.tokens) << kind << ", seed " << seed;
      EXPECT_EQ(std::string(result.finish_reason), expected.finish_reason);
      if (std::string(result.finish_reason) != "length") {
        if (std::string(result.finish_reason) == "eos") tokens_out.pop_back();  // the eos token: no text of the reply
        const std::string reply = cpp_tokenizer.continuation(prompt, tokens_out);
        EXPECT_TRUE(kind == "grammar" ? grammar->matches(reply) : pattern->matches(reply)) << kind << ": " << reply;
        ++ended;
      }
      tilefire_generate_result_free(&result);
    }
  }
  EXPECT_GE(ended, 4u);
}

// A batched step whose request's constraint leaves nothing to choose fails with TILEFIRE_ERROR_INPUT,
// tilefire_engine_failed_sequence names that sequence, and the other steps on to the reply it has alone.
TEST(CApiConstraint, ASequenceWithNothingToChooseIsNamed) {
  const CEngine batching(2, nullptr, 2);
  tilefire_engine* const engine = batching.engine;
  const std::vector<int32_t> prompt = {12, 40, 7, 99};
  int calls = 0;
  tilefire_generate_request good = c_request(prompt);
  good.max_new_tokens = 8;
  good.stop_at_eos = 0;
  good.allowed_tokens = every_fourth;
  good.user_data = &calls;
  tilefire_generate_request bad = good;
  bad.allowed_tokens = [](void*, const int32_t*, size_t generated_count, uint8_t* allowed, size_t vocab) {
    if (generated_count < 2) std::fill(allowed, allowed + vocab, uint8_t(1));
  };
  uint64_t good_id = 0, bad_id = 0;
  ASSERT_EQ(tilefire_engine_add_sequence(engine, &bad, &bad_id), TILEFIRE_OK) << tilefire_last_error();
  ASSERT_EQ(tilefire_engine_add_sequence(engine, &good, &good_id), TILEFIRE_OK) << tilefire_last_error();
  uint32_t unfinished = 2;
  bool named = false;
  for (int step = 0; step < 20 && unfinished > 0; ++step) {
    const tilefire_status status = tilefire_engine_step_sequences(engine, &unfinished);
    if (status == TILEFIRE_OK) continue;
    expect_refused(status, TILEFIRE_ERROR_INPUT, "allowed no token");
    int failed = 0;
    uint64_t sequence = 0;
    ASSERT_EQ(tilefire_engine_failed_sequence(engine, &failed, &sequence), TILEFIRE_OK);
    EXPECT_EQ(failed, 1);
    EXPECT_EQ(sequence, bad_id);
    tilefire_generate_result removed = empty_result();
    ASSERT_EQ(tilefire_engine_remove_sequence(engine, bad_id, &removed), TILEFIRE_OK) << tilefire_last_error();
    EXPECT_EQ(removed.token_count, 2u);
    tilefire_generate_result_free(&removed);
    named = true;
    unfinished = 1;
  }
  EXPECT_TRUE(named);
  tilefire_generate_result result = empty_result();
  ASSERT_EQ(tilefire_engine_remove_sequence(engine, good_id, &result), TILEFIRE_OK) << tilefire_last_error();
  const std::vector<int32_t> tokens(result.tokens, result.tokens + result.token_count);
  tilefire_generate_result_free(&result);
  tilefire_generate_result alone = empty_result();
  ASSERT_EQ(tilefire_generate_batch(engine, &good, 1, &alone), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(tokens, std::vector<int32_t>(alone.tokens, alone.tokens + alone.token_count));
  tilefire_generate_result_free(&alone);
}

TEST(CApiConstraint, RefusalsAreNamed) {
  CEngine c;
  const std::vector<int32_t> prompt = {5, 6};
  tilefire_generate_request request = c_request(prompt);
  int calls = 0;
  request.user_data = &calls;
  request.allowed_tokens = every_fourth;
  request.json_object = 1;
  tilefire_generate_result result = empty_result();
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "allowed_tokens and json_object both");
  request.json_object = 0;
  tilefire_tokenizer* tokenizer = reinterpret_cast<tilefire_tokenizer*>(&calls);  // never read: refused first
  request.json_tokenizer = tokenizer;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "json_tokenizer is set without json_object");
  request.json_tokenizer = nullptr;
  request.json_object = 1;
  request.allowed_tokens = nullptr;
  request.min_new_tokens = 1;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "min_new_tokens with json_object");
  request.json_object = 0;
  request.json_schema = R"({"type": "object"})";
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "min_new_tokens with json_schema");
  request.min_new_tokens = 0;
  request.json_object = 1;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "json_object and json_schema are both set");
  request.json_object = 0;
  request.json_schema = R"({"type": "string", "format": "date", "multipleOf": 3})";
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "request->json_schema: #: 'multipleOf' is not supported");
  request.json_schema = R"({"type": "object"})";
  request.json_whitespace = 33;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "json_whitespace is 33, more than 32");
  request.json_schema = nullptr;
  request.json_whitespace = 0;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "json_whitespace is set without json_object or json_schema");
  request.json_whitespace = kMostJsonWhitespace;
  request.regex = "(";
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "request->regex: ");
  request.regex = "(?<=a)b";
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "request->regex: lookbehind");
  request.json_whitespace = 0;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "json_whitespace is set without json_object or json_schema");
  request.json_whitespace = kMostJsonWhitespace;
  request.choice_count = 2;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "regex and choices are both set: give one");
  request.regex = nullptr;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "request->choices: is NULL with a count of 2");
  const char* const with_empty[] = {"a", ""};
  request.choices = with_empty;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "request->choices: choice 1 is empty");
  request.choice_count = 1;
  request.min_new_tokens = 1;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "min_new_tokens with choices: the reply ends where its pattern lets it");
  request.min_new_tokens = 0;
  request.grammar = "root ::= \"a\"";
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "choices and grammar are both set: give one");
  request.choices = nullptr;
  request.choice_count = 0;
  request.grammar = "root ::= x";
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "request->grammar: line 1, column 10: rule 'x' is used but not defined");
  request.grammar = "root ::= \"a\"+";
  request.min_new_tokens = 1;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "min_new_tokens with grammar: the reply ends where its grammar lets it");
  request.min_new_tokens = 0;
  request.grammar = nullptr;
  request.allowed_tokens = [](void*, const int32_t*, size_t, uint8_t*, size_t) {};
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "allowed no token");
  EXPECT_EQ(result.tokens, nullptr);  // untouched
}

}  // namespace
}  // namespace tilefire::testing
