// Qwen3-Coder's XML-like tool calls (samples/cli/xml_calls.cpp): the blocks and the text around them,
// a value's end where the model wrote its end tag and where it left it out, what is not a call, each
// value read as its parameter's schema types it, and calls written by a template of Qwen3-Coder's shape
// (its way of writing each value) read back to the arguments they were made from, for random arguments.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/jinja.h"
#include "samples/cli/xml_calls.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;
using Parameters = std::vector<std::pair<std::string, std::string>>;

TEST(XmlCalls, BlocksAreReadWithTheTextAroundThem) {
  const std::string text =
      "I will look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call> done";
  const std::optional<XmlCallReply> reply = xml_calls(text);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->content, "I will look.\n\n done");
  ASSERT_EQ(reply->calls.size(), 2u);
  EXPECT_EQ(reply->calls[0].name, "get_weather");
  EXPECT_EQ(reply->calls[0].parameters, (Parameters{{"city", "Paris"}, {"days", "2"}}));
  EXPECT_EQ(reply->calls[1].name, "get_time");
  EXPECT_TRUE(reply->calls[1].parameters.empty());
}

TEST(XmlCalls, AValueEndsAtItsEndTagOrWhereTheModelLeftItOut) {
  struct Case {
    std::string block;  // inside <tool_call>...</tool_call>
    Parameters parameters;
  };
  const std::vector<Case> cases = {
      // One line break at each end is the template's; the rest is the value's, whitespace and all.
      {"<function=f>\n<parameter=code>\n\n  x = 1\n\n</parameter>\n</function>", {{"code", "\n  x = 1\n"}}},
      {"<function=f><parameter=a>1</parameter><parameter=b></parameter></function>", {{"a", "1"}, {"b", ""}}},
      // A value may hold the function's end tag, and other tags.
      {"<function=f>\n<parameter=xml>\n<function=g></function>\n</parameter>\n</function>\n", {{"xml", "<function=g></function>"}}},
      {"<function=f>\n<parameter=t>\n<tool_call <parameter x\n</parameter>\n</function>", {{"t", "<tool_call <parameter x"}}},
      // The end tag left out: the value runs to the next parameter, or to the function's end.
      {"<function=f>\n<parameter=a>\n1\n<parameter=b>\n2\n</parameter>\n</function>", {{"a", "1"}, {"b", "2"}}},
      {"<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\ntwo\n</function>", {{"a", "1"}, {"b", "two"}}},
      {"<function=f><parameter=a>1<parameter=b>2</parameter><parameter=c>3</function>", {{"a", "1"}, {"b", "2"}, {"c", "3"}}},
      {"<function=f><parameter=a>1</parameter><parameter=b>2<parameter=c>3</parameter><parameter=d>4</function>",
       {{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}}},
      {"\n <function=f>\n</function>\n ", {}},
      {"<function=name with spaces>\n</function>", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.block);
    const std::optional<XmlCallReply> reply = xml_calls("<tool_call>" + c.block + "</tool_call>");
    ASSERT_TRUE(reply);
    ASSERT_EQ(reply->calls.size(), 1u);
    EXPECT_EQ(reply->calls[0].parameters, c.parameters);
    EXPECT_EQ(reply->content, "");
  }
  EXPECT_EQ(xml_calls("<tool_call><function=name with spaces></function></tool_call>")->calls[0].name, "name with spaces");
}

TEST(XmlCalls, WhatIsNotACallIsNone) {
  for (const std::string text : {
           "plain text", "", "<function=f></function>",                        // no block
           "<tool_call><function=f></function>",                                // not closed
           "<tool_call></tool_call>", "<tool_call>text</tool_call>",            // no function
           "<tool_call><function=></function></tool_call>",                     // no name
           "<tool_call><function=f\n></function></tool_call>",                  // a name across lines
           "<tool_call><function=f></function> x</tool_call>",                  // text after the function
           "<tool_call><function=f></tool_call>",                               // the function not closed
           "<tool_call><function=f>x<parameter=a>1</parameter></function></tool_call>",  // text before a parameter
           "<tool_call><function=f><parameter=a>1</parameter>x</function></tool_call>",  // and after one
           "<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>",  // given twice
           "<tool_call><function=f><parameter=>1</parameter></function></tool_call>",
           "<tool_call><function=f></function></tool_call><tool_call>broken</tool_call>"}) {
    EXPECT_FALSE(xml_calls(text)) << text;
  }
}

