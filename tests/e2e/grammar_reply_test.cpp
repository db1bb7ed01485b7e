// Replies held to a GBNF grammar, end to end: `tilefire serve` with vLLM's structured_outputs
// {"grammar": G} (completions and chats, whole and streamed, in turn, batched and speculating) and
// `tilefire run --grammar / --grammar-file`. Every reply that ends ("stop") is checked by an independent
// reference: std::regex for a grammar that is regular, written by hand beside it, and a bracket counter for
// nested lists; one max_tokens cuts is a prefix the grammar still takes. Misuses are refused by name.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/serve_client.h"
#include "tilefire/reply_grammar.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

// A call: a name and up to three arguments, numbers or quoted words. Regular, so a regex checks it.
const char* const kCall =
    "root ::= name \"(\" (arg (\", \" arg){0,2})? \")\"\n"
    "name ::= [a-z] [a-z_]{0,7}\n"
    "arg  ::= [0-9]{1,3} | \"'\" [a-z ]{1,6} \"'\"  # a number or a quoted word\n";
const char* const kCallRegex = R"([a-z][a-z_]{0,7}\((([0-9]{1,3}|'[a-z ]{1,6}')(, ([0-9]{1,3}|'[a-z ]{1,6}')){0,2})?\))";
// Lists of lists of x's nested to any depth: not regular.
const char* const kNested = "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= \"x\" | list\n";

// Whether `text` is one bracketed list of x's and lists, by a counter: brackets balance, close only the
// outermost at the end, and each item is an x or a list, separated by commas.
bool nested_list(const std::string& text) {
  int depth = 0;
  char before = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (i == 0 ? c != '[' : depth == 0) return false;
    if (c == '[') {
      if (before != 0 && before != '[' && before != ',') return false;
      ++depth;
    } else if (c == ']') {
      if (before == ',') return false;
      --depth;
    } else if (c == 'x') {
      if (before != '[' && before != ',') return false;
    } else if (c == ',') {
      if (before != 'x' && before != ']') return false;
    } else {
      return false;
    }
    before = c;
  }
  return depth == 0 && !text.empty();
}

// A reply that ended is derived whole, by the reference; one cut by max_tokens is a prefix the grammar
// takes. True when it ended.
bool expect_derived_or_prefix(const char* gbnf, std::string text, const std::string& finish_reason) {
  EXPECT_TRUE(finish_reason == "stop" || finish_reason == "length") << finish_reason;
  if (finish_reason == "stop") {
    // The text model's eos (id 2) is the byte 0x02 in its byte-level tokenizer: taken off before the check.
    if (!text.empty() && text.back() == '\x02') text.pop_back();
    const bool derived = gbnf == kCall ? std::regex_match(text, std::regex(kCallRegex)) : nested_list(text);
    EXPECT_TRUE(derived) << gbnf << " on " << json(text).dump();
    return true;
  }
  GrammarParseTable table(ReplyGrammar::compile(gbnf));
  GrammarReplyBytes state = table.start();
  EXPECT_TRUE(state.feed(text)) << gbnf << ": not a prefix of a derived text, " << json(text).dump();
  return false;
}

TEST(GrammarReply, TheReferencesAgreeWithTheGrammars) {  // the checks below ask the references
  const auto call = ReplyGrammar::compile(kCall);
  for (const char* text : {"f()", "go_to(12, 'ab c')", "a('x', 1, 22)", "f(1,2)", "F()", "f(1, 2, 3, 4)", "f('')"})
    EXPECT_EQ(call->matches(text), std::regex_match(text, std::regex(kCallRegex))) << text;
  const auto nested = ReplyGrammar::compile(kNested);
  for (const char* text : {"[]", "[x]", "[x,[x,[]],x]", "[[[]]]", "[x,]", "[,x]", "[x][x]", "[xx]", "x", "[[x]", "[]]"})
    EXPECT_EQ(nested->matches(text), nested_list(text)) << text;
}

void grammar_replies(const std::vector<std::string>& extra) {
  TextModelServer served("serve-grammar", extra);
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  size_t ended = 0;
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completion");
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "Call it."}}}}} : json{{"prompt", "Call:"}};
    for (const char* gbnf : {kCall, kNested}) {
      body["structured_outputs"] = {{"grammar", gbnf}};
      for (const ChoiceText& choice : sampled_choices(port, path, body, 30, 5)) ended += expect_derived_or_prefix(gbnf, choice.text, choice.finish_reason);
    }
  }
  EXPECT_GE(ended, 6u) << "too few replies ended for the check of whole texts to say much";
}

