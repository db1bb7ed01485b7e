// Constrained JSON decoding (tilefire/json_constraint.h) against nlohmann::json's parser, the independent
// reference: the byte automaton takes exactly the texts the parser accepts (valid, invalid and mutated
// documents), never a prefix the parser finds an error in, and never reaches a dead end; the token trie
// allows exactly the tokens whose bytes the automaton takes one by one; a reply's constraint follows the
// reply and refuses a token it would not have allowed.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/input_mutator.h"
#include "tilefire/errors.h"
#include "tilefire/json_constraint.h"
#include "tilefire/json_schema.h"

namespace tilefire {
namespace {

using nlohmann::json;

// What the parser says of `text`: accepted whole, a prefix of a JSON text (its only error is the end of
// the input, at byte size + 1), or wrong within it.
enum class Parsed { whole, prefix, wrong };
Parsed parse(const std::string& text) {
  try {
    [[maybe_unused]] const json value = json::parse(text);
    return Parsed::whole;
  } catch (const json::parse_error& e) {
    return e.byte == text.size() + 1 ? Parsed::prefix : Parsed::wrong;
  }
}

// How many bytes of `text` the automaton takes before one is rejected (text.size(): all of them).
size_t taken_bytes(const std::string& text, JsonTop top, JsonBytes* state = nullptr) {
  JsonBytes bytes(top);
  size_t taken = 0;
  while (taken < text.size() && bytes.feed(uint8_t(text[taken]))) ++taken;
  if (state) *state = bytes;
  return taken;
}

// Whether `text` has an e or E, perhaps a sign, then 3 digits or more: a number there could be past double's
// range, which the parser refuses (out_of_range 406) though the text is JSON; such texts are not compared.
bool has_long_exponent(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != 'e' && text[i] != 'E') continue;
    size_t j = i + 1;
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
    size_t digits = 0;
    while (j + digits < text.size() && text[j + digits] >= '0' && text[j + digits] <= '9') ++digits;
    if (digits >= 3) return true;
  }
  return false;
}

// Checks one text both ways: the automaton takes it whole and calls it complete exactly when the parser
// accepts it, and every prefix the automaton takes is one the parser finds no error in.
void expect_agrees_with_parser(const std::string& text) {
  if (has_long_exponent(text)) return;
  JsonBytes state;
  const size_t taken = taken_bytes(text, JsonTop::any_value, &state);
  const bool whole = taken == text.size() && state.complete();
  EXPECT_EQ(whole, parse(text) == Parsed::whole) << "text: " << json(text).dump() << " (taken " << taken << " bytes)";
  const Parsed prefix = parse(text.substr(0, taken));
  EXPECT_NE(prefix, Parsed::wrong) << "the automaton took " << taken << " bytes of " << json(text).dump()
                                   << " in which the parser finds an error";
}

const std::vector<std::string>& valid_texts() {
  static const std::vector<std::string> texts = {
      "{}", "[]", "0", "-0", "12", "-0.5e+10", "1E-2", "3.25", "true", "false", "null", "\"\"",
      "{\"a\": 1, \"b\": [true, false, null], \"c\": {\"d\": \"e\"}}",
      " \t\n\r{ \"k\" : [ 1 , 2.5 , -3e2 ] } \n",
      "\"escapes: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00 \\u0000\"",
      "\"UTF-8: \xC3\xA9 \xE2\x82\xAC \xED\x9F\xBF \xEE\x80\x80 \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF\"",
      "[[[[[]]]], {\"\": {}}, [{}]]",
      "\"\xC2\x80 \xE0\xA0\x80 \xF0\x90\x80\x80 \\uDBFF\\uDC00 \\uD7FF \\uE000\"",
      "{\"nested\": {\"deeper\": {\"deepest\": [1, [2, [3]]]}}}",
  };
  return texts;
}

TEST(JsonBytes, TakesWhatTheParserAccepts) {
  for (const std::string& text : valid_texts()) {
    EXPECT_EQ(parse(text), Parsed::whole) << text;  // the list itself
    expect_agrees_with_parser(text);
  }
}

