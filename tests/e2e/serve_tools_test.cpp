// tilefire serve's tool calling, its parts alone (samples/cli/serve_tools.cpp): the request's tools and
// tool_choice read or refused by name, the schema that holds a "required" reply (its tools' references
// placed), the model's calls read from its text in the hermes, llama3_json, mistral, pythonic, granite and
// qwen3_coder, deepseek_v3 and phi4_mini_json formats (pythonic's literals in pythonic_calls_test, qwen3_coder's blocks in xml_calls_test), and a streamed reply's text held back exactly
// where a call may begin: what streams, joined with what is sent at the end, is the whole reply's content,
// for every way of cutting the reply into pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "samples/cli/serve_tools.h"
#include "tests/common/input_mutator.h"
#include "tilefire/errors.h"
#include "tilefire/json_schema.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

json weather_tool() {
  return json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}})");
}
json time_tool() { return json::parse(R"({"type": "function", "function": {"name": "get_time"}})"); }

ToolCalling calling_of(ToolCalling::Choice choice, ToolCallParser parser = ToolCallParser::none, bool parallel = true) {
  ToolCalling calling;
  calling.choice = choice;
  calling.parser = parser;
  calling.parallel = parallel;
  calling.function = "get_weather";
  calling.names = {"get_weather", "get_time", "f", "g"};  // the request's tools
  return calling;
}

// The calls' names and arguments (as JSON values), ids checked on the way, each its own: "call_" and 24
// letters and digits, or with the mistral parser 9 of them (what Mistral's templates take).
std::vector<std::pair<std::string, json>> calls_of(const ToolReply& reply, ToolCallParser parser = ToolCallParser::none) {
  std::vector<std::pair<std::string, json>> calls;
  std::set<std::string> ids;
  for (const json& call : reply.tool_calls) {
    const std::string id = call.at("id").get<std::string>();
    const std::string prefix = parser == ToolCallParser::mistral ? "" : "call_";
    EXPECT_EQ(id.rfind(prefix, 0), 0u) << id;
    EXPECT_EQ(id.size(), prefix.size() + (parser == ToolCallParser::mistral ? 9u : 24u)) << id;
    EXPECT_TRUE(std::all_of(id.begin() + prefix.size(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); })) << id;
    EXPECT_TRUE(ids.insert(id).second) << "two calls of one reply have the id " << id;
    EXPECT_EQ(call.at("type"), "function");
    calls.emplace_back(call.at("function").at("name").get<std::string>(), json::parse(call.at("function").at("arguments").get<std::string>()));
  }
  return calls;
}

using Calls = std::vector<std::pair<std::string, json>>;

// Replies that are no calls in `calling`'s reading: each is answered as its text, whole.
void expect_read_as_text(const ToolCalling& calling, const std::vector<std::string>& texts) {
  for (const std::string& text : texts) {
    const ToolReply read = read_tool_reply(calling, text);
    EXPECT_EQ(read.content, text);
    EXPECT_FALSE(read.called()) << text.substr(0, 200);
  }
}

// DeepSeek's tokens around calls (a fullwidth bar, and U+2581 for a space).
const std::string kCallsBegin = "<\uff5ctool\u2581calls\u2581begin\uff5c>", kCallsEnd = "<\uff5ctool\u2581calls\u2581end\uff5c>";
const std::string kCallBegin = "<\uff5ctool\u2581call\u2581begin\uff5c>", kCallEnd = "<\uff5ctool\u2581call\u2581end\uff5c>";
const std::string kSeparator = "<\uff5ctool\u2581sep\uff5c>";

TEST(ServeTools, HermesCallsAreReadWithTheTextAroundThem) {
  const ToolCalling hermes = calling_of(ToolCalling::Choice::automatic, ToolCallParser::hermes);
  const std::string text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
                           "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  const ToolReply reply = read_tool_reply(hermes, text);
  EXPECT_EQ(reply.content, "Let me look.\n\n");
  EXPECT_EQ(calls_of(reply), (Calls{{"get_weather", {{"city", "Paris"}, {"days", 2}}}, {"get_time", json::object()}}));
  EXPECT_EQ(assistant_message(reply).at("tool_calls"), reply.tool_calls);
  EXPECT_EQ(tool_finish_reason(hermes, reply, "stop"), "tool_calls");
  EXPECT_EQ(tool_finish_reason(hermes, reply, "length"), "length");
  // Calls and whitespace alone: no content. A call without arguments takes none.
  const ToolReply only_calls = read_tool_reply(hermes, "<tool_call>{\"name\": \"get_time\"}</tool_call>\n");
  EXPECT_TRUE(only_calls.content.is_null());
  EXPECT_EQ(calls_of(only_calls), (Calls{{"get_time", json::object()}}));
  // parallel_tool_calls false: the first call alone.
  EXPECT_EQ(read_tool_reply(calling_of(ToolCalling::Choice::automatic, ToolCallParser::hermes, false), text).tool_calls.size(), 1u);
  // A reply whose calls do not read whole is its text, never dropped.
  for (const std::string broken : {"<tool_call>{\"name\": \"get_time\"}", "<tool_call>{\"name\": \"get_time\"</tool_call>",
                                   "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": 3}</tool_call>",
                                   "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "a<tool_call>[]</tool_call>",
                                   "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>",  // no such tool
                                   "<tool_call>{\"name\": \"f\", \"x\": 1}</tool_call>",  // not a call's fields
                                   "<tool_call>{\"name\": \"f\", \"arguments\": {}, \"parameters\": {}}</tool_call>"}) {
    const ToolReply read = read_tool_reply(hermes, broken);
    EXPECT_EQ(read.content, broken);
    EXPECT_FALSE(read.called()) << broken;
    EXPECT_EQ(tool_finish_reason(hermes, read, "stop"), "stop");
    EXPECT_FALSE(assistant_message(read).contains("tool_calls"));
  }
  EXPECT_EQ(read_tool_reply(hermes, "").content, "");  // an empty reply is empty text
  // Arguments nested past 400 levels are not parsed (a parse, copy or dump of them would recurse past the
  // stack): the reply is its text.
  const std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}}</tool_call>";
  EXPECT_FALSE(read_tool_reply(hermes, deep).called());
  const std::string nested = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + std::string(300, '[') + std::string(300, ']') + "}}</tool_call>";
  EXPECT_TRUE(read_tool_reply(hermes, nested).called());
}

