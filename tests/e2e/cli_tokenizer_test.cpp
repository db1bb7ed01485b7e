// The command line with a model folder's tokenizer: tokenizer.json encodes a text prompt and decodes the
// output; a folder with another tokenizer only takes token ids; a tokenizer.json Tilefire cannot run is
// refused by name; --json-object constrains the reply to JSON, --json-schema to a schema's. The tokenizer itself is checked in
// tests/graph/tokenizer_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/tokenizer.h"
#include "tests/common/cli_runner.h"
#include "tests/common/json_reply.h"
#include "tests/common/schema_oracle.h"
#include "tests/common/test_models.h"
#include "tilefire/tokenizer.h"

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A folder with a tokenizer other than tokenizer.json (which Tilefire reads): a text prompt's bytes would
// be arbitrary tokens of the model's vocabulary and its output bytes not its text (exit 0 with noise). A
// text prompt, or none (the default is text), is refused naming the tokenizer file and --prompt-tokens;
// token ids run, and the output prints as ids (the --json run's tokens, and no text).
TEST(CliTokenizer, AFolderWithAnUnreadTokenizerTakesTokenIds) {
  TempDir dir("cli-gen-tokenizer");
  for (const char* tokenizer : {"tokenizer.model", "vocab.json", "tokenizer_config.json"}) {
    const fs::path model = gen_tiny_model(dir, std::string("tiny-") + tokenizer);
    write_file_text(model / tokenizer, "{}");
    for (std::vector<std::string> prompt : {std::vector<std::string>{"--prompt", "hello"}, std::vector<std::string>{}}) {
      std::vector<std::string> args{"run", "--model", model.string(), "--max-new-tokens", "2"};
      args.insert(args.end(), prompt.begin(), prompt.end());
      RunResult refused = run_cli(args);
      EXPECT_EQ(refused.status, 2) << describe(refused);
      EXPECT_NE(refused.err.find((model / tokenizer).string() + " is this model's tokenizer, and the folder has no tokenizer.json"),
                std::string::npos) << refused.err;
      EXPECT_NE(refused.err.find("--prompt-tokens"), std::string::npos) << refused.err;
    }
    RunResult ids = run_cli({"run", "--model", model.string(), "--prompt-tokens", "5,6,7", "--max-new-tokens", "3", "--threads", "2"});
    ASSERT_EQ(ids.status, 0) << describe(ids);
    const json result = run_json({"--model", model.string(), "--prompt-tokens", "5,6,7", "--max-new-tokens", "3", "--threads", "2"});
    const std::vector<int32_t> tokens = tokens_of(result);
    ASSERT_EQ(tokens.size(), 3u);
    EXPECT_TRUE(result.at("text").is_null()) << result.dump();
    const std::string expected = "prompt tokens: 5 6 7\ngenerated tokens: " + std::to_string(tokens[0]) + " " +
                                 std::to_string(tokens[1]) + " " + std::to_string(tokens[2]) + "\n";
    EXPECT_NE(ids.out.find(expected), std::string::npos) << ids.out;
  }
}