TEST(JsonBytes, RejectsWhatTheParserRejects) {
  const std::vector<std::string> invalid = {
      "", "   ", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{'a':1}", "01", "-", "-a", "1.", ".5", "+1", "1e", "1e+",
      "tRue", "nul", "nulll", "NaN", "Infinity", "[1 2]", "{} {}", "\"abc", "\"\\x\"", "\"\\u12G4\"", "\"\\uDC00\"",
      "\"\\uD800\"", "\"\\uD800\\u0041\"", "\"\\uD800x\"", "\"tab\tinside\"", "\"\xC0\x80\"", "\"\xE0\x80\x80\"",
      "\"\xED\xA0\x80\"", "\"\xF5\x80\x80\x80\"", "\"\xF4\x90\x80\x80\"", "\"\x80\"", "\"\xC3\"", "[1]]", "]", "}",
      "\"\xF0\x8F\xBF\xBF\"", "\"\xC1\xBF\"", "\"\\uD800\\uDBFF\"", "\"\\uDBFF\\uE000\"",
  };
  for (const std::string& text : invalid) {
    EXPECT_NE(parse(text), Parsed::whole) << json(text).dump();  // the list itself
    expect_agrees_with_parser(text);
  }
}

// A lone surrogate is refused at its second hex digit, before the escape ends (no \u escape beginning DC
// to DF can stand alone): the parser only sees it at the fourth.
TEST(JsonBytes, RefusesALoneSurrogateAtItsSecondDigit) {
  EXPECT_EQ(taken_bytes("\"\\uDC00\"", JsonTop::any_value), 4u);
  EXPECT_EQ(taken_bytes("\"\\uD800\\uD800\"", JsonTop::any_value), 10u);
  EXPECT_EQ(taken_bytes("\"\\uD800\\uDC00\"", JsonTop::any_value), 14u);
}

TEST(JsonBytes, AnObjectTopTakesOnlyAnObject) {
  for (const char* text : {"[]", "1", "\"a\"", "true", "null"}) EXPECT_EQ(taken_bytes(text, JsonTop::object), 0u) << text;
  JsonBytes state(JsonTop::object);
  EXPECT_TRUE(state.feed("  {\"a\": [1]}"));
  EXPECT_TRUE(state.complete());
  EXPECT_TRUE(state.ended());
  EXPECT_FALSE(state.feed(uint8_t(',')));
  EXPECT_TRUE(state.feed(uint8_t(' ')));  // whitespace may follow a text
}

// A rejected byte leaves the state as it was: the next byte is read as if it had never come.
TEST(JsonBytes, ARejectedByteChangesNothing) {
  JsonBytes state(JsonTop::object);
  ASSERT_TRUE(state.feed("{\"a\""));
  for (const char* rejected : {"1", "}", "\"", "\xC3", "   x"}) {
    JsonBytes copy = state;
    EXPECT_FALSE(copy.feed(rejected)) << rejected;
  }
  for (uint8_t byte : {uint8_t('1'), uint8_t('}'), uint8_t(','), uint8_t('x')}) EXPECT_FALSE(state.feed(byte)) << byte;
  EXPECT_TRUE(state.feed(": 12"));
  EXPECT_FALSE(state.feed(uint8_t('x')));  // ends the number: rejected, and the number goes on
  EXPECT_TRUE(state.feed("3}"));
  EXPECT_TRUE(state.ended());
}

TEST(JsonBytes, ATopLevelNumberIsCompleteButNotEnded) {
  JsonBytes state(JsonTop::any_value);
  EXPECT_TRUE(state.feed("12"));
  EXPECT_TRUE(state.complete());
  EXPECT_FALSE(state.ended());  // "123" may come
  EXPECT_TRUE(state.feed(uint8_t(' ')));
  EXPECT_TRUE(state.ended());
}