TEST(ServeTools, Llama3CallsAreTheWholeReply) {
  const ToolCalling llama3 = calling_of(ToolCalling::Choice::automatic, ToolCallParser::llama3_json);
  const Calls weather = {{"get_weather", {{"city", "Oslo"}}}};
  EXPECT_EQ(calls_of(read_tool_reply(llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}")), weather);
  EXPECT_EQ(calls_of(read_tool_reply(llama3, " <|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}\n")), weather);
  const ToolReply two = read_tool_reply(llama3, R"({"name": "get_weather", "parameters": {"city": "{;}"}}; {"name": "get_time", "arguments": {}})");
  EXPECT_TRUE(two.content.is_null());
  EXPECT_EQ(calls_of(two), (Calls{{"get_weather", {{"city", "{;}"}}}, {"get_time", json::object()}}));
  // An answer in JSON that has a "name" is an answer: a call names a tool and holds nothing but its arguments.
  expect_read_as_text(llama3, {"The weather is fine.", "{\"name\": \"get_weather\"} and more", "{\"city\": \"Oslo\"}",
                                 "{\"name\": \"Alice\", \"age\": 30}", "{\"name\": \"get_weather\", \"age\": 30}",
                                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Os", "{\"name\": \"a\"}; x"});
}

TEST(ServeTools, MistralCallsFollowTheirTokenInEitherForm) {
  const ToolCalling mistral = calling_of(ToolCalling::Choice::automatic, ToolCallParser::mistral);
  // Tokenizer versions up to 7: one list of calls.
  const ToolReply listed =
      read_tool_reply(mistral, R"(Checking. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Lyon"}}, {"name": "get_time", "arguments": {}}])");
  EXPECT_EQ(listed.content, "Checking. ");
  EXPECT_EQ(calls_of(listed, ToolCallParser::mistral), (Calls{{"get_weather", {{"city", "Lyon"}}}, {"get_time", json::object()}}));
  EXPECT_EQ(tool_finish_reason(mistral, listed, "stop"), "tool_calls");
  // Versions 11 on: name[ARGS]arguments after a token each; whitespace alone around them is no content.
  const ToolReply named = read_tool_reply(mistral, "\n[TOOL_CALLS]get_weather[ARGS]{\"city\": \"[ARGS]\"}[TOOL_CALLS]get_time[ARGS]{}\n");
  EXPECT_TRUE(named.content.is_null());
  EXPECT_EQ(calls_of(named, ToolCallParser::mistral), (Calls{{"get_weather", {{"city", "[ARGS]"}}}, {"get_time", json::object()}}));
  EXPECT_EQ(calls_of(read_tool_reply(mistral, R"([TOOL_CALLS]{"name": "f", "arguments": {"a": 1}})"), ToolCallParser::mistral), (Calls{{"f", {{"a", 1}}}}));
  // The id Mistral's templates write after each earlier call, copied by the model, is no argument.
  EXPECT_EQ(calls_of(read_tool_reply(mistral, R"([TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "UTC"}, "id": "a1b2c3d4e"}])"), ToolCallParser::mistral),
            (Calls{{"get_time", {{"zone", "UTC"}}}}));
  // A Mistral model's calls held by a named choice have Mistral's ids too.
  EXPECT_EQ(calls_of(read_tool_reply(calling_of(ToolCalling::Choice::named, ToolCallParser::mistral), "{\"city\": \"Nice\"}"), ToolCallParser::mistral),
            (Calls{{"get_weather", {{"city", "Nice"}}}}));
  // parallel_tool_calls false: the first call alone.
  EXPECT_EQ(read_tool_reply(calling_of(ToolCalling::Choice::automatic, ToolCallParser::mistral, false), "[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{}")
                .tool_calls.size(),
            1u);
  // Not calls: the reply is its text.
  expect_read_as_text(mistral, {"No call here.", "[TOOL_CALLS]", "[TOOL_CALLS] []", "[TOOL_CALLS]get_weather[ARGS]{\"city\": ",
                                 "[TOOL_CALLS]nope[ARGS]{}", "[TOOL_CALLS]get_time[ARGS][1]", "[TOOL_CALLS]get_time[ARGS]{} and then text",
                                 "[TOOL_CALLS][{\"name\": \"get_time\", \"parameters\": {}, \"x\": 1}]", "[TOOL_CALLS] get_time {}x",
                                 "[TOOL_CALLS]get_time[ARGS]{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}"});
}

