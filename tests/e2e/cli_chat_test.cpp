// The command line's chat: --chat, --system, --messages and --chat-template put a conversation through the
// model folder's chat template, encode it without the tokenizer's own start token, print the reply only,
// and stop at the template's end of reply. The templates themselves are checked in
// tests/graph/jinja_test.cpp and tests/graph/chat_template_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <regex>
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
  // So does a plain --prompt's, as transformers' generate() and vLLM stop there: here at its first token.
  fs::remove(model / "generation_config.json");
  const std::vector<std::string> plain_flags = {"--model", model.string(), "--prompt", "hello", "--max-new-tokens", "3", "--threads", "2"};
  const json plain = run_json(plain_flags);
  ASSERT_EQ(plain.at("finish_reason"), "length") << plain.dump();
  const std::vector<int32_t> plain_tokens = tokens_of(plain);
  write_file_text(model / "generation_config.json", json({{"eos_token_id", {plain_tokens[0]}}}).dump());
  const json plain_stopped = run_json(plain_flags);
  EXPECT_EQ(tokens_of(plain_stopped), std::vector<int32_t>{plain_tokens[0]}) << plain_stopped.dump();
  EXPECT_EQ(plain_stopped.at("finish_reason"), "eos") << plain_stopped.dump();
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
  const fs::path wrong_eos = chat_model(dir, "tiny-chat-wrong-eos");  // an eos id past the model's 512 tokens
  write_file_text(wrong_eos / "generation_config.json", R"({"eos_token_id": [2, 99999]})");
  write_file_text(dir.path() / "notjson.json", "[{");
  write_file_text(dir.path() / "nomessages.json", R"({"greeting": "hey"})");
  write_file_text(dir.path() / "bigint.json", R"({"messages": [{"role": "user", "content": "hi"}], "seed": 123456789012345678901234})");
  const std::string m = model.string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--chat", "hi"}, "a chat needs the model's tokenizer.json (the built-in sample has none"},
      {{"--model", bare.string(), "--chat", "hi"}, "has no chat template"},
      {{"--model", m, "--chat", "hi", "--prompt", "x"}, "give them or --prompt / --prompt-tokens, not both"},
      {{"--model", m, "--system", "x"}, "--system goes with --chat or --messages"},
      {{"--model", m, "--chat-template", "t.jinja", "--prompt", "x"}, "--chat-template goes with --chat or --messages"},
      {{"--model", m, "--messages", (dir.path() / "missing.json").string()}, "--messages: cannot read"},
      {{"--model", m, "--messages", dir.path().string()}, "--messages: cannot read"},
      {{"--model", m, "--messages", (dir.path() / "notjson.json").string()}, ": not valid JSON: "},
      {{"--model", m, "--messages", (dir.path() / "nomessages.json").string()}, "is an object without \"messages\""},
      {{"--model", m, "--messages", (dir.path() / "bigint.json").string()}, "the integer 123456789012345678901234 is past 64 bits"},
      {{"--model", m, "--chat", "hi", "--chat-template", (dir.path() / "missing.jinja").string()}, "missing.jinja: cannot open"},
      {{"--model", raising.string(), "--system", "s", "--chat", "hi"}, "the template raised an error: System messages are not supported"},
      {{"--model", wrong_eos.string(), "--chat", "hi"}, "generation_config.json: key 'eos_token_id' holds 99999, outside the vocabulary of 512 tokens"},
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