TEST(JsonBytes, BoundsNestingAndWhitespace) {
  const std::string deepest = std::string(kMostJsonDepth, '[') + std::string(kMostJsonDepth, ']');
  EXPECT_EQ(taken_bytes(deepest, JsonTop::any_value), deepest.size());
  EXPECT_EQ(taken_bytes(std::string(kMostJsonDepth + 1, '['), JsonTop::any_value), kMostJsonDepth);
  const std::string padded = "{" + std::string(kMostJsonWhitespace, ' ') + "}";
  EXPECT_EQ(taken_bytes(padded, JsonTop::object), padded.size());
  EXPECT_EQ(taken_bytes("{" + std::string(kMostJsonWhitespace + 1, '\n') + "}", JsonTop::object), 1 + kMostJsonWhitespace);
  // Inside a string whitespace is text, not bounded.
  const std::string spaced = "\"" + std::string(4 * kMostJsonWhitespace, ' ') + "\"";
  EXPECT_EQ(taken_bytes(spaced, JsonTop::any_value), spaced.size());
  // Compact: no whitespace between tokens nor after the value, but the one byte a top-level number ends at.
  JsonBytes compact(JsonTop::any_value, 0);
  EXPECT_FALSE(compact.feed(uint8_t(' ')));
  ASSERT_TRUE(compact.feed(std::string_view("[1,{\"a b\":2}]")));
  EXPECT_TRUE(compact.ended());
  EXPECT_FALSE(compact.feed(uint8_t('\n')));
  EXPECT_FALSE(JsonBytes(JsonTop::object, 0).feed(std::string_view("{ }")));
  EXPECT_FALSE(JsonBytes(JsonTop::object, 0).feed(std::string_view("{}\n")));
  JsonBytes number(JsonTop::any_value, 0);
  ASSERT_TRUE(number.feed(std::string_view("-7\t")));
  EXPECT_TRUE(number.ended());
  EXPECT_FALSE(number.feed(uint8_t(' ')));
  // Numbers a double holds: 20 digits before the point, 2 in the exponent, fraction digits unbounded.
  const std::string widest = "-" + std::string(kMostJsonIntegerDigits, '9') + "." + std::string(40, '1') + "e-99";
  EXPECT_EQ(taken_bytes(widest + " ", JsonTop::any_value), widest.size() + 1);
  EXPECT_EQ(taken_bytes(std::string(kMostJsonIntegerDigits + 1, '1'), JsonTop::any_value), kMostJsonIntegerDigits);
  EXPECT_EQ(taken_bytes("[1e100]", JsonTop::any_value), 5u);
  EXPECT_EQ(taken_bytes("[1E+99,0e00]", JsonTop::any_value), 12u);
}

// A random JSON value, at most `depth` containers deep.
json random_value(std::mt19937_64& random, int depth) {
  const int kind = int(random() % (depth > 0 ? 8 : 6));
  switch (kind) {
    case 0: return nullptr;
    case 1: return random() % 2 == 0;
    case 2: return int64_t(random() % 2000) - 1000;
    case 3: return std::ldexp(double(int64_t(random() % 20001) - 10000), int(random() % 40) - 20);
    case 4: case 5: {
      static const std::vector<std::string> pieces = {"a", "key", " ", "\"", "\\", "/", "\n", "\x01", "\xC3\xA9", "\xE2\x82\xAC",
                                                      "\xF0\x9F\x98\x80", "\x7F", "\u2028"};
      std::string text;
      for (uint64_t n = random() % 5; n > 0; --n) text += pieces[random() % pieces.size()];
      return text;
    }
    case 6: {
      json array = json::array();
      for (uint64_t n = random() % 4; n > 0; --n) array.push_back(random_value(random, depth - 1));
      return array;
    }
    default: {
      json object = json::object();
      for (uint64_t n = random() % 4; n > 0; --n) object[std::string(1, char('a' + random() % 5))] = random_value(random, depth - 1);
      return object;
    }
  }
}