TEST(ServeTools, PythonicCallsAreTheWholeReply) {
  const ToolCalling pythonic = calling_of(ToolCalling::Choice::automatic, ToolCallParser::pythonic);
  const ToolReply two = read_tool_reply(pythonic, "[get_weather(city='Paris', days=2), get_time()]");
  EXPECT_TRUE(two.content.is_null());
  EXPECT_EQ(calls_of(two), (Calls{{"get_weather", {{"city", "Paris"}, {"days", 2}}}, {"get_time", json::object()}}));
  EXPECT_EQ(tool_finish_reason(pythonic, two, "stop"), "tool_calls");
  // Llama 4 writes its tokens around them.
  EXPECT_EQ(calls_of(read_tool_reply(pythonic, " <|python_start|>[get_time(zone=\"UTC\",)]<|python_end|>\n")), (Calls{{"get_time", {{"zone", "UTC"}}}}));
  // Not calls: the reply is its text.
  expect_read_as_text(pythonic, {"It is sunny.", "[]", "[1, 2]", "[get_time]", "[nope()]", "[get_time('UTC')]", "[get_time(zone=UTC)]",
                                 "[get_time(zone='a', zone='b')]", "[get_time()] more", "get_time()", "[get_time(zone='UTC')",
                                 "<|python_start|>[get_time()]<|python_end|> x"});
}

TEST(ServeTools, GraniteCallsAreTheWholeReply) {
  const ToolCalling granite = calling_of(ToolCalling::Choice::automatic, ToolCallParser::granite);
  const Calls two = {{"get_weather", {{"city", "Oslo"}}}, {"get_time", json::object()}};
  for (const std::string text : {R"(<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", "arguments": {}}])",
                                 " <tool_call> [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, {\"name\": \"get_time\"}]\n"}) {
    const ToolReply read = read_tool_reply(granite, text);
    EXPECT_TRUE(read.content.is_null());
    EXPECT_EQ(calls_of(read), two) << text;
    EXPECT_EQ(tool_finish_reason(granite, read, "stop"), "tool_calls");
  }
  // Not calls: the reply is its text.
  expect_read_as_text(granite, {"It is sunny.", "[{\"name\": \"get_time\", \"arguments\": {}}]", "<|tool_call|>[]", "<|tool_call|>{\"name\": \"get_time\"}",
                                 "<|tool_call|>[{\"name\": \"get_time\"}] and more", "a <|tool_call|>[{\"name\": \"get_time\"}]",
                                 "<|tool_call|>[{\"name\": \"nope\"}]", "<|tool_call|>[{\"name\": \"get_time\""});
}

// Qwen3-Coder writes each value as text; the server reads it by the type the request's schema gives the
// parameter, so "2" is a number for days and a string for a zip code.
TEST(ServeTools, Qwen3CoderCallsAreReadByTheirSchemasTypes) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}, "metric": {"type": "boolean"},
      "hours": {"type": "array", "items": {"type": "integer"}}, "when": {"anyOf": [{"type": "null"}, {"type": "string"}]}, "any": {},
      "unit": {"$ref": "#/$defs/Unit"}, "code": {"enum": ["1", "2"]}, "level": {"enum": [1, 2]}, "mode": {"const": "3"},
      "both": {"anyOf": [{"type": "integer"}], "oneOf": [{"type": "string"}]}, "loop": {"$ref": "#/$defs/Loop"}, "lost": {"$ref": "#/$defs/None"}},
      "$defs": {"Unit": {"type": "string", "enum": ["0", "1"]}, "Loop": {"$ref": "#/$defs/Loop"}}}}},
      {"type": "function", "function": {"name": "get_time"}}])");
  ReplyFormat format;
  const ToolCalling calling = read_tool_calling({{"tools", tools}}, tool_call_parser_named("qwen3_xml"), format);
  ASSERT_EQ(calling.parser, ToolCallParser::qwen3_coder);
  const std::string weather =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
      "<parameter=zip>\n95112\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=hours>\n[9, 17]\n</parameter>\n"
      "<parameter=when>\nNone\n</parameter>\n<parameter=any>\n{\"a\": 1}\n</parameter>\n<parameter=extra>\n3\n</parameter>\n"
      "<parameter=unit>\n1\n</parameter>\n<parameter=code>\n1\n</parameter>\n<parameter=level>\n1\n</parameter>\n<parameter=mode>\n3\n</parameter>\n"
      "<parameter=both>\n4\n</parameter>\n<parameter=loop>\n5\n</parameter>\n<parameter=lost>\n6\n</parameter>\n</function>\n</tool_call>";
  const ToolReply read = read_tool_reply(calling, "Checking.\n" + weather + "\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
  EXPECT_EQ(read.content, "Checking.\n\n");
  EXPECT_EQ(calls_of(read), (Calls{{"get_weather", {{"city", "San Jose"}, {"days", 2}, {"zip", "95112"}, {"metric", true}, {"hours", {9, 17}},
                                                   {"when", nullptr}, {"any", {{"a", 1}}}, {"extra", 3}, {"unit", "1"}, {"code", "1"}, {"level", 1},
                                                   {"mode", "3"}, {"both", 4}, {"loop", 5}, {"lost", 6}}},
                                   {"get_time", json::object()}}));
  EXPECT_EQ(tool_finish_reason(calling, read, "stop"), "tool_calls");
  ToolCalling one = calling;
  one.parallel = false;
  EXPECT_EQ(read_tool_reply(one, weather + weather).tool_calls.size(), 1u);
  // Not calls: the reply is its text.
  expect_read_as_text(calling, {"It is sunny.", "<tool_call>\n<function=nope>\n</function>\n</tool_call>", "<tool_call>\n<function=get_time>\n",
                                 "<function=get_time></function>", weather + "<tool_call>x</tool_call>"});
}

