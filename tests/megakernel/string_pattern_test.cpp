// A JSON Schema pattern's automaton (megakernel/string_pattern.h) against Ajv, which reads a pattern as
// JavaScript's RegExp with the u flag (the independent reference, tests/common/schema_oracle.h): strings
// the automaton matches, random strings over the pattern's own characters, and strings mutated from
// matches get the same verdict from both. The lengths table against strings enumerated by brute force;
// patterns outside the subset refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megakernel/string_pattern.h"
#include "tests/common/schema_oracle.h"
#include "tilefire/errors.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

const std::vector<std::string> kPatterns = {
    R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$)",
    R"(^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$)",
    R"(^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$)",
    R"(^(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)$)",
    "ab+c",
    "^a|b$",
    "(?:x|y){2,3}z?$",
    R"(^(?<year>\d{2})\.\w\W\s\S\D$)",
    "[^abc]{2}",
    "^.{3}$",
    R"(\u00e9|\u{1F600}|\uD83D\uDE01|\x41)",
    R"(^[\b\t\-\]]*$)",
    "^(a|ab)(c|bcd)(d*)$",
    "^$",
    "",
    "a{0}b",
    R"(^[\s\S]$)",
    R"(^\cJ\0$)",
    "colou?r",
    "é+.😀",
    "^[^]$",
    "a*?b+?c??d{1,2}?",
    R"(\/\.\*\+\?\(\)\[\]\{\}\|\^\$\\)",
    R"(^[^\d\s]+$)",
    "^(a|b)*a(a|b){3}$",
    R"(^["\\\n]{1,3}$)",
};

std::vector<uint32_t> decode(const std::string& text) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < text.size();) {
    const uint8_t lead = uint8_t(text[i]);
    const int length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    uint32_t c = length == 1 ? lead : lead & (0x7F >> length);
    for (int k = 1; k < length; ++k) c = c << 6 | (uint8_t(text[i + size_t(k)]) & 0x3F);
    out.push_back(c);
    i += size_t(length);
  }
  return out;
}

std::string encode(uint32_t c) {
  std::string out;
  if (c < 0x80) out += char(c);
  else if (c < 0x800) out += char(0xC0 | c >> 6), out += char(0x80 | (c & 0x3F));
  else if (c < 0x10000) out += char(0xE0 | c >> 12), out += char(0x80 | (c >> 6 & 0x3F)), out += char(0x80 | (c & 0x3F));
  else out += char(0xF0 | c >> 18), out += char(0x80 | (c >> 12 & 0x3F)), out += char(0x80 | (c >> 6 & 0x3F)), out += char(0x80 | (c & 0x3F));
  return out;
}

// A string the automaton matches: random transitions, each a code point of its range (often an end of it).
std::string matched_walk(const StringPattern& pattern, std::mt19937& rng) {
  std::string text;
  int32_t state = StringPattern::kStart;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int steps = 0; steps < 40; ++steps) {
    if (pattern.accepting(state) && (unit(rng) < 0.3 || pattern.transitions(state).empty())) break;
    const auto& transitions = pattern.transitions(state);
    EXPECT_FALSE(transitions.empty()) << "a state that is neither a match nor goes on";
    if (transitions.empty()) break;
    const auto& transition = transitions[std::uniform_int_distribution<size_t>(0, transitions.size() - 1)(rng)];
    const double pick = unit(rng);
    uint32_t c = pick < 0.3 ? transition.low : pick < 0.5 ? transition.high
                                                          : std::uniform_int_distribution<uint32_t>(transition.low, transition.high)(rng);
    if (c >= 0xD800 && c <= 0xDFFF) c = transition.low;
    text += encode(c);
    state = pattern.next(state, c);
    EXPECT_GE(state, 0);
    if (state < 0) break;
  }
  return text;
}