// Random documents written compactly and indented (ensure_ascii or not), then with one byte inserted,
// removed or changed: every text both ways against the parser.
TEST(JsonBytes, RandomAndMutatedDocumentsAgreeWithTheParser) {
  std::mt19937_64 random(20261204);
  const uint64_t cases = testing::fuzz_case_count(3000);
  for (uint64_t i = 0; i < cases; ++i) {
    const json value = random_value(random, 4);
    const std::string text = value.dump(random() % 2 == 0 ? -1 : int(random() % 3), ' ', random() % 2 == 0);
    expect_agrees_with_parser(text);
    std::string mutated = text;
    const size_t at = random() % (mutated.size() + 1);
    static const std::string bytes = "{}[]\":,. -+eE0123456789tfnu\\\x01\x80\xC3\xED\xF0\xFF";
    const char byte = random() % 4 == 0 ? char(random() % 256) : bytes[random() % bytes.size()];
    switch (random() % 3) {
      case 0: mutated.insert(mutated.begin() + long(at), byte); break;
      case 1:
        if (at < mutated.size()) mutated.erase(at, 1);
        break;
      default:
        if (at < mutated.size()) mutated[at] = byte;
        break;
    }
    expect_agrees_with_parser(mutated);
    if (::testing::Test::HasFailure()) return;
  }
}

// Walks of random bytes the automaton takes: from every state some byte goes on unless the text is
// complete (no dead end), every text walked is one the parser finds no error in, and every text it calls
// complete the parser accepts. The bytes lean towards closing, so that many walks end.
TEST(JsonBytes, RandomWalksNeverReachADeadEnd) {
  std::mt19937_64 random(7);
  uint64_t completed = 0;
  const uint64_t walks = testing::fuzz_case_count(400);
  for (uint64_t walk = 0; walk < walks; ++walk) {
    const JsonTop top = walk % 2 == 0 ? JsonTop::object : JsonTop::any_value;
    JsonBytes state(top, walk % 4 < 2 ? kMostJsonWhitespace : 0);  // half the walks compact
    std::string text;
    for (int step = 0; step < 200; ++step) {
      std::vector<uint8_t> next;
      for (int byte = 0; byte < 256; ++byte)
        if (JsonBytes copy = state; copy.feed(uint8_t(byte))) next.push_back(uint8_t(byte));
      if (next.empty()) {
        ASSERT_TRUE(state.complete()) << "dead end after " << json(text).dump();
        break;
      }
      // No third exponent digit (has_long_exponent): digits are then left out of the choice.
      if (has_long_exponent(text + "0"))
        next.erase(std::remove_if(next.begin(), next.end(), [](uint8_t b) { return b >= '0' && b <= '9'; }), next.end());
      if (next.empty()) break;  // the exponent's third digit was the only way on: the walk ends there
      uint8_t byte = next[random() % next.size()];
      for (uint8_t closing : {uint8_t('"'), uint8_t('}'), uint8_t(']')})
        if (random() % 3 == 0 && std::find(next.begin(), next.end(), closing) != next.end()) byte = closing;
      ASSERT_TRUE(state.feed(byte));
      text.push_back(char(byte));
      if (state.ended()) break;
    }
    ASSERT_NE(parse(text), Parsed::wrong) << json(text).dump();
    if (state.complete()) {
      ++completed;
      EXPECT_EQ(parse(text), Parsed::whole) << json(text).dump();
      if (top == JsonTop::object) {
        EXPECT_TRUE(json::parse(text).is_object()) << text;
      }
    }
  }
  EXPECT_GT(completed, walks / 4);  // the check of complete texts ran on many
}

// Token bytes for the trie tests: every single byte, and pieces of JSON a real vocabulary has (several of
// them prefixes of others, two the same, some empty: special tokens).
std::vector<std::string> jsonish_tokens() {
  std::vector<std::string> tokens;
  for (int byte = 0; byte < 256; ++byte) tokens.push_back(std::string(1, char(byte)));
  for (const char* piece : {"{\"", "\":", "\": \"", "\",", "\"}", "},", "}}", "]}", "[{", "true", "tru", "false", "null", ",\n",
                            "\n  ", "\n    ", "  ", "\\u", "\\n", "\\\"", "12", "0.5", "-1", "e+", "name", " name", "\xC3\xA9", "\xE2\x82",
                            "\x82\xAC", "", "", "\": \"", "{\"name\": \"", "\"}\n", "]]]", "{}", "[]"})
    tokens.push_back(piece);
  return tokens;
}