// DeepSeek-V3's and R1's form (as their template writes an earlier call) and V3.1's, after the reply's text.
TEST(ServeTools, DeepSeekCallsFollowTheirTokenInEitherForm) {
  const ToolCalling deepseek = calling_of(ToolCalling::Choice::automatic, tool_call_parser_named("deepseek_v31"));
  ASSERT_EQ(deepseek.parser, ToolCallParser::deepseek_v3);
  const std::string v3_weather = kCallBegin + "function" + kSeparator + "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" + kCallEnd;
  const std::string v3_time = kCallBegin + "function" + kSeparator + "get_time\n```json\n{}\n```" + kCallEnd;
  const std::string v31_weather = kCallBegin + "get_weather" + kSeparator + "{\"city\": \"Oslo\"}" + kCallEnd;
  const std::string v31_time = kCallBegin + "get_time" + kSeparator + "{}" + kCallEnd;
  const Calls two = {{"get_weather", {{"city", "Oslo"}}}, {"get_time", json::object()}};
  const std::string v3_weather_crlf = kCallBegin + "function" + kSeparator + "get_weather \r\n```json\r\n{\"city\": \"Oslo\"}\r\n```" + kCallEnd;
  for (const std::string& calls : {kCallsBegin + v3_weather + "\n" + v3_time + kCallsEnd, kCallsBegin + v31_weather + v31_time + kCallsEnd,
                                   kCallsBegin + v3_weather_crlf + "\r\n" + kCallBegin + " get_time " + kSeparator + "{}" + kCallEnd,
                                   kCallsBegin + v3_weather + v31_time, kCallsBegin + " " + v31_weather + "\n" + v3_time + kCallsEnd + "\n"}) {
    const ToolReply read = read_tool_reply(deepseek, calls);
    EXPECT_TRUE(read.content.is_null()) << calls;
    EXPECT_EQ(calls_of(read), two) << calls;
    EXPECT_EQ(tool_finish_reason(deepseek, read, "stop"), "tool_calls");
    EXPECT_EQ(read_tool_reply(deepseek, "Let me see. " + calls).content, "Let me see. ");
  }
  // A call to a tool named "function" in V3.1's form is that tool's.
  ToolCalling named_function = deepseek;
  named_function.names = {"function"};
  EXPECT_EQ(calls_of(read_tool_reply(named_function, kCallsBegin + kCallBegin + "function" + kSeparator + "{\"a\": 1}" + kCallEnd + kCallsEnd)),
            (Calls{{"function", {{"a", 1}}}}));
  // Not calls: the reply is its text.
  expect_read_as_text(deepseek, {
           "It is sunny.", kCallsBegin, kCallsBegin + kCallsEnd, kCallsBegin + v3_time + " and more", kCallsBegin + v3_time + kCallsEnd + " more",
           kCallsBegin + kCallBegin + "get_time" + kSeparator + "{", kCallsBegin + kCallBegin + "get_time{}" + kCallEnd,
           kCallsBegin + kCallBegin + "nope" + kSeparator + "{}" + kCallEnd, kCallsBegin + kCallBegin + "get_time" + kSeparator + "[]" + kCallEnd,
           kCallsBegin + kCallBegin + "function" + kSeparator + "get_time\n```json\n{}\n``" + kCallEnd, v31_time});
}

TEST(ServeTools, Phi4MiniCallsFollowTheirWord) {
  const ToolCalling phi4 = calling_of(ToolCalling::Choice::automatic, tool_call_parser_named("phi4_mini_json"));
  const Calls two = {{"get_weather", {{"city", "Oslo"}}}, {"get_time", json::object()}};
  const std::string list = R"([{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time"}])";
  for (const std::string prefix : {"", "Let me check. "}) {
    const ToolReply read = read_tool_reply(phi4, prefix + "functools" + list + "\n");
    EXPECT_EQ(read.content, prefix.empty() ? json(nullptr) : json(prefix));
    EXPECT_EQ(calls_of(read), two);
    EXPECT_EQ(tool_finish_reason(phi4, read, "stop"), "tool_calls");
  }
  // Not calls: the reply is its text.
  expect_read_as_text(phi4, {"It is sunny.", list, "functools" + list + " done", "functools []", "functools[]",
                             "functools[{\"name\": \"nope\"}]", "functools[{\"name\": \"get_time\"}", "functools{\"name\": \"get_time\"}"});
}

