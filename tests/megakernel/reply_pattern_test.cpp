// A reply held to a regular expression or to choices (tilefire/reply_pattern.h): the byte automaton
// against std::regex (ECMAScript, an independent matcher) on every text of a small alphabet, no dead end
// from any state it takes, UTF-8 refused as soon as no character leads on, the choices written as they
// are, the masks of a small vocabulary with its ending tokens, and the refusals by name.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tests/common/random_reply_masks.h"
#include "tilefire/errors.h"
#include "tilefire/reply_pattern.h"

namespace tilefire::testing {
namespace {

bool takes_whole(const ReplyPattern& pattern, const std::string& text) {
  PatternReplyBytes state = pattern.start();
  return state.feed(text) && state.complete();
}

// Every text of `alphabet` up to `longest` characters, the empty one first.
std::vector<std::string> all_texts(const std::string& alphabet, size_t longest) {
  std::vector<std::string> texts = {""};
  for (size_t begin = 0, length = 1; length <= longest; ++length) {
    const size_t end = texts.size();
    for (size_t i = begin; i < end; ++i)
      for (char c : alphabet) texts.push_back(texts[i] + c);
    begin = end;
  }
  return texts;
}

// Whether some bytes from `state` reach a complete text within `most` bytes (a breadth-first search over
// the states the automaton reaches; equal states are the same).
bool reaches_a_match(const PatternReplyBytes& state, size_t most) {
  std::vector<PatternReplyBytes> seen = {state};
  std::deque<std::pair<PatternReplyBytes, size_t>> queue = {{state, 0}};
  while (!queue.empty()) {
    auto [at, depth] = queue.front();
    queue.pop_front();
    if (at.complete()) return true;
    if (depth == most) continue;
    for (int byte = 0; byte < 256; ++byte) {
      PatternReplyBytes next = at;
      if (!next.feed(uint8_t(byte))) continue;
      if (std::find(seen.begin(), seen.end(), next) != seen.end()) continue;
      seen.push_back(next);
      queue.push_back({next, depth + 1});
    }
  }
  return false;
}

// The automaton takes a text whole exactly when std::regex matches all of it, on every text of up to 6
// characters of an alphabet that the patterns use; and every prefix it takes still reaches a match.
TEST(ReplyPattern, MatchesExactlyWhatStdRegexMatchesWhole) {
  const std::vector<std::string> patterns = {
      "\\d+",           "[a-c]{2,4}",       "(ab|a)c*",     "yes|no|maybe", "a(b|c)?d*", "[^a]b+",     "(a|b)*abb",
      "x?y?z?",         "\\w+@\\w+\\.c",    "(?:ab){1,3}",  "a.c",          "[a-c&&]*d", "\\d{2}-\\d", "b*(a|$)",
      // one class counted to 8 or more states (held as its star with lengths): alone, with parts around it
      "[a-d]{2,12}",    "x[a-c]{0,9}y",     "\\d{3,12}",    "-[0-9.]{2,12}",  "(?:[ab]){3,11}c",  "^[xyz]{1,15}$", "[^ab]{1,10}",
  };
  const std::vector<std::string> texts = all_texts("abcdxyz0-@.1", 5);
  size_t matched = 0, counted = 0;
  for (const std::string& source : patterns) {
    const auto pattern = ReplyPattern::compile(source);
    counted += pattern->counted();
    const std::regex reference(source, std::regex::ECMAScript);
    for (const std::string& text : texts) {
      const bool expected = std::regex_match(text, reference);
      EXPECT_EQ(takes_whole(*pattern, text), expected) << source << " on \"" << text << "\"";
      EXPECT_EQ(pattern->matches(text), expected) << source << " on \"" << text << "\"";
      matched += expected;
    }
    // No dead end: every prefix taken leads to a match.
    for (const std::string& text : all_texts("abcd0@.", 3)) {
      PatternReplyBytes state = pattern->start();
      if (state.feed(text)) {
        EXPECT_TRUE(reaches_a_match(state, 2 * pattern->states() + 4)) << source << " after \"" << text << "\"";
      }
    }
  }
  EXPECT_GT(matched, 300u);
  EXPECT_EQ(counted, 7u);  // the counted ones took the lengths' path; the few counts above did not
  EXPECT_FALSE(ReplyPattern::compile("[ a-z]+\\.")->counted());  // a plus is a star already
}

// A count past the states a pattern's automaton may have is held as its star with lengths, exactly; so is
// one whose suffix overlaps its class (spelt out, its automaton would blow up).
TEST(ReplyPattern, LargeCountsAreHeldExactly) {
  const auto wide = ReplyPattern::compile("[a-z]{1,100000}");
  EXPECT_TRUE(wide->counted());
  EXPECT_TRUE(wide->matches(std::string(100000, 'q')));
  EXPECT_FALSE(wide->matches(std::string(100001, 'q')));
  EXPECT_FALSE(wide->matches(""));
  const auto overlapping = ReplyPattern::compile("[a-c]{0,1176}(ab|cd)");
  EXPECT_TRUE(overlapping->counted());
  for (const std::string& text : {std::string("ab"), std::string("cab"), std::string(1176, 'c') + "cd", std::string(1175, 'a') + "ab"})
    EXPECT_TRUE(overlapping->matches(text)) << text.size();
  for (const std::string& text : {std::string("a"), std::string(1177, 'c') + "cd", std::string(3, 'c') + "ca"})
    EXPECT_FALSE(overlapping->matches(text)) << text.size();
  PatternReplyBytes at_most = wide->start();
  ASSERT_TRUE(at_most.feed(std::string(100000, 'z')));
  EXPECT_TRUE(at_most.ended());  // nothing may follow the 100,000th character
}

// A multi-byte character is refused at its first byte when no character it begins leads on, and taken
// byte by byte when one does; a byte that UTF-8 never has is refused, and so are a surrogate's and an
// overlong form's.
TEST(ReplyPattern, Utf8IsRefusedAtTheFirstByteThatLeadsNowhere) {
  const auto pattern = ReplyPattern::compile("[é€]+");  // U+00E9 (C3 A9), U+20AC (E2 82 AC)
  PatternReplyBytes state = pattern->start();
  EXPECT_TRUE(state.feed(uint8_t(0xC3)));  // begins U+00C0..U+00FF: é among them
  EXPECT_FALSE(state.complete());
  PatternReplyBytes copy = state;
  EXPECT_FALSE(copy.feed(uint8_t(0xA8)));  // è
  EXPECT_EQ(copy, state);                  // a refused byte leaves the state as it was
  EXPECT_TRUE(state.feed(uint8_t(0xA9)));
  EXPECT_TRUE(state.complete());
  EXPECT_TRUE(state.feed(uint8_t(0xE2)));   // U+2000..U+2FFF: € among them
  EXPECT_TRUE(state.feed(uint8_t(0x82)));   // U+2080..U+20BF
  EXPECT_FALSE(PatternReplyBytes(state).feed(uint8_t(0xAD)));  // U+20AD
  EXPECT_TRUE(state.feed(uint8_t(0xAC)));
  EXPECT_TRUE(state.complete());
  PatternReplyBytes other = pattern->start();
  EXPECT_FALSE(other.feed(uint8_t(0xE3)));  // U+3000..U+3FFF: neither
  EXPECT_FALSE(other.feed(uint8_t(0xC4)));  // U+0100..U+013F
  EXPECT_FALSE(other.feed(uint8_t(0xFF)));
  EXPECT_FALSE(other.feed(uint8_t(0xA9)));  // a continuation byte first
  const auto any = ReplyPattern::compile("[\\s\\S]+");
  for (const std::string& bad : {std::string("\xED\xA0\x80"), std::string("\xC0\xAF"), std::string("\xE0\x80\xAF"), std::string("\xF4\x90\x80\x80")}) {
    PatternReplyBytes from = any->start();
    EXPECT_FALSE(from.feed(bad)) << "not UTF-8, taken";
  }
  EXPECT_TRUE(takes_whole(*any, "line one\nline two \xF0\x9F\x98\x80"));
  EXPECT_FALSE(takes_whole(*ReplyPattern::compile(".+"), "two\nlines"));  // . takes no line terminator
}

// Choices are written as they are: characters a pattern gives a meaning to mean themselves.
TEST(ReplyPattern, ChoicesAreExactlyTheTextsGiven) {
  const std::vector<std::string> choices = {"positive", "negative", "a.b", "x|y", "(1+2)*3?", "[list]", "{n}", "^$\\/", "new\nline", "naïve"};
  const auto pattern = ReplyPattern::of_choices(choices);
  for (const std::string& choice : choices) {
    EXPECT_TRUE(pattern->matches(choice)) << choice;
    EXPECT_FALSE(pattern->matches(choice + choice)) << choice;
    EXPECT_FALSE(pattern->matches(choice.substr(0, choice.size() - 1))) << choice;
  }
  for (const char* other : {"a_b", "x", "y", "positiv", "3", "naive", "", "(1+2)*3"}) EXPECT_FALSE(pattern->matches(other)) << other;
  PatternReplyBytes ended = pattern->start();
  ASSERT_TRUE(ended.feed("negative"));
  EXPECT_TRUE(ended.ended());  // nothing may follow: the reply ends by itself
  const auto prefixes = ReplyPattern::of_choices({"no", "not"});  // lives while its states do
  PatternReplyBytes going_on = prefixes->start();
  ASSERT_TRUE(going_on.feed("no"));
  EXPECT_TRUE(going_on.complete());
  EXPECT_FALSE(going_on.ended());  // "not" may follow
}

// The masks: tokens whose bytes lead towards a match; the ending tokens only where the text so far matches.
TEST(ReplyPattern, TheConstraintAllowsEndingTokensOnlyWhereTheTextMatches) {
  //                                             0    1    2     3    4     5 (eos: no bytes)  6
  const std::vector<std::string> vocabulary = {"1", "2", "12", "a", " 3", "", "-"};
  auto tokens = std::make_shared<const TokenTrie>(vocabulary);
  PatternReplyConstraint constraint(tokens, ReplyPattern::compile("-?\\d+"), {5});
  auto allowed_after_in = [&](PatternReplyConstraint& asked, const std::vector<int32_t>& generated) {
    std::vector<uint8_t> allowed(vocabulary.size(), 0);
    asked.allowed(generated, allowed);
    return allowed;
  };
  auto allowed_after = [&](const std::vector<int32_t>& generated) { return allowed_after_in(constraint, generated); };
  EXPECT_EQ(allowed_after({}), (std::vector<uint8_t>{1, 1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(allowed_after({6}), (std::vector<uint8_t>{1, 1, 1, 0, 0, 0, 0}));  // "-": a digit must come
  EXPECT_EQ(allowed_after({6, 2}), (std::vector<uint8_t>{1, 1, 1, 0, 0, 1, 0}));  // "-12": may end
  EXPECT_FALSE(constraint.ended({6, 2}));
  try {
    allowed_after({3});
    ADD_FAILURE() << "a token off the pattern was followed";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("the reply held to a pattern's token 0 (id 3) does not continue it towards a match"),
              std::string::npos) << error.what();
  }
  // An ending token with bytes (a byte model's eos, a stop token id a request names) only where the text
  // matches, though its bytes would go on: the engine would end the reply there.
  PatternReplyConstraint dash_ends(tokens, ReplyPattern::compile("\\d-\\d+"), {6});
  EXPECT_EQ(allowed_after_in(dash_ends, {0}), (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0}));  // only "-" goes on, and it ends
  EXPECT_EQ(allowed_after_in(dash_ends, {}), (std::vector<uint8_t>{1, 1, 0, 0, 0, 0, 0}));
  PatternReplyConstraint choice(tokens, ReplyPattern::of_choices({"12", "2"}), {5});
  EXPECT_TRUE(choice.ended({2}));
  EXPECT_TRUE(choice.ended({0, 1}));
  EXPECT_FALSE(choice.ended({0}));
}

// A reply's masks through its constraint (a counted pattern's tables from a state's second visit, the
// cached masks) are the trie's walk from the same bytes without them, plus the ending token where the
// text matches; along random replies over a vocabulary with tokens that end inside a character.
TEST(ReplyPattern, TheTablesGiveTheWalksMasks) {
  std::vector<std::string> vocabulary;
  const std::vector<std::string> pieces = {"a", "b", "c", " ", ".", "-", "1", "9", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82", "\xAC", "\xE2\x82\xAC"};
  for (const std::string& first : pieces) {
    vocabulary.push_back(first);
    // "\xA9" "b": written as one literal, "\xA9b" would be one (out-of-range) escape, not a byte and a 'b'.
    for (const char* second : {"a", " ", "1", "\xC3", "\xA9" "b", "."}) vocabulary.push_back(first + second);
  }
  const int32_t eos = int32_t(vocabulary.size());
  vocabulary.push_back("");  // no bytes: the ending token
  auto tokens = std::make_shared<const TokenTrie>(vocabulary);
  std::mt19937 random(7);
  size_t compared = 0, tabled = 0;
  for (const char* source : {"[ a-cé€]{2,30}\\.", "1[abc ]{0,12}", "[a-c\\d]{3,40}", "[ab.é]{1,20}-\\d"}) {
    const auto pattern = ReplyPattern::compile(source);
    ASSERT_TRUE(pattern->counted()) << source;
    for (int reply = 0; reply < 20; ++reply) {
      SCOPED_TRACE(std::string(source) + ", reply " + std::to_string(reply));
      PatternReplyConstraint constraint(tokens, pattern, {eos});
      // The test's own state, from pattern->start(), has no tables: every mask is a walk.
      const auto walk = [&](const PatternReplyBytes& state, std::vector<uint8_t>& mask) { tokens->allow_tokens(state, mask); };
      compared += compare_masks_along_a_random_reply<PatternReplyConstraint, PatternReplyBytes>(
          constraint, pattern->start(), walk, vocabulary, eos, 40, random,
          [&](const PatternReplyBytes& state, const std::vector<int32_t>& generated) { tabled += !state.ended() && generated.size() > 2; });
    }
  }
  EXPECT_GT(compared, 300u);
  EXPECT_GT(tabled, 100u);
}

TEST(ReplyPattern, RefusesWhatItCannotHoldByName) {
  const std::vector<std::pair<std::string, std::string>> regexes = {
      {"(", "("},  // a syntax error names itself
      {"(?=a)b", "lookahead"},
      {"\\bword", "word boundary"},
      {"", "matches only the empty text"},
      {"a{0}", "matches only the empty text"},
      {"[^\\s\\S]", "no string matches"},
      {"\xE0\x81\xA1", "not UTF-8"},      // an overlong 'a'
      {"x|\xED\xA0\x80", "not UTF-8"},    // a surrogate
      {"a\xF4\x90\x80\x80", "not UTF-8"},  // past U+10FFFF
  };
  for (const auto& [regex, message] : regexes) {
    try {
      ReplyPattern::compile(regex);
      ADD_FAILURE() << regex << " was taken";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << regex << ": " << error.what();
    }
  }
  std::vector<std::string> many_choices;  // 600 texts of 20 letters, unlike each other
  std::mt19937 random(3);
  for (int i = 0; i < 600; ++i) {
    std::string text;
    for (int c = 0; c < 20; ++c) text += char('a' + random() % 26);
    many_choices.push_back(text);
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> choices = {
      {{}, "no choice given"},
      {{"a", ""}, "choice 1 is empty"},
      {{"x", "\xED\xA0\x80"}, "the choices: the pattern is not UTF-8"},
      {many_choices, "600 choices of 12000 bytes in all are more than an automaton of 4096 states holds"},
  };
  for (const auto& [list, message] : choices) {
    try {
      ReplyPattern::of_choices(list);
      ADD_FAILURE() << message << ": taken";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace tilefire::testing