TEST(ServeGrammar, GrammarRepliesAreDerived) { grammar_replies({}); }
TEST(ServeGrammar, BatchedGrammarRepliesAreDerived) { grammar_replies({"--sequences", "3", "--prefill-chunk", "4"}); }
TEST(ServeGrammar, SpeculatingGrammarRepliesAreDerived) { grammar_replies({"--speculate", "3"}); }

TEST(ServeGrammar, MisusesAreRefusedByName) {
  TextModelServer served("serve-grammar-refused", {});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"("structured_outputs": {"grammar": "root ::= x"})", "'structured_outputs' grammar: line 1, column 10: rule 'x' is used but not defined"},
      {R"("structured_outputs": {"grammar": "root ::= root \"a\" | \"b\""})", "rule 'root' is left-recursive"},
      {R"("structured_outputs": {"grammar": 5})", "'structured_outputs' grammar must be a string (GBNF)"},
      {R"("structured_outputs": {"grammar": "root ::= \"a\"", "regex": "a"})", "'structured_outputs' must be one of"},
      {R"("guided_grammar": "root ::= \"a\"")", "'guided_grammar' is vLLM's older field: give \"structured_outputs\": {\"grammar\": ...}"},
      {R"("structured_outputs": {"grammar": "root ::= \"a\"+"}, "min_tokens": 2)", "with structured_outputs grammar: the reply ends where its grammar lets it"},
      {R"("structured_outputs": {"grammar": "root ::= \"a\""}, "echo": true)", "a reply that begins with its prompt is not held to the grammar"},
  };
  for (const auto& [fields, named] : refused) {
    const HttpReply bad = post(port, "/v1/completions", R"({"prompt": "x", )" + fields + "}");
    EXPECT_EQ(bad.status, 400) << fields << ": " << bad.body;
    const std::string message = bad.status == 400 ? json::parse(bad.body).at("error").at("message").get<std::string>() : bad.body;
    EXPECT_NE(message.find(named), std::string::npos) << message;
  }
  // A choice of words ends by itself once one is whole: "stop", the text one of them.
  const HttpReply word = post(port, "/v1/completions", R"({"prompt": "x", "max_tokens": 30, "temperature": 0,
      "structured_outputs": {"grammar": "root ::= \"left\" | \"right\""}})");
  ASSERT_EQ(word.status, 200) << word.body;
  const ChoiceText reply = choice_texts(word, false, false, 1)[0];
  EXPECT_EQ(reply.finish_reason, "stop");
  EXPECT_TRUE(reply.text == "left" || reply.text == "right") << reply.text;
}

// tilefire run --grammar and --grammar-file, and their misuses.
TEST(CliGrammar, RunRepliesAreDerivedAndMisusesAreRefused) {
  TempDir dir("cli-grammar");
  const std::filesystem::path model = text_model(dir);
  const std::filesystem::path grammar_file = dir.path() / "nested.gbnf";
  write_file_text(grammar_file, kNested);
  size_t ended = 0;
  for (const char* seed : {"1", "2", "3", "4"}) {
    const json call = run_json({"--model", model.string(), "--prompt", "Call:", "--grammar", kCall, "--temperature", "0.8",
                                "--seed", seed, "--max-new-tokens", "30", "--threads", "1"});
    const std::string finish = call.at("finish_reason").get<std::string>();
    ended += expect_derived_or_prefix(kCall, call.at("text").get<std::string>(), finish == "stopped" ? "stop" : "length");
    const json nested = run_json({"--model", model.string(), "--prompt", "List:", "--grammar-file", grammar_file.string(),
                                  "--temperature", "0.8", "--seed", seed, "--max-new-tokens", "30", "--threads", "1"});
    const std::string nested_finish = nested.at("finish_reason").get<std::string>();
    ended += expect_derived_or_prefix(kNested, nested.at("text").get<std::string>(), nested_finish == "stopped" ? "stop" : "length");
  }
  EXPECT_GE(ended, 2u);
  write_file_text(dir.path() / "bad.gbnf", "root ::= \"a\"\nroot ::= \"b\"\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--grammar", "root ::= [a"}, "tilefire run: error: --grammar: line 1, column 10: a class is not closed"},
      {{"--grammar-file", (dir.path() / "bad.gbnf").string()}, "bad.gbnf: line 2, column 1: rule 'root' is defined twice"},
      {{"--grammar-file", (dir.path() / "missing.gbnf").string()}, "--grammar-file: cannot read"},
      {{"--grammar", "root ::= \"a\"", "--regex", "a"}, "--regex and --grammar both hold the reply to something"},
      {{"--grammar", "root ::= \"a\"+", "--min-new-tokens", "2"}, "--min-new-tokens with --grammar: the reply ends where its grammar lets it"},
  };
  expect_run_refusals({"--model", model.string(), "--max-new-tokens", "4"}, refused);
}

}  // namespace
}  // namespace tilefire::testing