TEST(ServeTools, NamedAndRequiredRepliesAreTheirCalls) {
  const ToolCalling named = calling_of(ToolCalling::Choice::named);
  // A named function's reply is its arguments, cut short or not.
  for (const std::string text : {"{\"city\": \"Rome\"}", "{\"ci"}) {
    const ToolReply read = read_tool_reply(named, text);
    EXPECT_TRUE(read.content.is_null());
    ASSERT_EQ(read.tool_calls.size(), 1u);
    EXPECT_EQ(read.tool_calls[0].at("function"), json({{"name", "get_weather"}, {"arguments", text}}));
    EXPECT_EQ(tool_finish_reason(named, read, "stop"), "stop");  // OpenAI's, for a function it was told to call
  }
  const json head = named_call_head(named, "call_x");
  EXPECT_EQ(head.at("tool_calls")[0].at("function"), json({{"name", "get_weather"}, {"arguments", ""}}));
  EXPECT_EQ(head.at("tool_calls")[0].at("id"), "call_x");
  EXPECT_EQ(arguments_delta("{\"c").at("tool_calls")[0], json({{"index", 0}, {"function", {{"arguments", "{\"c"}}}}));
  const ToolCalling required = calling_of(ToolCalling::Choice::required);
  const ToolReply read = read_tool_reply(required, R"([{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Rome"}}])");
  EXPECT_EQ(calls_of(read), (Calls{{"get_time", json::object()}, {"get_weather", {{"city", "Rome"}}}}));
  EXPECT_EQ(tool_finish_reason(required, read, "stop"), "tool_calls");
  const json deltas = tool_calls_delta(read).at("tool_calls");
  ASSERT_EQ(deltas.size(), 2u);
  EXPECT_EQ(deltas[1].at("index"), 1);
  EXPECT_EQ(deltas[1].at("id"), read.tool_calls[1].at("id"));
  const ToolReply cut = read_tool_reply(required, R"([{"name": "get_ti)");
  EXPECT_EQ(cut.content, R"([{"name": "get_ti)");
  EXPECT_FALSE(cut.called());
}

// Every way of cutting each text in two or three pieces: the streamed content is a prefix of the whole
// reply's, the rest comes at the end, and nothing of a call streams as text.
TEST(ServeTools, AStreamedReplyHoldsBackExactlyWhatMayBeginACall) {
  const std::vector<std::pair<ToolCallParser, std::vector<std::string>>> cases = {
      {ToolCallParser::hermes,
       {"plain text", "a <tool_ca", "<tool_call", "x<tool_call>{\"name\": \"f\"}</tool_call>y", "<<tool_call>{\"name\": \"f\"}</tool_call>",
        "<tool_call>{\"name\": \"f\"", "< tool_call >", "a<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>{\"name\": \"g\"}</tool_call>",
        "\n\n<tool_call>{\"name\": \"f\"}</tool_call>", " \n<tool_call>{\"name\": \"f\"}</tool_call> done", "  \n", " x <tool_call>{\"name\": \"nope\"}</tool_call>"}},
      {ToolCallParser::llama3_json,
       {"plain text", "  ", " {\"name\": \"f\", \"parameters\": {}}", "<|python_tag|>{\"name\": \"f\"}", "<|pyth x", "<|python_tag|>not json",
        "{\"no\": 1}", "\n<x"}},
      {ToolCallParser::mistral,
       {"plain text", "a [TOOL_CA", "[TOOL_CALLS", "x[TOOL_CALLS]f[ARGS]{}", "[[TOOL_CALLS]f[ARGS]{}", " \n[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
        "[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{\"a\": 1}", "[TOOL_CALLS]nope[ARGS]{}", " x [TOOL_CALLS]f[ARGS]{} y", "[ TOOL_CALLS]"}},
      {ToolCallParser::granite,
       {"plain text", "  ", " <|tool_call|>[{\"name\": \"f\"}]", "<tool_call>[{\"name\": \"g\"}]", "<|tool_c x", "<tool x", "\n<x",
        "<|tool_call|>[{\"name\": \"nope\"}]"}},
      {ToolCallParser::qwen3_coder,
       {"plain text", "a <tool_ca", "x<tool_call><function=f></function></tool_call>y", "<tool_call><function=f><parameter=a>\n1\n</parameter>",
        "\n<tool_call>\n<function=g>\n</function>\n</tool_call>\n", " x <tool_call><function=nope></function></tool_call>",
        "<tool_call><function=f></function></tool_call> and <tool_call><function=g></function></tool_call>"}},
      {ToolCallParser::deepseek_v3,
       {"plain text", "a <\uff5ctool", "x" + kCallsBegin + kCallBegin + "f" + kSeparator + "{}" + kCallEnd + kCallsEnd,
        " \n" + kCallsBegin + kCallBegin + "g" + kSeparator + "{}" + kCallEnd, "a " + kCallsBegin + kCallBegin + "nope" + kSeparator + "{}" + kCallEnd,
        "\u00e9" + kCallsBegin.substr(0, 5)}},
      {ToolCallParser::phi4_mini_json,
       {"plain text", "x functools", "functool", "a functools[{\"name\": \"f\"}]", "functools[{\"name\": \"g\"}] b", " \nfunctools[{\"name\": \"f\"}]",
        "functools [1]"}},
      {ToolCallParser::pythonic,
       {"plain text", "  ", " [f(a=1), g()]", "<|python_start|>[f()]<|python_end|>", "<|python_st x", "[1] is a note", "\n<x", "[f(a='x]')]"}}};
  for (const auto& [parser, texts] : cases) {
    const ToolCalling calling = calling_of(ToolCalling::Choice::automatic, parser);
    for (const std::string& text : texts) {
      const ToolReply whole = read_tool_reply(calling, text);
      const std::string content = whole.content.is_string() ? whole.content.get<std::string>() : "";
      for (size_t a = 0; a <= text.size(); ++a)
        for (size_t b = a; b <= text.size(); ++b) {
          SCOPED_TRACE("'" + text + "' cut at " + std::to_string(a) + ", " + std::to_string(b));
          ToolCallStream stream(calling);
          std::string streamed;
          for (const std::string& piece : {text.substr(0, a), text.substr(a, b - a), text.substr(b)}) {
            streamed += stream.content(piece);
            ASSERT_EQ(content.compare(0, streamed.size(), streamed), 0) << "streamed '" << streamed << "' is not the start of '" << content << "'";
          }
          const ToolReply read = stream.finish();
          EXPECT_EQ(read.content, whole.content);
          EXPECT_EQ(read.tool_calls.size(), whole.tool_calls.size());
          EXPECT_EQ(streamed + stream.unsent_content(read), content);
        }
    }
  }
  // A named or required reply streams no text; one read for no calls streams all of it at once.
  ToolCallStream required(calling_of(ToolCalling::Choice::required));
  EXPECT_EQ(required.content("[{\"name\""), "");
  ToolCallStream none(calling_of(ToolCalling::Choice::none));
  EXPECT_EQ(none.content("<tool_call>"), "<tool_call>");
}