TEST(StringPattern, MatchesAsJavaScriptsRegExpWithTheUFlag) {
  REQUIRE_SCHEMA_ORACLE();
  std::mt19937 rng(20261205);
  std::vector<SchemaCase> cases;
  std::vector<std::vector<bool>> ours;
  size_t matched = 0, unmatched = 0;
  for (const std::string& source : kPatterns) {
    const auto pattern = StringPattern::compile(source);
    // The characters the strings are made of: the pattern's own, and some it may treat apart.
    std::vector<uint32_t> alphabet = decode(source);
    for (uint32_t c : decode("aA0_9 -.@xé😀\n\r\t\"\\\x01\u2028\u00a0Zz")) alphabet.push_back(c);
    SchemaCase strings{json{{"type", "string"}, {"pattern", source}}, {}};
    std::vector<std::string> texts;
    for (int i = 0; i < 40; ++i) {
      const std::string walk = matched_walk(*pattern, rng);
      texts.push_back(walk);
      std::vector<uint32_t> characters = decode(walk);
      // A mutation: a character replaced, added or dropped.
      const uint32_t c = alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
      const size_t at = characters.empty() ? 0 : std::uniform_int_distribution<size_t>(0, characters.size() - 1)(rng);
      if (i % 3 == 0 || characters.empty()) characters.insert(characters.begin() + long(std::min(at, characters.size())), c);
      else if (i % 3 == 1) characters[at] = c;
      else characters.erase(characters.begin() + long(at));
      std::string mutated;
      for (uint32_t m : characters) mutated += encode(m);
      texts.push_back(mutated);
      std::string random;
      const size_t length = std::uniform_int_distribution<size_t>(0, 10)(rng);
      for (size_t k = 0; k < length; ++k) random += encode(alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)]);
      texts.push_back(random);
    }
    std::vector<bool> verdicts;
    for (const std::string& text : texts) {
      strings.documents.push_back(json(text).dump());
      verdicts.push_back(pattern->matches(text));
      (verdicts.back() ? matched : unmatched) += 1;
    }
    cases.push_back(std::move(strings));
    ours.push_back(std::move(verdicts));
  }
  const auto ajv = validate_with_ajv(cases);
  for (size_t p = 0; p < cases.size(); ++p)
    for (size_t d = 0; d < cases[p].documents.size(); ++d)
      EXPECT_EQ(ajv[p][d], std::optional<bool>(ours[p][d])) << "pattern " << kPatterns[p] << " on " << cases[p].documents[d];
  EXPECT_GT(matched, 1000u);
  EXPECT_GT(unmatched, 500u);
}

TEST(StringPattern, EveryStateCanStillReachAMatchAndEqualStatesAreOne) {
  for (const std::string& source : kPatterns) {
    const auto pattern = StringPattern::compile(source);
    for (int32_t s = 0; s < int32_t(pattern->states()); ++s) {
      const bool goes_on = !pattern->transitions(s).empty();
      EXPECT_TRUE(pattern->accepting(s) || goes_on) << source << " state " << s;
    }
  }
  // Minimised: an anchored date has one state per position it reads, and an unanchored "x" two (before
  // and after the x).
  EXPECT_EQ(StringPattern::compile("x")->states(), 2u);
  EXPECT_EQ(StringPattern::compile("^[0-9]{4}$")->states(), 5u);
  EXPECT_EQ(StringPattern::compile("^(a|b)*a(a|b){3}$")->states(), 16u);  // the last four characters remembered
}

// Whether some string over `alphabet` of length within [least, most] takes `pattern` from its start to a
// match: by enumeration.
bool brute_force_can_end(const StringPattern& pattern, const std::string& alphabet, uint32_t least, uint32_t most) {
  std::vector<int32_t> layer = {StringPattern::kStart};
  for (uint32_t length = 0; length <= most; ++length) {
    std::sort(layer.begin(), layer.end());
    layer.erase(std::unique(layer.begin(), layer.end()), layer.end());
    if (length >= least)
      for (int32_t s : layer)
        if (pattern.accepting(s)) return true;
    std::vector<int32_t> next;
    for (int32_t s : layer)
      for (char c : alphabet)
        if (int32_t t = pattern.next(s, uint8_t(c)); t >= 0) next.push_back(t);
    layer = std::move(next);
  }
  return false;
}

