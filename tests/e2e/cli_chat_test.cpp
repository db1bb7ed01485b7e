// The command line's chat: --chat, --system, --messages and --chat-template put a conversation through the
// model folder's chat template, encode it without the tokenizer's own start token, print the reply only,
// and stop at the template's end of reply. The templates themselves are checked in
// tests/graph/jinja_test.cpp and tests/graph/chat_template_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/tokenizer.h"
#include "tests/common/cli_runner.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A tiny model with the tiny byte-level tokenizer and a chat template whose output is easy to write by
// hand: "<|start|>" (the bos_token), then "role: content<|end|>" per message, then "assistant:".
fs::path chat_model(const TempDir& dir, const std::string& name) {
  const fs::path model = gen_tiny_model(dir, name);
  write_file_text(model / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  const json config = {{"bos_token", "<|start|>"},
                       {"eos_token", "<|end|>"},
                       {"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}<|end|>{% endfor %}"
                                         "{% if add_generation_prompt %}assistant:{% endif %}"}};
  write_file_text(model / "tokenizer_config.json", config.dump());
  return model;
}

std::vector<int32_t> encode(const fs::path& model, const std::string& text) {
  return HfTokenizer::load(model / "tokenizer.json").encode(text, /*add_special_tokens=*/false);
}

TEST(CliChat, AChatPutsTheConversationThroughTheTemplateAndPrintsTheReply) {
  TempDir dir("cli-chat");
  const fs::path model = chat_model(dir, "tiny-chat");
  const std::vector<std::string> flags = {"--model", model.string(), "--system", "be brief", "--chat", "hello", "--max-new-tokens", "5", "--threads", "2"};
  const json result = run_json(flags);
  // One <|start|> (262): the template's, not the tokenizer's too.
  const std::vector<int32_t> expected = encode(model, "<|start|>system: be brief<|end|>user: hello<|end|>assistant:");
  ASSERT_EQ(expected.front(), 262);
  EXPECT_EQ(result.at("prompt_tokens"), json(expected)) << result.dump();
  const std::vector<int32_t> tokens = tokens_of(result);
  ASSERT_FALSE(tokens.empty());

  std::vector<std::string> args = {"run"};
  args.insert(args.end(), flags.begin(), flags.end());
  const RunResult text = run_cli(args);
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_EQ(text.out.find("user: hello"), std::string::npos) << "the prompt is not printed: " << text.out;
  const std::string reply = result.at("text").get<std::string>();
  const size_t line = text.out.find('\n');
  ASSERT_NE(line, std::string::npos) << text.out;
  EXPECT_EQ(text.out.substr(line + 1, reply.size() + 1), reply + "\n") << "the model line, then the reply: " << text.out;

  // generation_config.json's eos_token_id ends the reply: here the token the model generates first.
  write_file_text(model / "generation_config.json", json({{"eos_token_id", {tokens[0]}}}).dump());
  const json stopped = run_json(flags);
  EXPECT_EQ(tokens_of(stopped), std::vector<int32_t>{tokens[0]}) << stopped.dump();
  EXPECT_EQ(stopped.at("finish_reason"), "eos") << stopped.dump();
  // A plain --prompt does not stop there: the chat's end of reply is the chat's.
  const json plain = run_json({"--model", model.string(), "--prompt", "hello", "--max-new-tokens", "3", "--threads", "2"});
  EXPECT_EQ(plain.at("finish_reason"), "length") << plain.dump();
}

// --messages: a list of messages, or an object with "messages" and the template's other variables; --chat
// then comes last. --chat-template replaces the folder's template, or gives one to a folder without.
TEST(CliChat, MessagesFilesAndATemplateFile) {
  TempDir dir("cli-chat-messages");
  const fs::path model = chat_model(dir, "tiny-chat-messages");
  write_file_text(dir.path() / "list.json", R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])");
  json result = run_json({"--model", model.string(), "--messages", (dir.path() / "list.json").string(), "--chat", "more", "--max-new-tokens", "1"});
  EXPECT_EQ(result.at("prompt_tokens"), json(encode(model, "<|start|>user: hi<|end|>assistant: hello<|end|>user: more<|end|>assistant:")));

  write_file_text(dir.path() / "template.jinja", "{{ greeting | default('none') }}|{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}\n");
  write_file_text(dir.path() / "object.json", R"({"messages": [{"role": "user", "content": "hi"}], "greeting": "hey"})");
  result = run_json({"--model", model.string(), "--messages", (dir.path() / "object.json").string(), "--chat-template",
                     (dir.path() / "template.jinja").string(), "--max-new-tokens", "1"});
  EXPECT_EQ(result.at("prompt_tokens"), json(encode(model, "hey|[user]hi")));

  fs::remove(model / "tokenizer_config.json");
  result = run_json({"--model", model.string(), "--chat", "x", "--chat-template", (dir.path() / "template.jinja").string(), "--max-new-tokens", "1"});
  EXPECT_EQ(result.at("prompt_tokens"), json(encode(model, "none|[user]x")));
}

// What a chat cannot run with is refused with one message and nothing on stdout.
TEST(CliChat, WhatAChatCannotRunWithIsRefusedByName) {
  TempDir dir("cli-chat-errors");
  const fs::path model = chat_model(dir, "tiny-chat-errors");
  const fs::path bare = gen_tiny_model(dir, "tiny-no-template");
  write_file_text(bare / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  const fs::path raising = chat_model(dir, "tiny-chat-raising");
  write_file_text(raising / "chat_template.jinja", "{% if messages[0].role == 'system' %}{{ raise_exception('System messages are not supported') }}{% endif %}x");
  write_file_text(dir.path() / "notjson.json", "[{");
  write_file_text(dir.path() / "nomessages.json", R"({"greeting": "hey"})");
  const std::string m = model.string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--chat", "hi"}, "need the model's tokenizer.json (the built-in sample has none"},
      {{"--model", bare.string(), "--chat", "hi"}, "has no chat template"},
      {{"--model", m, "--chat", "hi", "--prompt", "x"}, "give them or --prompt / --prompt-tokens, not both"},
      {{"--model", m, "--system", "x"}, "--system goes with --chat or --messages"},
      {{"--model", m, "--chat-template", "t.jinja", "--prompt", "x"}, "--chat-template goes with --chat or --messages"},
      {{"--model", m, "--messages", (dir.path() / "missing.json").string()}, "--messages: cannot read"},
      {{"--model", m, "--messages", dir.path().string()}, "--messages: cannot read"},
      {{"--model", m, "--messages", (dir.path() / "notjson.json").string()}, "is not JSON"},
      {{"--model", m, "--messages", (dir.path() / "nomessages.json").string()}, "is an object without \"messages\""},
      {{"--model", m, "--chat", "hi", "--chat-template", (dir.path() / "missing.jinja").string()}, "missing.jinja: cannot open"},
      {{"--model", raising.string(), "--system", "s", "--chat", "hi"}, "the template raised an error: System messages are not supported"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"run", "--max-new-tokens", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    const RunResult refused = run_cli(args);
    EXPECT_EQ(refused.status, 2) << describe(refused);
    EXPECT_NE(refused.err.find(message), std::string::npos) << describe(refused);
    EXPECT_EQ(refused.out, "") << describe(refused);
  }
}

}  // namespace
}  // namespace tilefire::testing