// Replies of every format, mutated (bytes flipped, ranges cut or repeated, the formats' markers dropped in,
// two replies joined), read by every parser: never a crash; a call names one of the tools and carries a
// JSON object's text; a reply without calls is its text; and streamed in random pieces, what streams is a
// prefix of the whole reply's content, and the rest and the calls come at the end.
TEST(ServeTools, MutatedRepliesOfEveryFormatAreReadAndStreamedAsWhole) {
  const std::vector<std::string> replies = {
      "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"x\"]}}\n</tool_call>",
      "<|python_tag|>{\"name\": \"g\", \"parameters\": {}}; {\"name\": \"f\", \"parameters\": {\"b\": null}}",
      "ok [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", "[TOOL_CALLS]g[ARGS]{\"c\": 1}[TOOL_CALLS]f[ARGS]{}",
      "<|python_start|>[f(a='x', b=[1, 2.5, None]), g()]<|python_end|>", "<|tool_call|>[{\"name\": \"g\", \"arguments\": {\"d\": true}}]",
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\ntext\n</function>\n</tool_call>",
      kCallsBegin + kCallBegin + "function" + kSeparator + "f\n```json\n{\"e\": \"```\"}\n```" + kCallEnd + "\n" + kCallBegin + "g" + kSeparator + "{}" + kCallEnd + kCallsEnd,
      "I will. functools[{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": []}}}]", "Plain text, \u00e9 and {braces} [and] <tags>."};
  const std::vector<std::string> markers = {"<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<|python_start|>",
                                            "<|python_end|>", "<|tool_call|>", "<function=f>", "</function>", "<parameter=a>", "</parameter>",
                                            kCallsBegin, kCallBegin, kSeparator, kCallEnd, kCallsEnd, "functools[", "```json\n", "{", "]", "\"", ";"};
  const std::vector<ToolCallParser> parsers = {ToolCallParser::hermes, ToolCallParser::llama3_json, ToolCallParser::mistral, ToolCallParser::pythonic,
                                               ToolCallParser::granite, ToolCallParser::qwen3_coder, ToolCallParser::deepseek_v3, ToolCallParser::phi4_mini_json};
  const std::set<std::string> names = {"get_weather", "get_time", "f", "g"};
  size_t called = 0;
  for (uint64_t seed = 0; seed < testing::fuzz_case_count(2000); ++seed) {
    testing::InputMutator mutator(seed);
    std::string text = replies[mutator.below(replies.size())];
    if (mutator.one_in(4)) text += replies[mutator.below(replies.size())];
    if (mutator.one_in(2)) text = mutator.mutate_bytes(text);
    for (uint64_t k = mutator.below(3); k > 0; --k) text.insert(mutator.below(text.size() + 1), markers[mutator.below(markers.size())]);
    SCOPED_TRACE("seed " + std::to_string(seed) + " (" + mutator.describe() + "): " + json(text).dump(-1, ' ', false, json::error_handler_t::replace));
    for (const ToolCallParser parser : parsers) {
      SCOPED_TRACE("parser " + std::to_string(int(parser)));
      const ToolCalling calling = calling_of(ToolCalling::Choice::automatic, parser);
      const ToolReply whole = read_tool_reply(calling, text);
      called += whole.called();
      if (!whole.called()) {
        EXPECT_EQ(whole.content, text);
      }
      for (const json& call : whole.tool_calls) {
        EXPECT_TRUE(names.count(call.at("function").at("name").get<std::string>())) << call.dump();
        EXPECT_TRUE(json::parse(call.at("function").at("arguments").get<std::string>(), nullptr, false).is_object()) << call.dump();
      }
      const std::string content = whole.content.is_string() ? whole.content.get<std::string>() : "";
      ToolCallStream stream(calling);
      std::string streamed;
      for (size_t at = 0; at < text.size();) {
        const size_t piece = 1 + mutator.below(8);
        streamed += stream.content(text.substr(at, piece));
        at += piece;
        ASSERT_EQ(content.compare(0, streamed.size(), streamed), 0) << "streamed '" << streamed << "' is not the start of '" << content << "'";
      }
      const ToolReply read = stream.finish();
      EXPECT_EQ(read.content, whole.content);
      EXPECT_EQ(read.tool_calls.size(), whole.tool_calls.size());
      EXPECT_EQ(streamed + stream.unsent_content(read), content);
    }
  }
  EXPECT_GT(called, testing::fuzz_case_count(2000) / 10) << "some mutated replies should still hold calls";
}

