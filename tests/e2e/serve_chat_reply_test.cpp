// How tilefire serve makes a chat reply's text into OpenAI's message (samples/cli/serve_reasoning.cpp,
// serve_chat_reply.cpp): the thinking split off by each reasoning parser, and for every way of cutting a
// reply into pieces, the streamed deltas joined are the whole reply's message (thinking, content and
// calls), with nothing of a tag or a call streamed as text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "samples/cli/serve_chat_reply.h"
#include "samples/cli/serve_reasoning.h"
#include "tilefire/errors.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

json text_or_null(const char* text) { return text ? json(text) : json(nullptr); }

TEST(ServeReasoning, EachParserSplitsTheThinkingFromTheAnswer) {
  struct Case {
    ReasoningParser parser;
    std::string text;
    const char* reasoning;  // null: none
    const char* content;
  };
  const std::vector<Case> cases = {
      {ReasoningParser::qwen3, "<think>plan</think>\n\nanswer", "plan", "\n\nanswer"},
      {ReasoningParser::qwen3, "answer", nullptr, "answer"},
      {ReasoningParser::qwen3, "<think>cut sho", "cut sho", nullptr},  // max_tokens inside the thinking
      {ReasoningParser::qwen3, "<think></think>a", "", "a"},
      {ReasoningParser::qwen3, " <think>x</think>", nullptr, " <think>x</think>"},  // not the reply's opening
      {ReasoningParser::qwen3, "<think>a</think>b</think>c", "a", "b</think>c"},
      {ReasoningParser::qwen3, "", nullptr, ""},
      {ReasoningParser::deepseek_r1, "plan</think>answer", "plan", "answer"},
      {ReasoningParser::deepseek_r1, "<think>plan</think>answer", "plan", "answer"},
      {ReasoningParser::deepseek_r1, "plan", "plan", nullptr},
      {ReasoningParser::deepseek_r1, "</think>", "", nullptr},
      {ReasoningParser::deepseek_r1, "<thi", "<thi", nullptr},
      {ReasoningParser::qwen3, "<thi", nullptr, "<thi"},
      {ReasoningParser::none, "<think>plan</think>answer", nullptr, "<think>plan</think>answer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const ReasonedReply split = split_reasoning(c.parser, c.text);
    EXPECT_EQ(split.reasoning, text_or_null(c.reasoning));
    EXPECT_EQ(split.content, text_or_null(c.content));
    // Every cut in three pieces streams the same, and what has gone out is always the start of the whole.
    const std::string reasoning = c.reasoning ? c.reasoning : "", content = c.content ? c.content : "";
    for (size_t a = 0; a <= c.text.size(); ++a)
      for (size_t b = a; b <= c.text.size(); ++b) {
        ReasoningStream stream(c.parser);
        std::string thought, said;
        for (const std::string& piece : {c.text.substr(0, a), c.text.substr(a, b - a), c.text.substr(b)}) {
          const ReasoningStream::Pieces out = stream.add(piece);
          thought += out.reasoning;
          said += out.content;
          ASSERT_EQ(reasoning.compare(0, thought.size(), thought), 0) << "cut at " << a << ", " << b << ": thought '" << thought << "'";
          ASSERT_EQ(content.compare(0, said.size(), said), 0) << "cut at " << a << ", " << b << ": said '" << said << "'";
        }
        const ReasoningStream::Pieces rest = stream.finish();
        EXPECT_EQ(thought + rest.reasoning, reasoning) << "cut at " << a << ", " << b;
        EXPECT_EQ(said + rest.content, content) << "cut at " << a << ", " << b;
      }
  }
  EXPECT_THROW(reasoning_parser_named("granite"), InputError);
  EXPECT_EQ(reasoning_parser_named("deepseek_r1"), ReasoningParser::deepseek_r1);
}

// The usage's reasoning_tokens: the tokens up to the one that closes the thinking, written out by hand
// for replies cut into tokens in several ways.
TEST(ServeReasoning, TheThinkingsTokensAreCounted) {
  struct Case {
    ReasoningParser parser;
    std::vector<std::string> tokens;
    size_t reasoning_tokens;
  };
  const std::vector<Case> cases = {
      {ReasoningParser::qwen3, {"<think>", "plan", "</think>", "\n\n", "answer"}, 3},
      {ReasoningParser::qwen3, {"<think>", "plan", "</", "think>", "answer"}, 4},          // the tag across two tokens
      {ReasoningParser::qwen3, {"<think>", "plan</think>ans", "wer"}, 2},                 // a token both sides of it
      {ReasoningParser::qwen3, {"<think>plan</think>answer"}, 1},
      {ReasoningParser::qwen3, {"<think>", "cut", " short"}, 3},                          // max_tokens inside the thinking
      {ReasoningParser::qwen3, {"<think>", "", "plan", "", "</think>", "", "a"}, 5},       // tokens without text (a held byte)
      {ReasoningParser::qwen3, {"answer", "<think>", "x", "</think>"}, 0},                // no thinking: not the opening
      {ReasoningParser::qwen3, {"<think>", "</think>", "a"}, 2},                          // an empty thinking still took its tokens
      {ReasoningParser::qwen3, {"<think>", "a", "</think>", "b", "</think>"}, 3},         // the first </think> closes it
      {ReasoningParser::qwen3, {}, 0},
      {ReasoningParser::deepseek_r1, {"plan", "</think>", "answer"}, 2},
      {ReasoningParser::deepseek_r1, {"<think>", "plan", "</think>", "answer"}, 3},
      {ReasoningParser::deepseek_r1, {"all", " thinking"}, 2},
      {ReasoningParser::deepseek_r1, {"</think>", "a"}, 1},
      {ReasoningParser::none, {"<think>", "plan", "</think>", "answer"}, 0},
  };
  for (const Case& c : cases) {
    std::string text;
    for (const std::string& t : c.tokens) text += t + "|";
    SCOPED_TRACE(text);
    EXPECT_EQ(reasoning_token_count(c.parser, c.tokens), c.reasoning_tokens);
  }
}

// A streamed message's deltas joined: thinking, content (null when none), calls' names and arguments.
struct Joined {
  std::string reasoning, content;
  std::vector<std::string> names, arguments;
};
void join(Joined& joined, const json& delta) {
  if (delta.contains("reasoning_content")) joined.reasoning += delta.at("reasoning_content").get<std::string>();
  if (delta.contains("content") && delta.at("content").is_string()) joined.content += delta.at("content").get<std::string>();
  for (const json& call : delta.value("tool_calls", json::array())) {
    const size_t k = call.at("index").get<size_t>();
    if (k >= joined.names.size()) {
      joined.names.resize(k + 1);
      joined.arguments.resize(k + 1);
    }
    if (call.at("function").contains("name")) joined.names[k] = call.at("function").at("name").get<std::string>();
    joined.arguments[k] += call.at("function").value("arguments", "");
  }
}

ToolCalling automatic(ToolCallParser parser) {
  ToolCalling calling;
  calling.choice = ToolCalling::Choice::automatic;
  calling.parser = parser;
  calling.names = {"get_time"};
  return calling;
}

// A named or required choice: a reply held by a format, which a reasoning model may think before
// (serve_thinking_first.h).
ToolCalling held(ToolCalling::Choice choice) {
  ToolCalling calling = automatic(ToolCallParser::none);
  calling.choice = choice;
  calling.function = "get_time";
  return calling;
}

// Every parser of thinking with every reading of calls, each reply cut in two at every byte, ended by
// itself ("stop") or by max_tokens ("length", which calls do not change).
TEST(ServeChatReply, AStreamedMessageIsTheWholeOnesForEveryCut) {
  const std::string call = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  const std::string llama_call = "{\"name\": \"get_time\", \"parameters\": {}}";
  const std::string mistral_call = "[TOOL_CALLS]get_time[ARGS]{}";
  const std::string pythonic_call = "[get_time()]";
  const std::string required_call = "[{\"name\": \"get_time\", \"parameters\": {}}]";
  const std::string granite_call = "<|tool_call|>[{\"name\": \"get_time\", \"arguments\": {}}]";
  const std::string deepseek_call =
      "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>get_time<\uff5ctool\u2581sep\uff5c>{}<\uff5ctool\u2581call\u2581end\uff5c>";
  const std::string qwen3_coder_call = "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>";
  const std::vector<std::string> texts = {"<think>hmm</think>\n" + call, "<think>hmm</think>fine", "<think>cut", "plain " + call, "",
                                          "<think>a <tool_call></think>b", "<thin", "<think>x</thi", "plan</think>" + llama_call,
                                          "<think>x</think> " + llama_call, "plan</think>\n" + call + " after", "<think>a</think>b " + mistral_call,
                                          "<think>" + mistral_call + "</think>" + mistral_call, "plan</think>" + pythonic_call, "<think>x</think>\n" + pythonic_call,
                                          "<think>x</think>" + required_call, "plan</think>{\"zone\": \"UTC\"}", required_call,
                                          "<think>x</think>\n" + granite_call, "<think>x</think>\nok " + qwen3_coder_call, "plan</think>" + deepseek_call, "<think>f</think>functools[{\"name\": \"get_time\"}]"};
  for (const ReasoningParser reasoning : {ReasoningParser::qwen3, ReasoningParser::deepseek_r1, ReasoningParser::none})
    for (const ToolCalling& calling : {automatic(ToolCallParser::hermes), automatic(ToolCallParser::llama3_json), automatic(ToolCallParser::mistral),
                                       automatic(ToolCallParser::pythonic), automatic(ToolCallParser::granite),
                                       automatic(ToolCallParser::qwen3_coder), automatic(ToolCallParser::deepseek_v3),
                                       automatic(ToolCallParser::phi4_mini_json), held(ToolCalling::Choice::named), held(ToolCalling::Choice::required),
                                       ToolCalling{}})
      for (const std::string& text : texts)
        for (const std::string ended : {"stop", "length"}) {
          SCOPED_TRACE(text + ", " + ended);
          std::string whole_finish = ended;
          const json message = ChatReplyReader(calling, reasoning).message(text, whole_finish);
          EXPECT_EQ(message.contains("reasoning_content"), reasoning != ReasoningParser::none);
          if (ended == "length") {
            EXPECT_EQ(whole_finish, "length");
          }
          for (size_t a = 0; a <= text.size(); ++a) {
            ChatReplyReader reader(calling, reasoning);
            Joined joined;
            join(joined, reader.head());
            join(joined, reader.delta(text.substr(0, a)));
            join(joined, reader.delta(text.substr(a)));
            std::string finish = ended;
            for (const json& delta : reader.finish(finish)) join(joined, delta);
            EXPECT_EQ(finish, whole_finish);
            EXPECT_EQ(joined.reasoning, message.value("reasoning_content", json("")).is_string() ? message.value("reasoning_content", "") : "");
            EXPECT_EQ(joined.content, message.at("content").is_string() ? message.at("content").get<std::string>() : "");
            const json calls = message.value("tool_calls", json::array());
            ASSERT_EQ(joined.names.size(), calls.size());
            for (size_t k = 0; k < calls.size(); ++k) {
              EXPECT_EQ(joined.names[k], calls[k].at("function").at("name"));
              EXPECT_EQ(joined.arguments[k], calls[k].at("function").at("arguments"));
            }
          }
        }
  const ToolCalling hermes = automatic(ToolCallParser::hermes);
  // The thinking, then a call: no content, the call read from the answer alone.
  std::string finish = "stop";
  const json message = ChatReplyReader(hermes, ReasoningParser::qwen3).message("<think>hmm</think>\n" + call, finish);
  EXPECT_EQ(message.at("reasoning_content"), "hmm");
  EXPECT_TRUE(message.at("content").is_null());
  EXPECT_EQ(message.at("tool_calls").size(), 1u);
  EXPECT_EQ(finish, "tool_calls");
  // A call inside the thinking is thought, not made.
  finish = "stop";
  const json thought = ChatReplyReader(hermes, ReasoningParser::qwen3).message("<think>" + call + "</think>ok", finish);
  EXPECT_FALSE(thought.contains("tool_calls"));
  EXPECT_EQ(thought.at("content"), "ok");
  EXPECT_EQ(finish, "stop");
  // Cut inside the thinking: the content is null (no answer yet), not empty text; no thinking: null reasoning.
  finish = "length";
  const json cut = ChatReplyReader(hermes, ReasoningParser::qwen3).message("<think>still", finish);
  EXPECT_TRUE(cut.at("content").is_null());
  EXPECT_EQ(cut.at("reasoning_content"), "still");
  const json plain = ChatReplyReader(ToolCalling{}, ReasoningParser::qwen3).message("hi", finish);
  EXPECT_TRUE(plain.at("reasoning_content").is_null());
  EXPECT_EQ(plain.at("content"), "hi");
  // A named call held after the thinking: its arguments are the answer alone, streamed after the thinking.
  finish = "stop";
  const std::string reply = "<think>which zone?</think>{\"zone\": \"UTC\"}";
  const json named = ChatReplyReader(held(ToolCalling::Choice::named), ReasoningParser::qwen3).message(reply, finish);
  EXPECT_EQ(named.at("reasoning_content"), "which zone?");
  EXPECT_TRUE(named.at("content").is_null());
  ASSERT_EQ(named.at("tool_calls").size(), 1u);
  EXPECT_EQ(named.at("tool_calls")[0].at("function"), json({{"name", "get_time"}, {"arguments", "{\"zone\": \"UTC\"}"}}));
  EXPECT_EQ(finish, "stop");
  ChatReplyReader streamed(held(ToolCalling::Choice::named), ReasoningParser::qwen3);
  EXPECT_EQ(streamed.delta("<think>which zone?</think>"), json({{"reasoning_content", "which zone?"}}));
  EXPECT_EQ(streamed.delta("{\"zone\""), arguments_delta("{\"zone\""));
}

}  // namespace
}  // namespace tilefire::cli