// A long chain of states is kept as it is when minimising it would take too long; a maxLength far past
// what the pattern needs costs no more than one just past it.
TEST(StringPattern, LongChainsAndFarLengthsStayCheap) {
  const auto chain = StringPattern::compile("^a{4000}$");
  EXPECT_TRUE(chain->matches(std::string(4000, 'a')));
  EXPECT_FALSE(chain->matches(std::string(3999, 'a')));
  const auto letters = StringPattern::compile("^[a-z]+$");
  EXPECT_TRUE(PatternLengths(*letters, 0, 20000000).can_end(StringPattern::kStart, 0, 20000000));
  EXPECT_TRUE(PatternLengths(*letters, 1000, 20000000).can_end(StringPattern::kStart, 1000, 20000000));
  const auto uuid = StringPattern::compile("^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$");
  EXPECT_TRUE(PatternLengths(*uuid, 36, 1000000).can_end(StringPattern::kStart, 36, 1000000));
  EXPECT_FALSE(PatternLengths(*uuid, 37, 1000000).can_end(StringPattern::kStart, 37, 1000000));
  EXPECT_FALSE(PatternLengths(*uuid, 0, 1000000).can_end(StringPattern::kStart, 0, 35));
}

TEST(PatternLengths, AgreesWithEnumeratedStrings) {
  for (const char* source : {"^(aa)*$", "^(aaa|aaaaa)+$", "^a{2,4}b?$", "ab", "^(ab|a)*b$", "^(a|b)*a(a|b){3}$"}) {
    const auto pattern = StringPattern::compile(source);
    for (uint32_t min_length = 0; min_length <= 9; ++min_length) {
      for (uint32_t max_length : {min_length, min_length + 1, min_length + 3, UINT32_MAX}) {
        PatternLengths lengths;
        try {
          lengths = PatternLengths(*pattern, min_length, max_length);
        } catch (const InputError& error) {
          FAIL() << error.what();
        }
        const uint32_t enumerated_most = max_length == UINT32_MAX ? min_length + 12 : max_length;
        EXPECT_EQ(lengths.can_end(StringPattern::kStart, min_length, max_length),
                  brute_force_can_end(*pattern, "ab", min_length, enumerated_most))
            << source << " lengths " << min_length << ".." << max_length;
      }
    }
  }
}

// The strings two patterns both match: every string over a small alphabet up to 6 characters.
TEST(StringPattern, IntersectionMatchesWhatBothMatch) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"^a+", "b$"}, {"(ab)+", "^a.{2,4}$"}, {"^[a-c]*$", "c"}, {"^(a|b)*a(a|b){2}$", "^a*b*a*$"}};
  for (const auto& [first, second] : pairs) {
    const auto a = StringPattern::compile(first), b = StringPattern::compile(second);
    const auto both = StringPattern::intersect(*a, *b);
    std::vector<std::string> layer = {""};
    size_t matched = 0;
    for (int length = 0; length <= 6; ++length) {
      std::vector<std::string> next;
      for (const std::string& text : layer) {
        EXPECT_EQ(both->matches(text), a->matches(text) && b->matches(text)) << first << " and " << second << " on " << text;
        matched += both->matches(text);
        for (char c : std::string("abc")) next.push_back(text + c);
      }
      layer = std::move(next);
    }
    EXPECT_GT(matched, 0u) << first << " and " << second;
  }
  EXPECT_THROW(StringPattern::intersect(*StringPattern::compile("^a"), *StringPattern::compile("^b")), InputError);
}