namespace tilefire::testing {
namespace {

// `tilefire chat` on `input` (its standard input), with `flags`: status 0 and one JSON object per turn.
std::vector<json> chat_turns(const fs::path& model, const TempDir& dir, const std::string& input, std::vector<std::string> flags = {}) {
  write_file_text(dir.path() / "input.txt", input);
  std::vector<std::string> args = {"chat", "--model", model.string(), "--max-new-tokens", "4", "--threads", "2", "--json"};
  args.insert(args.end(), flags.begin(), flags.end());
  const RunResult r = run_cli(args, 60, "", (dir.path() / "input.txt").string());
  EXPECT_EQ(r.status, 0) << describe(r);
  std::vector<json> turns;
  size_t start = 0;
  for (size_t end = r.out.find('\n'); end != std::string::npos; start = end + 1, end = r.out.find('\n', start))
    turns.push_back(json::parse(r.out.substr(start, end - start)));
  EXPECT_EQ(start, r.out.size()) << "every line a JSON object: " << describe(r);
  return turns;
}

// Each line a user message; the second turn's prompt is the template over both turns (the first reply
// included), and the cache keeps what it shares with the first turn's prompt and reply.
TEST(CliChat, ChatKeepsTheConversationAndReusesItsCache) {
  TempDir dir("cli-chat-command");
  const fs::path model = chat_model(dir, "tiny-chat-command");
  const std::vector<json> turns = chat_turns(model, dir, "hello\nmore\\\nlines\n\n");
  ASSERT_EQ(turns.size(), 2u);
  const std::vector<int32_t> first = encode(model, "<|start|>user: hello<|end|>assistant:");
  EXPECT_EQ(turns[0].at("prompt_tokens"), first.size());
  EXPECT_EQ(turns[0].at("reused_tokens"), 0);
  const std::string reply = turns[0].at("text").get<std::string>();
  const std::vector<int32_t> second =
      encode(model, "<|start|>user: hello<|end|>assistant: " + reply + "<|end|>user: more\nlines<|end|>assistant:");
  EXPECT_EQ(turns[1].at("prompt_tokens"), second.size()) << turns[1].dump();
  // What the cache held after the first turn: its prompt and every generated token but the last.
  std::vector<int32_t> held = first;
  const std::vector<int32_t> generated = turns[0].at("tokens").get<std::vector<int32_t>>();
  held.insert(held.end(), generated.begin(), generated.end() - 1);
  size_t shared = 0;
  while (shared < held.size() && shared + 1 < second.size() && held[shared] == second[shared]) ++shared;
  EXPECT_EQ(turns[1].at("reused_tokens"), shared) << turns[1].dump();
  EXPECT_GE(shared, first.size());

  // /reset starts over: the same first turn again, nothing reused.
  const std::vector<json> again = chat_turns(model, dir, "hello\n/reset\nhello\n/exit\nnever read\n");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[1].at("prompt_tokens"), first.size());
  EXPECT_EQ(again[1].at("reused_tokens"), 0);
  EXPECT_EQ(again[1].at("tokens"), again[0].at("tokens")) << "greedy: the same reply";
  EXPECT_EQ(again[0].at("turn"), 1);
  EXPECT_EQ(again[1].at("turn"), 1) << "/reset starts the count of replies again";

  // Turns number replies: an empty line makes none. Sampled, a conversation replayed after /reset
  // gets the same replies (a turn's seed is --seed plus its number).
  const std::vector<json> sampled =
      chat_turns(model, dir, "hello\n\nmore\n/reset\nhello\nmore\n", {"--temperature", "1.5", "--seed", "3"});
  ASSERT_EQ(sampled.size(), 4u);
  EXPECT_EQ(sampled[1].at("turn"), 2) << "the empty line took no number";
  EXPECT_EQ(sampled[2].at("turn"), 1);
  EXPECT_EQ(sampled[2].at("tokens"), sampled[0].at("tokens"));
  EXPECT_EQ(sampled[3].at("tokens"), sampled[1].at("tokens"));