TEST(XmlCalls, AValueIsReadAsItsParameterIsTyped) {
  struct Case {
    std::string value;
    json type;
    json read;
  };
  const std::vector<Case> cases = {
      {"5", "string", "5"}, {"5", "integer", 5}, {"5", "number", 5}, {"2.5", "number", 2.5}, {"2.5", "integer", 2.5},  // not an integer: as it reads
      {"1e+20", "number", 1e20}, {"inf", "number", "inf"}, {"05", "integer", "05"},
      // Whitespace around a value is the value's only as a string.
      {" 5\n", "integer", 5}, {"\n[1]\t", "array", {1}}, {" True\n", "boolean", true}, {" None", "null", nullptr}, {" x\n", "string", " x\n"},
      // An integer past 64 bits would lose its digits as a float: it stays text.
      {"123456789012345678901234567890", "integer", "123456789012345678901234567890"},
      {"123456789012345678901234567890", "number", "123456789012345678901234567890"},
      {"-123456789012345678901234567890", nullptr, "-123456789012345678901234567890"}, {"18446744073709551615", "integer", 18446744073709551615u},
      {"1.5e300", "number", 1.5e300}, {"[1, 2]", json({"integer", "integer", "array", "array"}), {1, 2}},
      {"True", "boolean", true}, {"false", "boolean", false}, {"yes", "boolean", "yes"},
      {"None", "null", nullptr}, {"null", json({"string", "null"}), nullptr}, {"null", "string", "null"},
      {"{\"a\": [1]}", "object", {{"a", {1}}}}, {"[1, \"x\"]", "array", {1, "x"}}, {"[1]", "object", {1}}, {"{\"a\":", "object", "{\"a\":"},
      {"7", json({"string", "integer"}), 7}, {"x", json({"string", "integer"}), "x"}, {"x", json({"integer", "boolean"}), "x"},
      // No type named (the property has none, or is no property): a number, boolean, null, object or list, else the text.
      {"7", nullptr, 7}, {"True", nullptr, true}, {"[\"a\"]", nullptr, {"a"}}, {"Paris", nullptr, "Paris"}, {"\"q\"", nullptr, "\"q\""},
      {"", nullptr, ""}, {"1", json::array(), 1},
  };
  for (const Case& c : cases) EXPECT_EQ(xml_argument_value(c.value, c.type), c.read) << c.value << " as " << c.type.dump();
  // A value nested past the server's bound is text, not a parse that runs out of stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(xml_argument_value(deep, "array"), deep);
}

// A template of Qwen3-Coder's shape writes each call of an assistant message (a mapping or a list as JSON,
// anything else as Python's str()), rendered by Tilefire's Jinja; read back with each parameter's type,
// the calls are the arguments they were made from: strings of random letters, line breaks, spaces and
// markup, integers, floats, booleans, null, objects and lists.
TEST(XmlCalls, CallsATemplateWritesReadBackToTheirArguments) {
  const jinja::Template writer(
      "{%- for message in messages %}{%- for tool_call in message.tool_calls %}"
      "{{- '\\n<tool_call>\\n<function=' + tool_call.function.name + '>\\n' }}"
      "{%- for args_name, args_value in tool_call.function.arguments|items %}"
      "{{- '<parameter=' + args_name + '>\\n' }}"
      "{%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}"
      "{{- args_value }}{{- '\\n</parameter>\\n' }}"
      "{%- endfor %}{{- '</function>\\n</tool_call>' }}{%- endfor %}{%- endfor %}",
      "qwen3-coder-shaped template");
  std::mt19937 random(20261207);
  // Pieces of strings: all but the three tags a value cannot hold (xml_calls.h).
  const std::vector<std::string> pieces = {"a", "b", " ", "\n", "\t", "<", ">", "=", "/", "\"", "'", "{", "}", "[", "]", "9",
                                           "</function>", "<function=g>", "<tool_call>", "</parameter", "parameter="};
  auto random_string = [&] {
    std::string s;
    for (int n = random() % 12; n > 0; --n) s += pieces[random() % pieces.size()];
    for (const std::string tag : {"</parameter>", "<parameter=", "</tool_call>"})  // pieces may join into one
      for (size_t at; (at = s.find(tag)) != std::string::npos;) s.erase(at, 1);
    return s;
  };
  const std::vector<std::string> types = {"string", "integer", "number", "boolean", "null", "object", "array"};
  for (int round = 0; round < 300; ++round) {
    nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
    json schema_types = json::object();
    for (int p = random() % 5; p > 0; --p) {
      const std::string key = "p" + std::to_string(p);
      const std::string& type = types[random() % types.size()];
      schema_types[key] = type;
      if (type == "string") arguments[key] = random_string();
      if (type == "integer") arguments[key] = int64_t(random()) - int64_t(1u << 31);
      if (type == "number") arguments[key] = std::ldexp(double(random()), int(random() % 80) - 40);
      if (type == "boolean") arguments[key] = bool(random() % 2);
      if (type == "null") arguments[key] = nullptr;
      if (type == "object") arguments[key] = {{"k", random_string()}, {"n", {1, 2.5, nullptr}}};
      if (type == "array") arguments[key] = {random_string(), random() % 100, json::object()};
    }
    nlohmann::ordered_json context = {{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", arguments}}}}}}}}}};
    const std::string text = writer.render(context);
    SCOPED_TRACE(text);
    const std::optional<XmlCallReply> reply = xml_calls(text);
    ASSERT_TRUE(reply);
    ASSERT_EQ(reply->calls.size(), 1u);
    EXPECT_EQ(reply->calls[0].name, "f");
    json read = json::object();
    for (const auto& [key, value] : reply->calls[0].parameters) read[key] = xml_argument_value(value, schema_types.at(key));
    EXPECT_EQ(read, json(arguments));
  }
}

}  // namespace
}  // namespace tilefire::cli
