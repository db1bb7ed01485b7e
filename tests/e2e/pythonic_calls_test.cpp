// The reader of pythonic tool calls (samples/cli/pythonic_calls.cpp): Python's literals read as Python
// reads them, by hand-written cases and against Python itself (tests/e2e/pythonic_oracle.py, which reads
// each text with ast.parse and ast.literal_eval) over random call lists, some of them broken by a cut, a
// byte left out, doubled or put in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "samples/cli/pythonic_calls.h"
#include "tests/common/jinja_oracle.h"  // jinja_python(): a python3 the tests may rely on
#include "tests/common/test_models.h"   // TempDir, read_file_text, write_file_text

namespace tilefire::cli {
namespace {

using nlohmann::json;

// The literals of pythonic calls, each read as Python's ast.literal_eval reads it (its value written here
// by hand as JSON), or refused where Python's reading fails or gives no JSON value.
TEST(PythonicCalls, LiteralsReadAsPythonReadsThem) {
  const std::vector<std::pair<std::string, json>> literals = {
      {"'it''s'", "its"},  // adjacent strings join
      {R"("say \"hi\"")", "say \"hi\""},
      {R"('a\'b')", "a'b"},
      {R"('tab\there\nline')", "tab\there\nline"},
      {R"('\x41\u00e9\U0001F600\101\0')", std::string("A\xc3\xa9\xf0\x9f\x98\x80" "A") + std::string(1, '\0')},
      {R"('\d stays')", "\\d stays"},  // an escape Python does not know keeps its backslash
      {R"('a\
b')", "ab"},  // a line continued
      {"'''three\nlines'''", "three\nlines"},
      {R"("""a "quoted" word""")", "a \"quoted\" word"},
      {"'caf\xc3\xa9'", "caf\xc3\xa9"},  // UTF-8 as written
      {"42", 42},
      {"-7", -7},
      {"+3", 3},
      {"- 1", -1},  // Python reads a sign and a number apart
      {"007.5", 7.5},
      {"1.", 1.0},
      {".25", 0.25},
      {"-2.5e-3", -2.5e-3},
      {"1E3", 1000.0},
      {"0", 0},
      {"00", 0},
      {"1_000", 1000},
      {"0x1F", 31},
      {"0o17", 15},
      {"0B1_01", 5},
      {"-0x8000000000000000", INT64_MIN},
      {"0xFFFFFFFFFFFFFFFF", UINT64_MAX},
      {"1_0.2_5e0_1", 102.5},
      {R"(r'\d+\'')", "\\d+\\'"},  // raw: backslashes stay
      {R"(u'\x41' R"\n")", "A\\n"},
      {"True", true},
      {"False", false},
      {"None", nullptr},
      {"[1, 'a', None, ]", json::array({1, "a", nullptr})},
      {"(1, 2)", json::array({1, 2})},
      {"(1,)", json::array({1})},
      {"(1)", 1},
      {"()", json::array()},
      {"{'a': [1, {'b': (True,)}], \"c\": {}}", json::parse(R"({"a": [1, {"b": [true]}], "c": {}})")},
      {"{'k': 1, 'k': 2}", json({{"k", 2}})},  // a later key wins
      {"[\n  1,\n  2\n]", json::array({1, 2})},
      {"'''a\r\nb\rc'''", "a\nb\nc"},  // Python's line ends
      {"'a\\\r\nb'", "ab"},
      {"[1,\f2]", json::array({1, 2})},
  };
  for (const auto& [literal, expected] : literals) {
    const std::optional<json> calls = pythonic_calls("[f(x=" + literal + ")]", 400);
    ASSERT_TRUE(calls.has_value()) << literal;
    EXPECT_EQ(calls->at(0).at("arguments").at("x"), expected) << literal;
    EXPECT_EQ(calls->at(0).at("arguments").at("x").is_number_float(), expected.is_number_float()) << literal;
  }
  for (const std::string literal : {"'open", "'two\nlines'", "x", "true", "null", "nan", "1__0", "1_", "0x", "0x1G", "0x10000000000000000", "-0x8000000000000001", "1e999",
                                    "2j", "01", "1e", "-", ".", "b'x'", "f'x'", "rb'x'",
                                    R"('\x4')", R"('\ud800')", R"('\N{BULLET}')", "{1: 2}", "{'a' 1}", "[1 2]", "(1 2)", "f(1)", "1 + 2",
                                    "{'a'}"}) {
    EXPECT_FALSE(pythonic_calls("[f(x=" + literal + ")]", 400).has_value()) << literal;
  }
  // Nesting past the bound is no call; at it, one is.
  EXPECT_FALSE(pythonic_calls("[f(x=" + std::string(401, '[') + std::string(401, ']') + ")]", 400).has_value());
  EXPECT_TRUE(pythonic_calls("[f(x=" + std::string(400, '[') + std::string(400, ']') + ")]", 400).has_value());
  // A NUL after a 0 begins no base (it is no "0x").
  EXPECT_FALSE(pythonic_calls(std::string("[f(x=0\0" "101)]", 13), 400).has_value());
  // An argument's name may be a Python keyword, as a tool's parameter's may.
  EXPECT_EQ(*pythonic_calls("[translate(text='hi', from='en')]", 400),
            json::parse(R"([{"name": "translate", "arguments": {"text": "hi", "from": "en"}}])"));
  // Lines continued with Windows line ends.
  EXPECT_TRUE(pythonic_calls("[f(a=1,\\\r\n b=2)]", 400).has_value());
  // The calls' own shape.
  EXPECT_EQ(*pythonic_calls(" [ f ( ) , # a comment\n g-h(a=1) ] ", 400), json::parse(R"([{"name": "f", "arguments": {}}, {"name": "g-h", "arguments": {"a": 1}}])"));
  for (const std::string text : {"", "[]", "[f()] x", "[f(), ]x", "[f(a=1 b=2)]", "[f(=1)]", "[f(1a=1)]", "[(a=1)]", "f()", "[f() g()]"})
    EXPECT_FALSE(pythonic_calls(text, 400).has_value()) << text;
}

// Random pythonic text: call lists whose values are every kind of literal, spelled every way Python
// spells it, with whitespace and comments between the tokens.
class RandomPythonic {
 public:
  explicit RandomPythonic(uint64_t seed) : rng_(seed) {}

  std::string calls() {
    std::string text = space() + "[" + space();
    const int count = 1 + pick(3);
    for (int i = 0; i < count; ++i) {
      text += one_of({"get_weather", "f", "g_2"}) + (pick(4) == 0 ? " " : "") + "(" + space();
      const int arguments = pick(4);
      std::vector<std::string> keywords = {"city", "days", "x", "_y"};
      std::shuffle(keywords.begin(), keywords.end(), rng_);
      for (int k = 0; k < arguments; ++k) {
        const std::string keyword = pick(10) == 0 ? keywords[0] : keywords[static_cast<size_t>(k)];  // now and then one twice
        text += keyword + space() + "=" + space() + value(0) + space();
        if (k + 1 < arguments || pick(4) == 0) text += "," + space();
      }
      text += ")" + space();
      if (i + 1 < count || pick(4) == 0) text += "," + space();
    }
    return text + "]" + space();
  }

  // The text with one change, most often none: cut short, or a byte (of ASCII: the text stays UTF-8)
  // left out, doubled, or another put in before it.
  std::string broken(std::string text) {
    size_t at = static_cast<size_t>(rng_() % (text.size() + 1));
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;  // at a character's start
    switch (pick(8)) {
      case 0: return text.substr(0, at);
      case 1:
        if (at < text.size() && static_cast<unsigned char>(text[at]) < 0x80) text.erase(at, 1);
        return text;
      case 2:
        if (at < text.size() && static_cast<unsigned char>(text[at]) < 0x80) text.insert(at, 1, text[at]);
        return text;
      case 3: {
        static const std::string inserted = ",()[]{}=:'\"\\ #._-+0x\n";
        text.insert(at, 1, inserted[rng_() % inserted.size()]);
        return text;
      }
      default: return text;
    }
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  std::string one_of(const std::vector<std::string>& choices) { return choices[rng_() % choices.size()]; }
  std::string space() { return one_of({"", "", "", " ", "\n", "\t", "  ", " # note\n", "\\\n", "\r\n", "\f", "\\\r\n", "\r"}); }

  std::string value(int depth) {
    switch (pick(depth < 3 ? 9 : 6)) {
      case 0:
      case 1: return string_literal();
      case 2: return int_literal();
      case 3: return float_literal();
      case 4: return one_of({"True", "False", "None"});
      case 5: return pick(3) == 0 ? string_literal() + space() + string_literal() : string_literal();
      case 6: return sequence(depth, "[", "]");
      case 7: return sequence(depth, "(", ")");
      default: return dict(depth);
    }
  }

  std::string sequence(int depth, const std::string& open, const std::string& close) {
    std::string text = open + space();
    const int count = pick(4);
    for (int i = 0; i < count; ++i) {
      text += value(depth + 1) + space();
      if (i + 1 < count || pick(3) == 0) text += "," + space();
    }
    return text + close;
  }

  std::string dict(int depth) {
    std::string text = "{" + space();
    const int count = pick(4);
    for (int i = 0; i < count; ++i) {
      // Keys each its own: where a later key replaces an earlier one whose value JSON cannot hold (a lone
      // surrogate, an infinite float), Python's dict is JSON and Tilefire's reading has already given up.
      const std::string key = "k" + std::to_string(i);
      text += (pick(8) == 0 ? std::to_string(i) : string_literal(key)) + space() + ":" + space() + value(depth + 1) + space();
      if (i + 1 < count || pick(3) == 0) text += "," + space();
    }
    return text + "}";
  }

  std::string int_literal() {
    const std::string sign = one_of({"", "", "-", "+", "- "});
    switch (pick(6)) {
      case 0: return sign + std::to_string(rng_() % 1000000);
      case 1: return sign + std::to_string(rng_() % 10);
      case 2: return sign + one_of({"1_000", "0", "00", "0_0", "9_007_199_254_740_991", "123"});
      case 3: return sign + one_of({"0x1F", "0XfF", "0x_ab", "0o17", "0O7_7", "0b101", "0B1_0", "0xFFFF_FFFF"});  // -(2**64 - 1) would be past 64 bits
      case 4: return sign + one_of({"-1", "+0"});  // a sign twice
      default: return sign + std::to_string(rng_() % 100000000000ULL);
    }
  }

  std::string float_literal() {
    const std::string sign = one_of({"", "", "-", "+"});
    return sign + one_of({"1.5", "1.", ".5", "0.1", "2e3", "1E-2", "1_0.5", "3.14159", "6.02e23", "1e-400", "1e400", "007.5", "0.0",
                          std::to_string(rng_() % 1000) + "." + std::to_string(rng_() % 1000), "1e", "1.5e+1_0"});
  }

  // A str literal, its body random or `body` (in any quoting, raw or not: it holds no quote or backslash).
  std::string string_literal(const std::string& body = "") {
    const std::string prefix = one_of({"", "", "", "", "r", "u", "R", "U"});
    const bool raw = prefix == "r" || prefix == "R";
    const std::string quote = pick(2) ? "'" : "\"";
    const bool triple = pick(5) == 0;
    const std::string delimiter = triple ? quote + quote + quote : quote;
    std::string text = body;
    const int pieces = body.empty() ? pick(6) : 0;
    for (int i = 0; i < pieces; ++i) {
      std::vector<std::string> choices = {"a", "Paris", " ", "é", "😀", "中", "'", "\"", "\t", "\\\\", "\\\n"};
      if (triple) choices.insert(choices.end(), {"\n", "line\nline", "\r\n", "\r"});
      if (!raw)
        choices.insert(choices.end(), {"\\n", "\\t", "\\'", "\\\"", "\\x41", "\\xe9", "\\u00e9", "\\U0001F600", "\\101", "\\0", "\\7",
                                       "\\777", "\\d", "\\8", "\\ud800", "\\a\\b\\f\\v\\r"});
      else
        choices.insert(choices.end(), {"\\d", "\\'", "\\\"", "\\n"});
      text += one_of(choices);
    }
    return prefix + delimiter + text + delimiter;
  }

  std::mt19937_64 rng_;
};

// Random call lists, whole and broken, read by Tilefire and by Python: the same calls, or none from both.
TEST(PythonicCalls, RandomCallListsReadAsPythonReadsThem) {
  REQUIRE_JINJA_ORACLE();  // the python3 it runs
  RandomPythonic random(20261206);
  std::vector<std::string> texts;
  for (int i = 0; i < 3000; ++i) texts.push_back(random.broken(random.calls()));
  const testing::TempDir dir("pythonic-oracle");
  const std::filesystem::path cases = dir.path() / "cases.json", out = dir.path() / "oracle.json";
  testing::write_file_text(cases, json(texts).dump());
  const std::string command = testing::jinja_python() + " '" + (std::filesystem::path(TILEFIRE_SOURCE_DIR) / "tests/e2e/pythonic_oracle.py").string() +
                              "' '" + cases.string() + "' '" + out.string() + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const json oracle = json::parse(testing::read_file_text(out));
  ASSERT_EQ(oracle.size(), texts.size());
  size_t read = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::optional<json> calls = pythonic_calls(texts[i], 400);
    // A name that is no Python name (a tool's name may have '-' and begin with a digit) is read as one on
    // purpose; Python reads a subtraction, or nothing.
    const bool unpythonic = calls && std::any_of(calls->begin(), calls->end(), [](const json& call) {
      const std::string name = call.at("name").get<std::string>();
      return name.find('-') != std::string::npos || std::isdigit(static_cast<unsigned char>(name[0]));
    });
    EXPECT_EQ(unpythonic || !calls ? json(nullptr) : *calls, oracle[i]) << "case " << i << ": " << json(texts[i]).dump();
    read += calls.has_value();
  }
  // Both outcomes are well represented: the comparison is not all refusals.
  EXPECT_GT(read, texts.size() / 6);
  EXPECT_LT(read, texts.size() * 9 / 10);
}

}  // namespace
}  // namespace tilefire::cli