// The trie allows exactly the tokens whose bytes the automaton takes, from the states of many prefixes
// of documents (inside strings, escapes, numbers, literals, between values, at the end).
TEST(TokenTrie, AllowsExactlyTheTokensTheAutomatonTakes) {
  const std::vector<std::string> tokens = jsonish_tokens();
  const TokenTrie trie(tokens);
  std::vector<std::string> prefixes;
  for (const std::string& text : valid_texts())
    for (size_t n = 0; n <= text.size(); ++n) prefixes.push_back(text.substr(0, n));
  for (const JsonTop top : {JsonTop::any_value, JsonTop::object})
    for (const std::string& prefix : prefixes) {
      JsonBytes state(top);
      if (!state.feed(prefix)) continue;
      std::vector<uint8_t> allowed(tokens.size() + 5, 0);  // a model vocabulary past the tokenizer's
      trie.allow_tokens(state, allowed);
      for (size_t id = 0; id < allowed.size(); ++id) {
        JsonBytes copy = state;
        const bool expected = id < tokens.size() && !tokens[id].empty() && copy.feed(tokens[id]);
        ASSERT_EQ(allowed[id] != 0, expected) << "token " << id << " " << json(id < tokens.size() ? tokens[id] : "").dump()
                                              << " after " << json(prefix).dump();
      }
    }
  std::vector<uint8_t> too_short(tokens.size() - 1, 0);
  EXPECT_THROW(trie.allow_tokens(JsonBytes(), too_short), InputError);
}

TEST(JsonReplyConstraint, FollowsTheReplyAndRefusesATokenItWouldNotAllow) {
  const std::vector<std::string> tokens = jsonish_tokens();
  const auto trie = std::make_shared<const TokenTrie>(tokens);
  const auto id = [&](const std::string& bytes) { return int32_t(std::find(tokens.begin(), tokens.end(), bytes) - tokens.begin()); };
  JsonReplyConstraint constraint(trie, JsonTop::object);
  std::vector<uint8_t> allowed(tokens.size(), 0);
  constraint.allowed({}, allowed);
  EXPECT_TRUE(allowed[size_t(id("{"))] && allowed[size_t(id("{\""))] && allowed[size_t(id(" "))]);
  EXPECT_FALSE(allowed[size_t(id("["))] || allowed[size_t(id("\""))] || allowed[size_t(id("}"))]);
  const std::vector<int32_t> reply = {id("{\""), id("name"), id("\": \""), id("\xC3\xA9"), id("\"}")};
  EXPECT_FALSE(constraint.ended({reply.begin(), reply.end() - 1}));
  EXPECT_TRUE(constraint.ended(reply));
  // Taken back to fewer tokens (a different reply after the first two), it follows again.
  const std::vector<int32_t> other = {id("{\""), id("name"), id("\":"), id("12"), id("}")};
  EXPECT_TRUE(constraint.ended(other));
  std::fill(allowed.begin(), allowed.end(), 0);
  constraint.allowed({id("{\""), id("name"), id("\":")}, allowed);
  EXPECT_TRUE(allowed[size_t(id("12"))] && allowed[size_t(id("true"))] && allowed[size_t(id("\n  "))]);
  EXPECT_FALSE(allowed[size_t(id("}"))] || allowed[size_t(id(","))]);
  EXPECT_THROW(constraint.ended({id("{\""), id("\"}"), id("}}")}), InputError);
  EXPECT_THROW(constraint.ended({id("{"), int32_t(tokens.size())}), InputError);  // past the tokens
  EXPECT_THROW(JsonReplyConstraint(nullptr, JsonTop::object), InputError);
}