// A folder with a tokenizer.json: the text prompt goes through it (the template's start token, then the
// merges), and the output prints as text: the prompt, then the generated tokens' text, special tokens
// left out; --json's "text" is the generated text.
TEST(CliTokenizer, ATokenizerJsonEncodesThePromptAndDecodesTheOutput) {
  TempDir dir("cli-gen-tokenizer-json");
  const fs::path model = gen_tiny_model(dir, "tiny-tokenizer-json");
  write_file_text(model / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  const json result = run_json({"--model", model.string(), "--prompt", "hello hello", "--max-new-tokens", "6", "--threads", "2"});
  EXPECT_EQ(result.at("prompt_tokens"), json({262, 259, 260})) << result.dump();
  const std::vector<int32_t> tokens = tokens_of(result);
  ASSERT_FALSE(tokens.empty());
  const HfTokenizer tokenizer = HfTokenizer::load(model / "tokenizer.json");
  std::vector<int32_t> all{262, 259, 260};
  all.insert(all.end(), tokens.begin(), tokens.end());
  const std::string whole = tokenizer.decode(all, /*skip_special_tokens=*/true);
  ASSERT_EQ(whole.substr(0, 11), "hello hello");
  EXPECT_EQ(result.at("text"), whole.substr(11)) << result.dump();
  RunResult text = run_cli({"run", "--model", model.string(), "--prompt", "hello hello", "--max-new-tokens", "6", "--threads", "2"});
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find(whole + "\n"), std::string::npos) << text.out;
  // A NUL byte in the text prints (the byte-level token of byte 0 is id 0), and so does what follows it.
  RunResult nul = run_cli({"run", "--model", model.string(), "--prompt-tokens", "104,0,105", "--max-new-tokens", "1"});
  ASSERT_EQ(nul.status, 0) << describe(nul);
  EXPECT_NE(nul.out.find(std::string("h\0i", 3)), std::string::npos) << describe(nul);
  // A prompt that is not UTF-8 is refused naming --prompt and the byte.
  RunResult bad = run_cli({"run", "--model", model.string(), "--prompt", "ab\xC3(", "--max-new-tokens", "1"});
  EXPECT_EQ(bad.status, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--prompt: the text to tokenize is not valid UTF-8 at byte 2"), std::string::npos) << bad.err;
  // Ids past the model's vocabulary are refused naming the tokenizer (a byte-level tokenizer of 50,000
  // tokens on a model of 512 would be the real case).
  json wide = tiny_byte_level_tokenizer();
  wide["added_tokens"].push_back({{"id", 4000}, {"content", "<|wide|>"}, {"special", true}});
  write_file_text(model / "tokenizer.json", wide.dump());
  RunResult outside = run_cli({"run", "--model", model.string(), "--prompt", "a<|wide|>", "--max-new-tokens", "1"});
  EXPECT_EQ(outside.status, 2) << describe(outside);
  EXPECT_NE(outside.err.find("prompt token 4000 (from " + (model / "tokenizer.json").string() + ") is outside the model's vocabulary"),
            std::string::npos) << outside.err;
}

// --stop TEXT: the generation ends at the token whose text completes TEXT's first appearance; the output
// (streamed, or --json's "text") ends before it. The expected cut and token count come from the baseline
// run's tokens and the tokenizer alone.
TEST(CliTokenizer, StopTextEndsTheGenerationAndIsLeftOut) {
  TempDir dir("cli-stop-text");
  const fs::path model = gen_tiny_model(dir, "tiny-stop");
  write_file_text(model / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  const std::vector<std::string> flags = {"--model", model.string(), "--prompt", "hello hello", "--max-new-tokens", "48", "--threads", "2"};
  const json baseline = run_json(flags);
  const std::vector<int32_t> prompt = baseline.at("prompt_tokens").get<std::vector<int32_t>>();
  const std::vector<int32_t> tokens = tokens_of(baseline);
  const std::string text = baseline.at("text").get<std::string>();
  // Two printable ASCII characters past the first, where they first appear.
  std::string stop;
  for (size_t p = 1; p + 2 <= text.size() && stop.empty(); ++p)
    if (text[p] > ' ' && text[p] < 127 && text[p + 1] > ' ' && text[p + 1] < 127 && text.find(text.substr(p, 2)) == p)
      stop = text.substr(p, 2);
  ASSERT_FALSE(stop.empty()) << "no two printable characters in a row in: " << text;
  const Tokenizer tokenizer((model / "tokenizer.json").string());
  size_t needed = 0;  // the fewest tokens whose text shows the stop text
  while (needed < tokens.size() &&
         tokenizer.continuation(prompt, std::vector<int32_t>(tokens.begin(), tokens.begin() + needed)).find(stop) == std::string::npos)
    ++needed;
  ASSERT_LT(needed, tokens.size());

  std::vector<std::string> with_stop = flags;
  with_stop.insert(with_stop.end(), {"--stop", stop});
  const json stopped = run_json(with_stop);
  EXPECT_EQ(stopped.at("finish_reason"), "stopped") << stopped.dump();
  EXPECT_EQ(tokens_of(stopped), std::vector<int32_t>(tokens.begin(), tokens.begin() + needed)) << "stop " << stop;
  EXPECT_EQ(stopped.at("text"), text.substr(0, text.find(stop))) << "stop " << stop;

  std::vector<std::string> streamed_args = {"run"};
  streamed_args.insert(streamed_args.end(), with_stop.begin(), with_stop.end());
  const RunResult streamed = run_cli(streamed_args);
  ASSERT_EQ(streamed.status, 0) << describe(streamed);
  EXPECT_NE(streamed.out.find("hello hello" + text.substr(0, text.find(stop)) + "\ntime to first token"), std::string::npos)
      << "stop " << stop << "\n" << streamed.out;

  // With --min-new-tokens one past the token that completes it, that appearance is of the text before the
  // minimum: the stop text counts only where it ends in the text of token needed + 1 or later.
  const size_t protected_end = tokenizer.continuation(prompt, std::vector<int32_t>(tokens.begin(), tokens.begin() + needed)).size();
  size_t counted = text.find(stop);
  while (counted != std::string::npos && counted + stop.size() <= protected_end) counted = text.find(stop, counted + 1);
  std::vector<std::string> with_minimum = with_stop;
  with_minimum.insert(with_minimum.end(), {"--min-new-tokens", std::to_string(needed + 1)});
  const json held = run_json(with_minimum);
  EXPECT_EQ(held.at("text"), text.substr(0, counted)) << "stop " << stop << ", min " << needed + 1;
  EXPECT_EQ(held.at("finish_reason"), counted == std::string::npos ? "length" : "stopped") << held.dump();

  std::vector<std::string> never = flags;
  never.insert(never.end(), {"--stop", "\x01never"});
  const json unstopped = run_json(never);
  EXPECT_EQ(unstopped.at("finish_reason"), "length");
  EXPECT_EQ(unstopped.at("text"), text);

  const RunResult empty = run_cli({"run", "--model", model.string(), "--stop", ""});
  EXPECT_EQ(empty.status, 2) << describe(empty);
  EXPECT_NE(empty.err.find("flag --stop needs a value"), std::string::npos) << empty.err;
  const fs::path unread = gen_tiny_model(dir, "tiny-unread");
  write_file_text(unread / "tokenizer.model", "{}");
  const RunResult ids = run_cli({"run", "--model", unread.string(), "--prompt-tokens", "5,6", "--stop", "ab"});
  EXPECT_EQ(ids.status, 2) << describe(ids);
  EXPECT_NE(ids.err.find("--stop looks for a text, and this model's output has none"), std::string::npos) << ids.err;
}

// A tokenizer.json Tilefire cannot read stops the run before anything else, naming it: an empty object,
// a dangling link (a cache snapshot whose blob is missing), a WordPiece model. --prompt-tokens does not
// get around it: the output's text needs the tokenizer too.
// --json-object: sampled replies are JSON objects where they end ("stopped") and prefixes of one where
// --max-new-tokens cuts them, with the folder's tokenizer and for a model without one (its bytes); a bias
// towards the braces makes the greedy reply "{}"; a folder whose tokenizer Tilefire does not read is refused.
TEST(CliTokenizer, JsonObjectRepliesAreJson) {
  TempDir dir("cli-json-object");
  const fs::path model = gen_tiny_model(dir, "tiny-json");
  write_file_text(model / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  uint32_t ended = 0;
  for (const bool with_tokenizer : {true, false}) {
    for (const char* seed : {"1", "2", "3", "4"}) {
      std::vector<std::string> flags = {"--prompt", "Reply in JSON:", "--json-object", "--temperature", "0.8", "--seed", seed,
                                        "--max-new-tokens", "40", "--threads", "1"};
      if (with_tokenizer) flags.insert(flags.end(), {"--model", model.string()});
      const json result = run_json(flags);
      const std::string finish = result.at("finish_reason").get<std::string>();
      EXPECT_TRUE(finish == "stopped" || finish == "length") << result.dump();
      ended += expect_json_object_or_prefix(result.at("text").get<std::string>(), finish == "stopped") ? 1 : 0;
    }
  }
  EXPECT_GT(ended, 0u) << "no reply ended: the check of whole replies never ran";
  const json braces = run_json({"--model", model.string(), "--json-object", "--logit-bias", "123=100,125=100", "--threads", "1"});
  EXPECT_EQ(braces.at("text"), "{}");
  EXPECT_EQ(braces.at("finish_reason"), "stopped");
  const fs::path unread = gen_tiny_model(dir, "tiny-unread");
  write_file_text(unread / "tokenizer.model", "{}");
  const RunResult refused = run_cli({"run", "--model", unread.string(), "--prompt-tokens", "5,6", "--json-object"});
  EXPECT_EQ(refused.status, 2) << describe(refused);
  EXPECT_NE(refused.err.find("--json-object constrains the reply's text"), std::string::npos) << refused.err;
  const RunResult with_minimum = run_cli({"run", "--json-object", "--min-new-tokens", "3"});
  EXPECT_EQ(with_minimum.status, 2) << describe(with_minimum);
  EXPECT_NE(with_minimum.err.find("--min-new-tokens with --json-object"), std::string::npos) << with_minimum.err;
}

TEST(CliTokenizer, ABrokenTokenizerJsonIsRefusedByName) {
  TempDir dir("cli-gen-tokenizer-broken");
  const fs::path model = gen_tiny_model(dir, "tiny-broken-tokenizer");
  const fs::path path = model / "tokenizer.json";
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { write_file_text(path, "{}"); }, path.string() + ": the document: the key 'model' is missing"},
      {[&] { write_file_text(path, R"({"model": {"type": "WordPiece", "vocab": {}}})"); }, path.string() + ": model.type: 'WordPiece' is not supported"},
      {[&] { fs::remove(path); fs::create_symlink(dir.path() / "missing-blob", path); }, path.string() + ": cannot open"},
  };
  for (const auto& [make, message] : cases) {
    make();
    for (std::vector<std::string> prompt : {std::vector<std::string>{"--prompt", "hello"}, std::vector<std::string>{"--prompt-tokens", "1,2"}}) {
      std::vector<std::string> args{"run", "--model", model.string(), "--max-new-tokens", "2"};
      args.insert(args.end(), prompt.begin(), prompt.end());
      RunResult refused = run_cli(args);
      EXPECT_EQ(refused.status, 2) << describe(refused);
      EXPECT_NE(refused.err.find(message), std::string::npos) << refused.err;
    }
  }
}

// --json-schema FILE: sampled replies that end are valid under the schema (by Ajv) and, with
// --json-whitespace 0, compact; the flags' misuses are refused by name.
TEST(CliTokenizer, JsonSchemaRepliesAreValid) {
  REQUIRE_SCHEMA_ORACLE();
  TempDir dir("cli-json-schema");
  const fs::path model = gen_tiny_model(dir, "tiny-json-schema");
  write_file_text(model / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  const json schema = json::parse(R"({"type": "object", "properties": {"id": {"type": "integer"},
      "label": {"type": "string", "maxLength": 4}, "on": {"type": "boolean"}, "code": {"type": "string", "pattern": "^[a-f0-9]{4}$"}},
      "required": ["id", "label", "on", "code"]})");
  const fs::path schema_file = dir.path() / "schema.json";
  write_file_text(schema_file, schema.dump());
  SchemaCase ended{schema, {}};
  for (const char* seed : {"1", "2", "3", "4"}) {
    const json result = run_json({"--model", model.string(), "--prompt", "Reply:", "--json-schema", schema_file.string(), "--json-whitespace",
                                  "0", "--temperature", "0.8", "--seed", seed, "--max-new-tokens", "100", "--threads", "1"});
    const std::string text = result.at("text").get<std::string>(), finish = result.at("finish_reason").get<std::string>();
    EXPECT_TRUE(finish == "stopped" || finish == "length") << result.dump();
    if (expect_json_object_or_prefix(text, finish == "stopped")) ended.documents.push_back(text);
    EXPECT_EQ(text.find_first_of(" \n\t\r"), std::string::npos) << text;  // no string here may hold whitespace: labels are short
  }
  ASSERT_GE(ended.documents.size(), 2u) << "too few replies ended for the schema's check to say much";
  const auto verdicts = validate_with_ajv({ended});
  for (size_t i = 0; i < ended.documents.size(); ++i) EXPECT_EQ(verdicts[0][i], std::optional<bool>(true)) << ended.documents[i];
  const fs::path bad_schema = dir.path() / "bad.json";
  write_file_text(bad_schema, R"({"type": "string", "pattern": "\\bword"})");
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--json-schema", (dir.path() / "missing.json").string()}, "--json-schema: cannot read"},
      {{"--json-schema", bad_schema.string()}, "bad.json: json_schema: #/pattern: '\\b' (a word boundary) is not supported"},
      {{"--json-schema", schema_file.string(), "--json-object"}, "--json-object and --json-schema both hold the reply to something"},
      {{"--json-whitespace", "0"}, "--json-whitespace goes with --json-object or --json-schema"},
      {{"--json-object", "--json-whitespace", "33"}, "--json-whitespace"},
      {{"--json-schema", schema_file.string(), "--min-new-tokens", "2"}, "--min-new-tokens with --json-schema"},
  };
  expect_run_refusals({"--max-new-tokens", "4"}, refused);
}

}  // namespace
}  // namespace tilefire::testing
