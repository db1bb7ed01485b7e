// Replies held to a regular expression or to choices, end to end: `tilefire serve` with vLLM's
// structured_outputs {"regex": R} / {"choice": [...]} (completions and chats, whole and streamed, in turn,
// batched and speculating) and `tilefire run --regex / --choices`. Every reply that ends ("stop") is matched
// whole by std::regex (ECMAScript, an independent matcher) or is one of the choices; one max_tokens cuts
// is a prefix the automaton still takes. Misuses are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/serve_client.h"
#include "tilefire/reply_pattern.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

// An address ends by itself (nothing may follow "com" or "org"); the number may end at any digit by an
// ending token, or go on.
const char* const kAddress = "[a-z]{2,6}@example\\.(com|org)";
const char* const kNumber = "-?\\d{1,4}(\\.\\d{1,2})?";
const std::vector<std::string> kChoices = {"positive", "negative", "neutral (mixed)"};

// A reply that ended matches `regex` whole; one cut by max_tokens is a prefix of a match. True when it ended.
bool expect_match_or_prefix(const std::string& regex, std::string text, const std::string& finish_reason) {
  EXPECT_TRUE(finish_reason == "stop" || finish_reason == "length") << finish_reason;
  if (finish_reason == "stop") {
    // The tiny model's eos (id 2) is the byte 0x02 in the test tokenizer, not a special token, so a reply it
    // ends shows that byte (a real model's eos has no text): taken off before the match.
    if (!text.empty() && text.back() == '\x02') text.pop_back();
    EXPECT_TRUE(std::regex_match(text, std::regex(regex, std::regex::ECMAScript))) << regex << " on " << json(text).dump();
    return true;
  }
  const auto pattern = ReplyPattern::compile(regex);
  PatternReplyBytes state = pattern->start();
  EXPECT_TRUE(state.feed(text)) << regex << ": not a prefix of a match, " << json(text).dump();
  return false;
}

void pattern_replies(const std::vector<std::string>& extra) {
  TextModelServer served("serve-pattern", extra);
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  size_t ended = 0, chosen = 0;
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completion");
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "Your address?"}}}}} : json{{"prompt", "Address:"}};
    for (const char* regex : {kAddress, kNumber}) {
      body["structured_outputs"] = {{"regex", regex}};
      for (const ChoiceText& choice : sampled_choices(port, path, body, 24, 7)) ended += expect_match_or_prefix(regex, choice.text, choice.finish_reason);
    }
    body["structured_outputs"] = {{"choice", kChoices}};
    for (const ChoiceText& choice : sampled_choices(port, path, body, 40, 9)) {
      EXPECT_EQ(choice.finish_reason, "stop") << choice.text;
      EXPECT_NE(std::find(kChoices.begin(), kChoices.end(), choice.text), kChoices.end()) << json(choice.text).dump();
      ++chosen;
    }
  }
  EXPECT_GE(ended, 6u) << "too few replies ended for the check of whole matches to say much";
  EXPECT_EQ(chosen, 12u);
}

TEST(ServePattern, RegexAndChoiceRepliesMatch) { pattern_replies({}); }
TEST(ServePattern, BatchedRegexAndChoiceRepliesMatch) { pattern_replies({"--sequences", "3", "--prefill-chunk", "4"}); }
TEST(ServePattern, SpeculatingRegexAndChoiceRepliesMatch) { pattern_replies({"--speculate", "3"}); }