// read_tool_calling's verdict on a body: the message of its refusal, or "" when it reads.
std::string refusal(const json& body, ToolCallParser parser = ToolCallParser::hermes, ReplyFormat format = {}) {
  try {
    read_tool_calling(body, parser, format);
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

TEST(ServeTools, ToolsAndChoicesThatCannotBeHonouredAreRefusedByName) {
  const json tools = json::array({weather_tool(), time_tool()});
  const std::string weather = weather_tool().dump(), both = tools.dump();
  const std::string unheld = R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {"type": "null"}}}})";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"tools": )" + weather + "}", "'tools' must be a list of 1 to 128 tools"},
      {R"({"tools": []})", "'tools' must be a list of 1 to 128 tools"},
      {R"({"tools": [{"type": "code_interpreter"}]})", "'tools[0]' must be {\"type\": \"function\""},
      {R"({"tools": [{"type": "function", "function": {"name": "get weather"}}]})", "'tools[0].function.name' must be 1 to 64 letters"},
      {R"({"tools": [)" + weather + "," + weather + "]}", "'tools[1].function.name' is 'get_weather', the name of an earlier tool"},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "returns": "x"}}]})", "'tools[0].function' has \"returns\""},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]})",
       "'tools[0].function.parameters' must be a JSON Schema with \"type\": \"object\""},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"anyOf": [{"type": "object"}]}}}]})",
       "'tools[0].function.parameters' must be a JSON Schema with \"type\": \"object\""},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]})",
       "'tools[0].function.parameters' must be a JSON Schema object"},
      {R"({"tools": [{"type": "function", "function": {"name": "f"}, "cache": true}]})", "'tools[0]' has \"cache\""},
      {R"({"tool_choice": "any", "tools": )" + both + "}", "'tool_choice' must be \"none\", \"auto\", \"required\""},
      {R"({"tool_choice": {"type": "function", "function": {"name": "get_date"}}, "tools": )" + both + "}",
       "names the function 'get_date', which no tool is"},
      {R"({"tool_choice": "required"})", "'tool_choice' is \"required\", and the request gives no tools"},
      {R"({"parallel_tool_calls": "no", "tools": )" + both + "}", "'parallel_tool_calls' must be true or false"},
      {R"({"functions": [{"name": "f"}]})", "'functions' is OpenAI's older field: give \"tools\""},
      {R"({"function_call": "auto"})", "'function_call' is OpenAI's older field: give \"tool_choice\""},
      {R"({"tool_choice": "required", "tools": [)" + unheld + "]}", "'tools' is a schema the reply cannot be held to: "},
      {R"({"tool_choice": {"type": "function", "function": {"name": "f"}}, "tools": [)" + unheld + "]}",
       "'tools[0].function.parameters' is a schema the reply cannot be held to: "},
  };
  for (const auto& [body, expected] : refused)
    EXPECT_NE(refusal(json::parse(body)).find(expected), std::string::npos) << body << "\ngot: " << refusal(json::parse(body));
  // "auto", the default with tools, needs a parser; a format beside a choice that reads calls is refused.
  EXPECT_NE(refusal({{"tools", tools}}, ToolCallParser::none).find("start the server with --tool-call-parser"), std::string::npos);
  ReplyFormat json_object;
  json_object.named = "response_format json_object";
  EXPECT_NE(refusal({{"tools", tools}, {"tool_choice", "required"}}, ToolCallParser::hermes, json_object)
                .find("and response_format json_object holds the reply too"),
            std::string::npos);
  EXPECT_EQ(refusal({{"tools", tools}, {"tool_choice", "none"}}, ToolCallParser::none, json_object), "");
  EXPECT_EQ(refusal({{"tools", tools}}), "");
  EXPECT_EQ(refusal(json::object(), ToolCallParser::none), "");
}