// One class counted, anchored at both ends, with parts of one length each before and after it, is
// ^P C* S$ with lengths: the same verdict on every string over a small alphabet (a character outside the
// classes, one of two UTF-8 bytes, one of four) up to 7 characters. Any other shape is not read as one
// (an alternation of characters neither: it is not a class; nor two parts whose lengths vary).
TEST(StringPattern, ACountedClassIsItsStarWithLengths) {
  struct Counted {
    std::string source;
    uint32_t least, most;
  };
  const std::vector<Counted> counted = {{"^[ab]{2,4}$", 2, 4},       {"^[ab]{3}$", 3, 3},        {"^(?:[ab]){0,2}$", 0, 2},
                                        {"^(([ab])){2,}$", 2, UINT32_MAX}, {"^[^c]{1,5}$", 1, 5},  {"^.{6}$", 6, 6},
                                        {"^[ab]*$", 0, UINT32_MAX}, {"^a+$", 1, UINT32_MAX},    {"^[aé]{1,3}?$", 1, 3},
                                        {"^[ab][ab]{1,4}$", 2, 5},  {"^(?:a|c)[ab]{0,3}é$", 2, 5}, {"^c[^c]{2,}😀$", 4, UINT32_MAX},
                                        {"^[ab]{2}c?$", 2, 3},      {"^a[b]{2}$", 3, 3},        {"^(?:ab){2}[ab]{0,2}$", 4, 6},
                                        {"^(?:a(?:b[c]{1,2}))$", 3, 4}};
  const std::string alphabet[] = {"a", "b", "c", "é", "😀"};
  for (const Counted& expected : counted) {
    const std::optional<StringPattern::CountedClass> read = StringPattern::counted_class(expected.source);
    ASSERT_TRUE(read.has_value()) << expected.source;
    EXPECT_EQ(read->least, expected.least) << expected.source;
    EXPECT_EQ(read->most, expected.most) << expected.source;
    const auto pattern = StringPattern::compile(expected.source);
    EXPECT_LE(read->star->states(), 6u) << expected.source;  // P's and S's states and the class's loop
    std::vector<std::string> layer = {""};
    size_t matched = 0;
    for (uint32_t length = 0; length <= 7; ++length) {
      std::vector<std::string> next;
      for (const std::string& text : layer) {
        const bool as_star = read->star->matches(text) && length >= read->least && length <= read->most;
        EXPECT_EQ(pattern->matches(text), as_star) << expected.source << " on " << text;
        matched += as_star;
        for (const std::string& c : alphabet) next.push_back(text + c);
      }
      layer = std::move(next);
    }
    EXPECT_GT(matched, 0u) << expected.source;
  }
  // The states do not grow with the count: a count of 3000 is the star of a count of 3.
  EXPECT_EQ(StringPattern::counted_class("^(?:a|c)[ab]{0,3000}é$")->star->states(),
            StringPattern::counted_class("^(?:a|c)[ab]{0,3}é$")->star->states());
  EXPECT_EQ(StringPattern::counted_class("^(?:a|c)[ab]{0,3000}é$")->most, 3002u);
  for (const char* other : {"[ab]{2,4}", "^[ab]{2,4}", "[ab]{2,4}$", "^(?:ab){2}$", "^[ab]{2}|c$", "^(?:[ab]{2}){3}$", "^$", "^a$",
                            "^(a|b){2}$", "^[ab]*c*$", "^a+b?$", "^(?:a|bc)[ab]{2}$"})
    EXPECT_FALSE(StringPattern::counted_class(other).has_value()) << other;
  EXPECT_THROW(StringPattern::counted_class("^[ab{2}$"), InputError);
}

TEST(StringPattern, RefusesWhatItDoesNotReadByName) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"a(?=b)", "lookahead"},
      {"a(?!b)", "lookahead"},
      {"(?<=a)b", "lookbehind"},
      {R"((a)\1)", "backreferences"},
      {R"((?<x>a)\k<x>)", "backreferences"},
      {R"(\bword)", "word boundary"},
      {R"(\p{L})", "property"},
      {"(a", "not closed"},
      {"a)", "closes no group"},
      {"[a", "not closed"},
      {"*a", "nothing to repeat"},
      {"a**", "nothing to repeat"},
      {"a{2,1}", "n above m"},
      {"a{x}", "quantifier"},
      {"]", "lone"},
      {"[z-a]", "out of order"},
      {R"([\d-z])", "range"},
      {R"(\q)", "not an escape"},
      {"^*", "a quantifier after ^ or $"},
      {"a^", "no string matches"},
      {"[]", "no string matches"},
      {"(?i)a", "'(?'"},
      {"(a|b)*a(a|b){14}", "more than 4096"},
      {"(a{1000}){1000}", "too large"},
      // Counts are read exactly (one class counted past the NFA's size is held as lengths instead); a
      // repeat of anything else counted past it is refused before it is spelt out.
      {"(?:ab){70000}", "too large"},
      {"(?:){70000}", "too large"},
      {"a{4294967295}", "count above 4294967294"},
      {"a{1,99999999999999999999}", "count above 4294967294"},
      {std::string(100, '(') + std::string(100, ')'), "nest deeper"},
      {"\xff", "not UTF-8"},
      {"(?<a>x)(?<a>y)", "a group name used twice"},
      // Short patterns whose automaton costs too much to make: refused quickly, by the work they take.
      {"x(?:b?){4000}c", "too costly"},
      {"x(?:[bdfhjlnprtvz]?){10000}c", "too costly"},
  };
  for (const auto& [source, named] : refused) {
    try {
      StringPattern::compile(source);
      ADD_FAILURE() << source << " was taken";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(named), std::string::npos) << source << ": " << error.what();
    }
  }
}

}  // namespace
}  // namespace tilefire::testing