// The masks a reply's constraint gives (from its cache where the state repeats: inside a string token
// after token) are the trie's walked from that state, on random replies of the JSON pieces that stay in
// strings for long, key and value strings alike, sometimes taken back a few tokens.
TEST(JsonReplyConstraint, CachedMasksAreTheTriesMasks) {
  const std::vector<std::string> tokens = jsonish_tokens();
  const auto trie = std::make_shared<const TokenTrie>(tokens);
  std::mt19937_64 random(31);
  const uint64_t replies = testing::fuzz_case_count(60);
  for (uint64_t reply = 0; reply < replies; ++reply) {
    JsonReplyConstraint constraint(trie, JsonTop::object);
    std::vector<int32_t> generated;
    for (int step = 0; step < 60; ++step) {
      std::vector<uint8_t> allowed(tokens.size(), 0), expected(tokens.size(), 0);
      constraint.allowed(generated, allowed);
      JsonBytes state(JsonTop::object);
      for (int32_t id : generated) ASSERT_TRUE(state.feed(tokens[size_t(id)]));
      trie->allow_tokens(state, expected);
      ASSERT_EQ(allowed, expected) << "reply " << reply << " after " << generated.size() << " tokens";
      std::vector<int32_t> choices;  // letters mostly, so strings run long and their state repeats
      for (size_t id = 0; id < tokens.size(); ++id)
        if (allowed[id]) choices.push_back(int32_t(id));
      if (choices.empty() || state.ended()) break;
      const auto letter = std::find(choices.begin(), choices.end(), int32_t('a'));
      generated.push_back(letter != choices.end() && random() % 3 != 0 ? *letter : choices[random() % choices.size()]);
      if (random() % 10 == 0 && generated.size() > 3) generated.resize(generated.size() - 1 - random() % 3);
    }
  }
}

// constrain_to_json keeps the request's own stop_when, asked first, and ends the reply when the value is whole.
TEST(JsonReplyConstraint, ConstrainToJsonKeepsTheRequestsStopWhen) {
  const std::vector<std::string> tokens = jsonish_tokens();
  const auto trie = std::make_shared<const TokenTrie>(tokens);
  GenerateRequest request;
  int asked = 0;
  request.stop_when = [&](const std::vector<int32_t>& generated) { return ++asked, generated.size() >= 3; };
  constrain_to_json(request, trie);
  ASSERT_TRUE(request.allowed_tokens && request.stop_when);
  const int32_t open = int32_t(std::find(tokens.begin(), tokens.end(), "{") - tokens.begin());
  const int32_t close = int32_t(std::find(tokens.begin(), tokens.end(), "}") - tokens.begin());
  const int32_t space = int32_t(' ');
  EXPECT_FALSE(request.stop_when({open}));
  EXPECT_TRUE(request.stop_when({open, close}));
  EXPECT_TRUE(request.stop_when({open, space, space}));
  EXPECT_EQ(asked, 3);
}

// A stop token whose bytes the JSON would take (a request's stop token id of a newline, on a model of
// byte tokens) is never chosen: the engine would end the reply there, the value not whole. The same for
// a schema's reply.
TEST(JsonReplyConstraint, StopTokensWithBytesAreNeverChosen) {
  const auto trie = std::make_shared<const TokenTrie>(vocabulary_bytes(nullptr, 256));
  const int32_t open = '{', newline = '\n', space = ' ';
  for (const bool schema : {false, true}) {
    GenerateRequest request;
    request.stop_tokens = {newline};
    if (schema) constrain_to_json_schema(request, trie, JsonSchema::compile(R"({"type": "object"})"));
    else constrain_to_json(request, trie);
    std::vector<uint8_t> allowed(256, 0);
    request.allowed_tokens({open}, allowed);
    EXPECT_EQ(allowed[size_t(newline)], 0) << (schema ? "schema" : "json_object");
    EXPECT_EQ(allowed[size_t(space)], 1) << (schema ? "schema" : "json_object");  // whitespace all the same
  }
}

}  // namespace
}  // namespace tilefire