TEST(ServeTools, NamedAndRequiredChoicesHoldTheReplyToTheToolsSchemas) {
  // A tool's references to its own $defs still resolve inside the required list's schema.
  // Names of properties and $defs that are keywords elsewhere are names: their schemas' references move too.
  const json counted = json::parse(R"({"type": "function", "function": {"name": "count", "parameters": {"type": "object",
      "properties": {"n": {"$ref": "#/$defs/small"}, "unit": {"const": {"$ref": "#/kept"}}, "default": {"$ref": "#/$defs/const"}},
      "required": ["n"], "$defs": {"small": {"type": "integer", "minimum": 0, "maximum": 9}, "const": {"$ref": "#/$defs/small"}}}}})");
  ReplyFormat format;
  const ToolCalling required = read_tool_calling({{"tools", {time_tool(), counted}}, {"tool_choice", "required"}}, ToolCallParser::none, format);
  EXPECT_EQ(required.choice, ToolCalling::Choice::required);
  EXPECT_EQ(format.named, "tool_choice required");
  ASSERT_TRUE(format.schema);
  auto accepts = [](const std::shared_ptr<const JsonSchema>& schema, const std::string& text) {
    JsonSchemaMatcher matcher(schema);
    JsonSchemaBytes state = matcher.start();
    return state.feed(text) && state.complete();
  };
  EXPECT_TRUE(accepts(format.schema, R"([{"name":"count","parameters":{"n":7}},{"name":"get_time","parameters":{}}])"));
  EXPECT_TRUE(accepts(format.schema, R"([{"name":"count","parameters":{"n":7,"unit":{"$ref":"#/kept"}}}])"));
  EXPECT_TRUE(accepts(format.schema, R"([{"name":"count","parameters":{"n":7,"default":3}}])"));
  EXPECT_FALSE(accepts(format.schema, R"([{"name":"count","parameters":{"n":7,"default":"3"}}])"));
  EXPECT_FALSE(accepts(format.schema, R"([{"name":"count","parameters":{"n":12}}])"));
  EXPECT_FALSE(accepts(format.schema, R"([{"name":"count","parameters":{"n":"7"}}])"));
  EXPECT_FALSE(accepts(format.schema, R"([{"name":"get_date","parameters":{}}])"));
  EXPECT_FALSE(accepts(format.schema, "[]"));
  // parallel_tool_calls false: one call.
  ReplyFormat one;
  read_tool_calling({{"tools", {time_tool(), counted}}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}, ToolCallParser::none, one);
  EXPECT_TRUE(accepts(one.schema, R"([{"name":"get_time","parameters":{}}])"));
  EXPECT_FALSE(accepts(one.schema, R"([{"name":"get_time","parameters":{}},{"name":"get_time","parameters":{}}])"));
  // A named function: its parameters; one without parameters takes none.
  ReplyFormat named;
  const ToolCalling calling =
      read_tool_calling({{"tools", {time_tool(), counted}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "count"}}}}}}, ToolCallParser::none, named);
  EXPECT_EQ(calling.function, "count");
  EXPECT_EQ(named.named, "tool_choice function count");
  EXPECT_TRUE(accepts(named.schema, R"({"n":3})"));
  EXPECT_FALSE(accepts(named.schema, R"({"n":30})"));
  ReplyFormat no_parameters;
  read_tool_calling({{"tools", {time_tool()}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}, ToolCallParser::none, no_parameters);
  EXPECT_TRUE(accepts(no_parameters.schema, "{}"));
  EXPECT_FALSE(accepts(no_parameters.schema, R"({"a":1})"));
  // Parameters {}: any object, and only an object.
  ReplyFormat any_object;
  read_tool_calling(json::parse(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}}})"), ToolCallParser::none, any_object);
  EXPECT_TRUE(accepts(any_object.schema, R"({"a":[1]})"));
  EXPECT_FALSE(accepts(any_object.schema, "null"));
  EXPECT_FALSE(accepts(any_object.schema, "[]"));
}

TEST(ServeTools, EarlierCallsReachTheTemplateWithTheirArgumentsAsObjects) {
  const json messages = json::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  const json given = template_tool_calls(messages);
  EXPECT_EQ(given[1].at("tool_calls")[0].at("function").at("arguments"), json({{"city", "Paris"}}));
  EXPECT_EQ(given[2], messages[2]);
  json no_arguments = messages;  // "" is no arguments, as vLLM reads it
  no_arguments[1]["tool_calls"][0]["function"]["arguments"] = "";
  EXPECT_EQ(template_tool_calls(no_arguments)[1].at("tool_calls")[0].at("function").at("arguments"), json::object());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"{\"city\": ", "'messages[1].tool_calls[0].function.arguments' must be a JSON object's text"},
      {"[1]", "'messages[1].tool_calls[0].function.arguments' must be a JSON object's text"},
      {"{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}", "'messages[1].tool_calls[0].function.arguments' is nested past 400 levels"}};
  for (const auto& [arguments, expected] : refused) {
    json broken = messages;
    broken[1]["tool_calls"][0]["function"]["arguments"] = arguments;
    try {
      template_tool_calls(broken);
      ADD_FAILURE() << "arguments " << arguments.substr(0, 40) << " were taken";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tilefire::cli