  // Text: the model line, then each reply on its own line.
  write_file_text(dir.path() / "input.txt", "hello\nmore\n");
  const RunResult text = run_cli({"chat", "--model", model.string(), "--max-new-tokens", "3", "--stats"}, 60, "", (dir.path() / "input.txt").string());
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_EQ(text.out.rfind("model: " + model.string(), 0), 0u) << text.out;
  EXPECT_EQ(std::count(text.out.begin(), text.out.end(), '\n'), 3) << text.out;
  EXPECT_NE(text.err.find("reused;"), std::string::npos) << text.err;
}

// Each of `got`'s turns is `want`'s (`turns` of them): the same prompt, cache reuse, reply and finish.
void expect_same_turns(const std::vector<json>& got, const std::vector<json>& want, size_t turns) {
  ASSERT_EQ(want.size(), turns);
  ASSERT_EQ(got.size(), want.size());
  for (size_t turn = 0; turn < want.size(); ++turn)
    for (const char* key : {"prompt_tokens", "reused_tokens", "tokens", "text", "finish_reason"})
      EXPECT_EQ(got[turn].at(key), want[turn].at(key)) << "turn " << turn << ", " << key;
}

// --tp N runs the ranks in this process: the same greedy replies, turn after turn (each reusing the cache
// of the last), and after /reset, as one rank gives.
TEST(CliChat, ChatWithTensorParallelRanksGivesOneRanksReplies) {
  TempDir dir("cli-chat-command-tp");
  const fs::path model = chat_model(dir, "tiny-chat-command-tp");
  const std::string input = "hello\nhow are you\nand then\n/reset\nhello\n";
  const std::vector<json> one = chat_turns(model, dir, input, {"--max-new-tokens", "6"});
  const std::vector<json> two = chat_turns(model, dir, input, {"--max-new-tokens", "6", "--tp", "2"});
  expect_same_turns(two, one, 4);
  EXPECT_GT(two[1].at("reused_tokens").get<int>(), 0) << "the second turn reuses the first's cache";
}

// --speculate: the same replies turn after turn (each reusing the cache the last left, drafts turned down
// included), with the drafts counted.
TEST(CliChat, ChatSpeculatingGivesThePlainReplies) {
  TempDir dir("cli-chat-command-speculate");
  const fs::path model = chat_model(dir, "tiny-chat-command-speculate");
  const std::string input = "hello hello hello\nhello again\nand then hello\n";
  const std::vector<json> plain = chat_turns(model, dir, input, {"--max-new-tokens", "24"});
  const std::vector<json> speculating = chat_turns(model, dir, input, {"--max-new-tokens", "24", "--speculate", "3"});
  expect_same_turns(speculating, plain, 3);
  uint32_t drafted = 0;
  for (size_t turn = 0; turn < std::min(plain.size(), speculating.size()); ++turn) {
    EXPECT_FALSE(plain[turn].contains("draft_tokens"));
    drafted += speculating[turn].at("draft_tokens").get<uint32_t>();
    EXPECT_LE(speculating[turn].at("accepted_tokens").get<uint32_t>(), speculating[turn].at("draft_tokens").get<uint32_t>());
  }
  EXPECT_GT(drafted, 0u) << "no turn drafted: the test checks nothing of speculation";
}

// The format flags hold every turn's reply, each a new constraint from the reply's start: a word and a
// full stop by --regex (checked by std::regex), one of --choices' texts, and a --grammar. The replies end
// by the format (nothing may follow) or at the end of reply, which is allowed only where the text is
// whole, long before --max-new-tokens. A format that is wrong is refused by name before anything loads.
TEST(CliChat, EveryTurnsReplyKeepsToTheFormat) {
  TempDir dir("cli-chat-format");
  const fs::path model = chat_model(dir, "tiny-chat-format");
  const std::string input = "hello\nsay a word\nanother\n/reset\nhello again\n";
  const std::vector<std::pair<std::vector<std::string>, std::function<bool(const std::string&)>>> formats = {
      {{"--regex", "[a-z]{1,6}\\."}, [](const std::string& text) { return std::regex_match(text, std::regex("[a-z]{1,6}\\.")); }},
      {{"--choices", R"(["yes", "no", "not sure"])"}, [](const std::string& text) { return text == "yes" || text == "no" || text == "not sure"; }},
      {{"--grammar", "root ::= \"(\" [0-9]{1,3} (\", \" [0-9]{1,3})? \")\""},
       [](const std::string& text) { return std::regex_match(text, std::regex(R"(\([0-9]{1,3}(, [0-9]{1,3})?\))")); }},
  };
  for (const auto& [flags, derived] : formats) {
    std::vector<std::string> chat_flags = {"--max-new-tokens", "24", "--temperature", "0.9", "--seed", "7"};
    chat_flags.insert(chat_flags.end(), flags.begin(), flags.end());
    const std::vector<json> turns = chat_turns(model, dir, input, chat_flags);
    ASSERT_EQ(turns.size(), 4u) << flags[0];
    for (const json& turn : turns) {
      const std::string finish = turn.at("finish_reason").get<std::string>();
      EXPECT_TRUE(finish == "stopped" || finish == "eos") << flags[0] << ": " << turn.dump();
      std::string text = turn.at("text").get<std::string>();
      // The tiny model's eos (id 2) is the byte 0x02 of its byte-level tokenizer: taken off before the check.
      if (finish == "eos" && !text.empty() && text.back() == '\x02') text.pop_back();
      EXPECT_TRUE(derived(text)) << flags[0] << ": " << turn.dump();
    }
    // The second turn's prompt holds the first reply: the conversation keeps what the format gave.
    EXPECT_EQ(turns[1].at("prompt_tokens"),
              encode(model, "<|start|>user: hello<|end|>assistant: " + turns[0].at("text").get<std::string>() +
                                "<|end|>user: say a word<|end|>assistant:").size()) << flags[0];
  }
  for (const auto& [flags, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--regex", "[a"}, "tilefire chat: error: --regex: "},
           {{"--grammar", "root ::= [a"}, "tilefire chat: error: --grammar: line 1, column 10: a class is not closed"},
           {{"--choices", "yes"}, "tilefire chat: error: --choices takes a JSON list of texts"},
           {{"--regex", "a", "--json-object"}, "--json-object and --regex both hold the reply to something"},
           {{"--json-whitespace", "0"}, "tilefire chat: error: --json-whitespace goes with --json-object or --json-schema"},
           {{"--json-schema", (dir.path() / "missing.json").string()}, "--json-schema: cannot read"}}) {
    std::vector<std::string> args = {"chat", "--model", model.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    const RunResult refused = run_cli(args);
    EXPECT_EQ(refused.status, 2) << describe(refused);
    EXPECT_NE(refused.err.find(message), std::string::npos) << describe(refused);
    EXPECT_EQ(refused.out, "") << describe(refused);
  }
}

// A reply its format fails partway (a grammar past its bound on parses) drops its message with the reason,
// and the chat goes on: a later message's prompt holds only the messages that got replies, its turn number
// counts only those, and the chat ends with status 2 and the count. Whether a reply fails here is the
// sampler's choice of the first character, so several seeds each give some of both (a dropped message's
// seed is the next one's, which on this model mostly fails alike; the next test answers after a drop).
TEST(CliChat, AReplyItsFormatFailsDropsItsMessageAndTheChatGoesOn) {
  TempDir dir("cli-chat-format-fails");
  const fs::path model = chat_model(dir, "tiny-chat-format-fails");
  const std::vector<std::string> messages = {"hi", "second", "third", "fourth"};  // lengths apart: a prompt's length names them
  // After a letter of a-m, one more; after one of n-z, k letters that are not d, a d, and k of b or c: a
  // count past 1024 parses, and refused, once some ten letters are written.
  const std::string gbnf = "root ::= [a-m] [a-z] | [n-z] x\nx ::= [^d] x \"b\" | [^d] x \"c\" | \"d\"";
  const auto derived = [](const std::string& text) {
    if (text.size() == 2 && text[0] >= 'a' && text[0] <= 'm') return text[1] >= 'a' && text[1] <= 'z';
    const size_t d = text.find('d', 1);
    if (text.empty() || text[0] < 'n' || text[0] > 'z' || d == std::string::npos || text.size() - d - 1 != d - 1) return false;
    return text.find_first_not_of("bc", d + 1) == std::string::npos;
  };
  size_t drops = 0;
  for (const char* seed : {"1", "2", "3", "4", "5", "6"}) {
    std::string input;
    for (const std::string& message : messages) input += message + "\n";
    write_file_text(dir.path() / "input.txt", input);
    const RunResult r = run_cli({"chat", "--model", model.string(), "--json", "--max-new-tokens", "40", "--temperature", "1", "--seed", seed,
                                 "--threads", "2", "--grammar", gbnf},
                                60, "", (dir.path() / "input.txt").string());
    size_t dropped = 0;
    for (size_t at = r.err.find("tilefire chat: the reply to the message: the grammar has more than 1024 parses"); at != std::string::npos;
         at = r.err.find("tilefire chat: the reply to the message:", at + 1))
      ++dropped;
    drops += dropped;
    EXPECT_EQ(r.status, dropped ? 2 : 0) << describe(r);
    std::string conversation = "<|start|>";
    size_t next_message = 0, turn = 0;
    for (size_t start = 0, end = r.out.find('\n'); end != std::string::npos; start = end + 1, end = r.out.find('\n', start)) {
      const json reply = json::parse(r.out.substr(start, end - start));
      EXPECT_EQ(reply.at("turn"), ++turn) << "a dropped message takes no number: " << r.out;
      std::string text = reply.at("text").get<std::string>();
      if (reply.at("finish_reason") == "eos" && !text.empty() && text.back() == '\x02') text.pop_back();
      EXPECT_TRUE(derived(text)) << reply.dump();
      // The message it answers: the next whose prompt has its length; those passed over were dropped.
      size_t answered = next_message;
      while (answered < messages.size() &&
             encode(model, conversation + "user: " + messages[answered] + "<|end|>assistant:").size() != reply.at("prompt_tokens").get<size_t>())
        ++answered;
      ASSERT_LT(answered, messages.size()) << "a prompt with a dropped message in it: " << r.out;
      conversation += "user: " + messages[answered] + "<|end|>assistant: " + reply.at("text").get<std::string>() + "<|end|>";
      next_message = answered + 1;
    }
    EXPECT_EQ(turn + dropped, messages.size()) << describe(r);
    if (dropped) {
      EXPECT_NE(r.err.find("tilefire chat: error: " + std::to_string(dropped) + " of 4 messages were dropped"), std::string::npos) << r.err;
    }
  }
  EXPECT_GT(drops, 0u) << "no reply failed: the test checks nothing of dropping";
  EXPECT_LT(drops, 6 * messages.size()) << "no reply was derived";
}

// A reply that fails at its prefill (a NaN planted in the embedding row of '~' makes the logits of a prompt
// holding it NaN) drops its message, and the next message is answered from the conversation without it, on
// the cache the failed prefill left.
TEST(CliChat, AReplyThatFailsDropsItsMessageAndTheNextIsAnswered) {
  TempDir dir("cli-chat-reply-fails");
  const fs::path model = chat_model(dir, "tiny-chat-reply-fails");
  const std::vector<int32_t> tilde = encode(model, "~");
  ASSERT_EQ(tilde.size(), 1u);
  const uint64_t hidden = json::parse(read_file_text(model / "config.json")).at("hidden_size").get<uint64_t>();
  overwrite_f32(model, "model.embed_tokens.weight", uint64_t(tilde[0]) * hidden, std::numeric_limits<float>::quiet_NaN());
  write_file_text(dir.path() / "input.txt", "hi\nbad ~ word\nthird\n");
  const RunResult r = run_cli({"chat", "--model", model.string(), "--json", "--max-new-tokens", "3", "--threads", "2"}, 60, "",
                              (dir.path() / "input.txt").string());
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("tilefire chat: the reply to the message: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tilefire chat: error: 1 of 3 messages were dropped"), std::string::npos) << r.err;
  std::vector<json> turns;
  for (size_t start = 0, end = r.out.find('\n'); end != std::string::npos; start = end + 1, end = r.out.find('\n', start))
    turns.push_back(json::parse(r.out.substr(start, end - start)));
  ASSERT_EQ(turns.size(), 2u) << r.out;
  EXPECT_EQ(turns[1].at("turn"), 2) << "the dropped message takes no number";
  const std::string first_reply = turns[0].at("text").get<std::string>();
  EXPECT_EQ(turns[1].at("prompt_tokens"),
            encode(model, "<|start|>user: hi<|end|>assistant: " + first_reply + "<|end|>user: third<|end|>assistant:").size())
      << "the conversation without the dropped message";
  // The same conversation without the bad message from the start: the same second reply.
  write_file_text(dir.path() / "input.txt", "hi\nthird\n");
  const RunResult plain = run_cli({"chat", "--model", model.string(), "--json", "--max-new-tokens", "3", "--threads", "2"}, 60, "",
                                  (dir.path() / "input.txt").string());
  ASSERT_EQ(plain.status, 0) << describe(plain);
  const json plain_second = json::parse(plain.out.substr(plain.out.find('\n') + 1));
  EXPECT_EQ(plain_second.at("tokens"), turns[1].at("tokens")) << plain.out << "\n" << r.out;
}

// A message the template refuses, one that overflows the context, or one that is not UTF-8 is dropped
// with its reason on standard error, and the chat goes on, ending with exit status 2 and a count of the
// dropped; what a chat cannot start with is refused.
TEST(CliChat, ChatDropsAMessageItCannotTakeAndGoesOn) {
  TempDir dir("cli-chat-command-errors");
  const fs::path model = chat_model(dir, "tiny-chat-command-errors");
  write_file_text(model / "chat_template.jinja",
                  "{% for m in messages %}{% if m.content == 'bad' %}{{ raise_exception('no bad words') }}{% endif %}"
                  "{{ m.role }}: {{ m.content }}<|end|>{% endfor %}assistant:");
  write_file_text(dir.path() / "input.txt", "bad\nok\n" + std::string(200, 'x') + "\n\xff\xfe\nfine\n");
  const RunResult r = run_cli({"chat", "--model", model.string(), "--max-new-tokens", "2", "--json", "--max-context", "64"}, 60, "",
                              (dir.path() / "input.txt").string());
  ASSERT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("tilefire chat: the message is not valid UTF-8 (invalid UTF-8 byte at index 0: 0xFF)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tilefire chat: error: 3 of 5 messages were dropped"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the template raised an error: no bad words"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("and the context holds 64 (--max-context): /reset to start over"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << "two replies: " << r.out;
  const json first = json::parse(r.out.substr(0, r.out.find('\n')));
  EXPECT_EQ(first.at("prompt_tokens"), encode(model, "user: ok<|end|>assistant:").size()) << "the refused message is dropped";

  for (const auto& [flags, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"chat"}, "--model DIR is required"},
           {{"chat", "--model", gen_tiny_model(dir, "tiny-no-tokenizer").string()}, "a chat needs the model's tokenizer.json"},
           {{"chat", "--model", model.string(), "--prompt", "x"}, "--prompt"},
           {{"chat", "--model", model.string(), "--system", "\xff"}, "--system is not valid UTF-8 (invalid UTF-8 byte at index 0: 0xFF)"},
           {{"run", "--model", model.string(), "--chat", "caf\xc3"}, "--chat is not valid UTF-8 (incomplete UTF-8 string; last byte: 0xC3)"},
           {{"run", "--model", model.string(), "--chat", "hi", "--system", "\xc3("}, "--system is not valid UTF-8 ("},
           {{"chat", "--model", model.string(), "--chat-template", "/nonexistent.jinja"}, "error: --chat-template: /nonexistent.jinja: cannot open"},
           {{"run", "--model", model.string(), "--chat", "hi", "--chat-template", dir.path().string()}, "error: --chat-template: " + dir.path().string() + ": is a folder"}}) {
    const RunResult refused = run_cli(flags);
    EXPECT_EQ(refused.status, 2) << describe(refused);
    EXPECT_NE(refused.err.find(message), std::string::npos) << describe(refused);
  }
  // With --chat-template, the folder's own files still name themselves, not the flag, also when the
  // template's path begins the folder's ("tiny-chat" and "tiny-chat-command-errors/...").
  write_file_text(dir.path() / "tiny-chat", "{{ messages[0].content }}");
  write_file_text(model / "generation_config.json", R"({"eos_token_id": "two"})");
  const RunResult folder_file = run_cli({"run", "--model", model.string(), "--chat", "hi", "--chat-template", (dir.path() / "tiny-chat").string()});
  EXPECT_EQ(folder_file.status, 2) << describe(folder_file);
  EXPECT_NE(folder_file.err.find("error: " + (model / "generation_config.json").string() + ": key 'eos_token_id'"), std::string::npos)
      << describe(folder_file);
}

}  // namespace
}  // namespace tilefire::testing