TEST(ServePattern, MisusesAreRefusedByName) {
  TextModelServer served("serve-pattern-refused", {});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"("structured_outputs": {"regex": "("})", "'structured_outputs' regex: "},
      {R"("structured_outputs": {"regex": "(?<=a)b"})", "'structured_outputs' regex: lookbehind"},
      {R"("structured_outputs": {"regex": ""})", "matches only the empty text"},
      {R"("structured_outputs": {"regex": 5})", "'structured_outputs' regex must be a string"},
      {R"("structured_outputs": {"choice": []})", "'structured_outputs' choice: no choice given"},
      {R"("structured_outputs": {"choice": ["a", ""]})", "choice 1 is empty"},
      {R"("structured_outputs": {"choice": "yes"})", "choice must be a list of strings"},
      {R"("structured_outputs": {"structural_tag": "{}"})", "has \"structural_tag\": Tilefire holds a reply to a regex, a choice, a json schema or a grammar"},
      {R"("structured_outputs": {"regex": "a", "choice": ["a"]})", "'structured_outputs' must be one of"},
      {R"("structured_outputs": {"json": {"type": "object", "propertyNames": {}}})", "'structured_outputs' json: json_schema: #: 'propertyNames' is not supported"},
      {R"("structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"})", "and response_format json_object both hold the reply"},
      {R"("guided_regex": "a+")", "'guided_regex' is vLLM's older field: give \"structured_outputs\": {\"regex\": ...}"},
      {R"("guided_choice": ["a"])", "{\"choice\": ...}"},
      {R"("structured_outputs": {"regex": "a+"}, "min_tokens": 2)", "with structured_outputs regex: the reply ends where its pattern lets it"},
      {R"("structured_outputs": {"choice": ["a"]}, "echo": true)", "with structured_outputs choice: a reply that begins with its prompt is not held"},
  };
  for (const auto& [fields, named] : refused) {
    const HttpReply bad = post(port, "/v1/completions", R"({"prompt": "x", )" + fields + "}");
    EXPECT_EQ(bad.status, 400) << fields << ": " << bad.body;
    const std::string message = bad.status == 400 ? json::parse(bad.body).at("error").at("message").get<std::string>() : bad.body;
    EXPECT_NE(message.find(named), std::string::npos) << message;
  }
  // A null field is one not given.
  const HttpReply with_null = post(port, "/v1/completions", R"({"prompt": "x", "max_tokens": 8, "structured_outputs": {"regex": "[ab]+", "choice": null}})");
  EXPECT_EQ(with_null.status, 200) << with_null.body;
  // structured_outputs' json is a schema as response_format json_schema's is: the reply is one it accepts.
  const HttpReply schema = post(port, "/v1/completions", R"({"prompt": "x", "max_tokens": 30, "temperature": 0,
      "structured_outputs": {"json": {"enum": ["left", "right"]}}})");
  ASSERT_EQ(schema.status, 200) << schema.body;
  const ChoiceText reply = choice_texts(schema, false, false, 1)[0];
  EXPECT_EQ(reply.finish_reason, "stop");
  const json value = json::parse(reply.text, nullptr, false);  // whitespace may come before the value
  EXPECT_TRUE(value == "left" || value == "right") << reply.text;
}

// tilefire run --regex and --choices, and their misuses.
TEST(CliPattern, RunRepliesMatchAndMisusesAreRefused) {
  TempDir dir("cli-pattern");
  const std::filesystem::path model = text_model(dir);
  size_t ended = 0;
  for (const char* seed : {"1", "2", "3", "4"}) {
    const json address = run_json({"--model", model.string(), "--prompt", "Address:", "--regex", kAddress, "--temperature", "0.8",
                                   "--seed", seed, "--max-new-tokens", "30", "--threads", "1"});
    const std::string finish = address.at("finish_reason").get<std::string>();
    EXPECT_TRUE(finish == "stopped" || finish == "length") << address.dump();
    ended += expect_match_or_prefix(kAddress, address.at("text").get<std::string>(), finish == "stopped" ? "stop" : "length");
    const json choice = run_json({"--model", model.string(), "--prompt", "Mood:", "--choices", json(kChoices).dump(), "--temperature", "0.8",
                                  "--seed", seed, "--max-new-tokens", "30", "--threads", "1"});
    EXPECT_EQ(choice.at("finish_reason"), "stopped") << choice.dump();
    EXPECT_NE(std::find(kChoices.begin(), kChoices.end(), choice.at("text").get<std::string>()), kChoices.end()) << choice.dump();
  }
  EXPECT_GE(ended, 2u);
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--regex", "(?=a)"}, "tilefire run: error: --regex: lookahead (?= and (?! is not supported (at character 2 of the pattern)"},
      {{"--regex", "a", "--json-object"}, "--json-object and --regex both hold the reply to something"},
      {{"--choices", "yes"}, "--choices takes a JSON list of texts"},
      {{"--choices", "[]"}, "--choices: no choice given"},
      {{"--regex", "a+", "--min-new-tokens", "2"}, "--min-new-tokens with --regex: the reply ends where its pattern lets it"},
      {{"--regex", "a", "--json-whitespace", "0"}, "--json-whitespace goes with --json-object or --json-schema"},
  };
  expect_run_refusals({"--model", model.string(), "--max-new-tokens", "4"}, refused);
}

}  // namespace
}  // namespace tilefire::testing
