// Replies held to a GBNF grammar (tilefire/reply_grammar.h). The references are independent of the
// grammar's parser: std::regex (ECMAScript) for grammars that are regular, written by hand beside each, and a
// depth counter for balanced brackets. Every string over a small alphabet up to a length is asked both
// whether it is derived whole and whether it is a prefix of something derived (the byte automaton must
// refuse a byte exactly where nothing derived can follow). Then the masks over a vocabulary, replies the
// engine generates, and each refusal by name.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tilefire/errors.h"
#include "tilefire/engine.h"
#include "tests/common/random_reply_masks.h"
#include "tilefire/reply_grammar.h"

namespace tilefire::testing {
namespace {

// Every string over `alphabet` of at most `length` characters.
std::vector<std::string> strings_over(const std::string& alphabet, size_t length) {
  std::vector<std::string> all{""};
  for (size_t begin = 0, end = 1, l = 0; l < length; ++l, begin = end, end = all.size())
    for (size_t i = begin; i < end; ++i)
      for (char c : alphabet) all.push_back(all[i] + c);
  return all;
}

// For each string up to `length`: derived whole as `derived` says, and taken byte by byte exactly when some
// string up to `length` that `derived` accepts begins with it (the strings checked as prefixes are short
// enough, `prefix_length`, for every one that leads on to reach its end within `length`).
void expect_derives(const std::string& gbnf, const std::string& alphabet, size_t length, size_t prefix_length,
                    const std::function<bool(const std::string&)>& derived) {
  SCOPED_TRACE(gbnf);
  const auto grammar = ReplyGrammar::compile(gbnf);
  const std::vector<std::string> all = strings_over(alphabet, length);
  std::vector<std::string> matched;
  for (const std::string& text : all) {
    const bool expected = derived(text);
    ASSERT_EQ(grammar->matches(text), expected) << "'" << text << "'";
    if (expected) matched.push_back(text);
  }
  ASSERT_FALSE(matched.empty());
  for (const std::string& text : all) {
    if (text.size() > prefix_length) break;
    bool leads_on = false;
    for (const std::string& m : matched) leads_on = leads_on || m.compare(0, text.size(), text) == 0;
    GrammarParseTable table(grammar);
    GrammarReplyBytes state = table.start();
    EXPECT_EQ(state.feed(text), leads_on) << "prefix '" << text << "'";
  }
}

std::function<bool(const std::string&)> regex_reference(const char* regex) {
  return [pattern = std::regex(regex, std::regex::ECMAScript)](const std::string& text) { return std::regex_match(text, pattern); };
}

TEST(ReplyGrammar, RegularGrammarsDeriveWhatTheirRegexMatches) {
  const std::vector<std::pair<std::string, const char*>> cases = {
      {"root ::= \"a\" | \"b\" \"1\"*", "a|b1*"},
      {"root ::= word (\",\" \" \"? word)*\nword ::= [ab]+", "[ab]+(, ?[ab]+)*"},
      {"root ::= [^ ,]{2,3} (\",\" | \" \")?", "[ab1]{2,3}[, ]?"},
      {"root ::= (\"a\" | \"ab\") \"1\"?", "(a|ab)1?"},
      // A rule over several lines, comments, and a rule used before it is defined.
      {"# numbers or b's\nroot ::= ones\n  | bees # either\nones ::= \"1\"{1,3}\nbees ::= \"b\"+ \"a\"", "1{1,3}|b+a"},
      {"root ::= \"a\" . \"b\"", "a[\\s\\S]b"},
      {"root ::= opt \"a\"\nopt ::= \"b\" | ", "b?a"},
      {"root ::= \"a\"{2} \"b\"{2,} | \",\"{0,2} \"1\"", "a{2}b{2,}|,{0,2}1"},
      {"root ::= (([ab] \" \")?)+ \"1\"", "([ab] )*1"},  // a nullable group repeated: no parse loops
  };
  for (const auto& [gbnf, regex] : cases) expect_derives(gbnf, "ab1, ", 6, 3, regex_reference(regex));
}

// Brackets nested to any depth (not regular): one bracketed group, checked by a depth counter.
TEST(ReplyGrammar, NestedBracketsDeriveWhatADepthCounterAccepts) {
  const auto balanced_group = [](const std::string& text) {
    int depth = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      depth += text[i] == '(' ? 1 : -1;
      if (depth < 0 || (depth == 0 && i + 1 < text.size())) return false;
    }
    return !text.empty() && depth == 0;
  };
  expect_derives("root ::= \"(\" inner \")\"\ninner ::= (\"(\" inner \")\")*", "()", 12, 6, balanced_group);
  const auto grammar = ReplyGrammar::compile("root ::= \"(\" inner \")\"\ninner ::= (\"(\" inner \")\")*");
  GrammarParseTable table(grammar);
  GrammarReplyBytes state = table.start();
  ASSERT_TRUE(state.feed("(()()"));
  EXPECT_FALSE(state.complete());
  ASSERT_TRUE(state.feed(")"));
  EXPECT_TRUE(state.complete());
  EXPECT_TRUE(state.ended());  // nothing may follow the outer group
  // Depth is bounded (kMostGrammarDepth): a hundred open brackets are taken, a thousand are not.
  GrammarReplyBytes deep = table.start();
  EXPECT_TRUE(deep.feed(std::string(100, '(')));
  EXPECT_FALSE(deep.feed(std::string(1000, '(')));
}

// A repetition's rule is the last symbol of its alternative, so a parse's depth stays as it is however long
// the repetition runs: ten thousand characters of a star, of a plus in a group, of a bounded count, are
// taken (each would be a level deeper, past kMostGrammarDepth, if a repetition kept what follows it).
TEST(ReplyGrammar, ARepetitionKeepsItsDepthHoweverLongItRuns) {
  for (const char* gbnf : {"root ::= [ab]* \".\"", "root ::= (\"a\" | \"b\" [ab]+)+ \".\"", "root ::= \"a\"{0,1000} \"a\"{0,1000} \".\""}) {
    const auto grammar = ReplyGrammar::compile(gbnf);
    GrammarParseTable table(grammar);
    GrammarReplyBytes state = table.start();
    const size_t length = std::string_view(gbnf).find("1000") != std::string_view::npos ? 2000 : 10000;
    ASSERT_TRUE(state.feed(std::string(length, 'a'))) << gbnf;
    EXPECT_FALSE(state.complete()) << gbnf;
    ASSERT_TRUE(state.feed(".")) << gbnf;
    EXPECT_TRUE(state.ended()) << gbnf;
    EXPECT_LT(table.sets(), 2u * length) << gbnf;
  }
}

TEST(ReplyGrammar, CharactersAreReadAsUtf8) {
  const auto grammar = ReplyGrammar::compile("root ::= [à-ÿ]+ \"€\" | \"\\x41\\u00e9\\U0001F600\" [\\]\\-\\\\]");
  EXPECT_TRUE(grammar->matches("é€"));
  EXPECT_TRUE(grammar->matches("àÿ€"));
  EXPECT_FALSE(grammar->matches("€"));
  EXPECT_TRUE(grammar->matches("Aé\xF0\x9F\x98\x80]"));
  EXPECT_TRUE(grammar->matches("Aé\xF0\x9F\x98\x80-"));
  EXPECT_TRUE(grammar->matches("Aé\xF0\x9F\x98\x80\\"));
  EXPECT_FALSE(grammar->matches("Aé\xF0\x9F\x98\x80x"));
  GrammarParseTable table(grammar);
  GrammarReplyBytes state = table.start();
  EXPECT_TRUE(state.feed(uint8_t(0xC3)));   // begins à .. ÿ (U+00C0 .. U+00FF)
  EXPECT_FALSE(state.complete());           // inside a character
  GrammarReplyBytes other = table.start();
  EXPECT_FALSE(other.feed(uint8_t(0xC2)));  // U+0080 .. U+00BF: none of them leads on
  EXPECT_FALSE(other.feed(uint8_t(0xE2)));  // € cannot come first
  EXPECT_FALSE(other.feed(uint8_t(0xFF)));  // never UTF-8
  GrammarReplyBytes whole = table.start();
  ASSERT_TRUE(whole.feed("é€"));
  EXPECT_TRUE(whole.ended());
}

// The masks over a vocabulary: the tokens whose bytes lead on; the ending token only where the text is whole.
TEST(ReplyGrammar, TheConstraintAllowsEndingTokensOnlyWhereTheTextIsWhole) {
  //                                             0    1    2     3    4  (eos: no bytes)
  const std::vector<std::string> vocabulary = {"(", ")", "()", "a", ""};
  auto tokens = std::make_shared<const TokenTrie>(vocabulary);
  GrammarReplyConstraint constraint(tokens, ReplyGrammar::compile("root ::= (\"(\" \")\")+ \"a\"?"), {4});
  auto allowed_after = [&](const std::vector<int32_t>& generated) {
    std::vector<uint8_t> allowed(vocabulary.size(), 0);
    constraint.allowed(generated, allowed);
    return allowed;
  };
  EXPECT_EQ(allowed_after({}), (std::vector<uint8_t>{1, 0, 1, 0, 0}));
  EXPECT_EQ(allowed_after({0}), (std::vector<uint8_t>{0, 1, 0, 0, 0}));
  EXPECT_EQ(allowed_after({2}), (std::vector<uint8_t>{1, 0, 1, 1, 1}));  // "()": whole, may go on
  EXPECT_FALSE(constraint.ended({2}));
  EXPECT_TRUE(constraint.ended({2, 3}));  // "()a": nothing may follow
  EXPECT_TRUE(constraint.ended({2, 4}));  // the ending token
  EXPECT_THROW(allowed_after({1}), InputError);  // a token off the grammar
}

// A reply's masks through its constraint (the grammar's shared lists of the tokens from each set of
// parses, the cached masks) are the trie's walk from the same bytes in a table of its own, plus the ending
// token where the text is whole: along random replies, many to each grammar (so later replies read the
// lists earlier ones made), over a vocabulary with tokens that end inside a character.
TEST(ReplyGrammar, TheSharedTablesGiveTheWalksMasks) {
  std::vector<std::string> vocabulary;
  const std::vector<std::string> pieces = {"a", "b", "[", "]", ",", " ", "1", "\"", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82\xAC"};
  for (const std::string& first : pieces) {
    vocabulary.push_back(first);
    for (const char* second : {"a", "]", ",", "1", "\xC3", "\xA9" "b", "\""}) vocabulary.push_back(first + second);
  }
  const int32_t eos = int32_t(vocabulary.size());
  vocabulary.push_back("");  // no bytes: the ending token
  auto tokens = std::make_shared<const TokenTrie>(vocabulary);
  std::mt19937 random(11);
  size_t compared = 0;
  for (const char* gbnf : {"root ::= list\nlist ::= \"[\" (item (\",\" \" \"? item)*)? \"]\"\nitem ::= [0-9]+ | list | \"\\\"\" [a-bé€]* \"\\\"\"",
                           "root ::= ([a-b ]+ \"1\"){1,6}", "root ::= (\"é\" | \"€\" | [ab])+ \",\"?"}) {
    SCOPED_TRACE(gbnf);
    const auto grammar = ReplyGrammar::compile(gbnf);
    for (int reply = 0; reply < 12; ++reply) {
      SCOPED_TRACE("reply " + std::to_string(reply));
      GrammarReplyConstraint constraint(tokens, grammar, {eos});
      GrammarParseTable own_table(grammar);
      const auto walk = [&](const GrammarReplyBytes& state, std::vector<uint8_t>& mask) {
        tokens->walk(state, [&](int32_t token, const GrammarReplyBytes&) { mask[size_t(token)] = 1; });  // no lists
      };
      compared += compare_masks_along_a_random_reply(constraint, own_table.start(), walk, vocabulary, eos, 30, random);
    }
    EXPECT_GE(grammar->token_tables(), 2u) << "the lists were not used";
  }
  EXPECT_GT(compared, 200u);
}

// Replies the engine samples from the built-in model (its tokens are bytes) under a grammar: each that ends
// by itself or by eos is derived whole (an independent regex checks), each max_new_tokens cuts is a prefix.
TEST(ReplyGrammar, SampledRepliesAreDerived) {
  EngineOptions options;
  options.threads = 1;
  Engine engine(options);
  const auto tokens = std::make_shared<const TokenTrie>(vocabulary_bytes(nullptr, engine.model().vocab));
  const auto grammar = ReplyGrammar::compile(
      "root ::= \"[\" item (\",\" item)* \"]\"\n"
      "item ::= [0-9]{1,3} | \"\\\"\" [a-z]+ \"\\\"\"");
  const std::regex reference(R"(\[(\d{1,3}|"[a-z]+")(,(\d{1,3}|"[a-z]+"))*\])");
  size_t whole = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    GenerateRequest request;
    request.prompt = {'L', 'i', 's', 't', ':'};
    request.max_new_tokens = 40;
    request.sampling.temperature = 1.0f;
    request.sampling.seed = seed;
    constrain_to_grammar(request, tokens, grammar, engine.model().eos_tokens);
    const GenerateResult result = engine.generate(request);
    std::string text;
    for (int32_t token : result.tokens)
      if (std::find(engine.model().eos_tokens.begin(), engine.model().eos_tokens.end(), token) == engine.model().eos_tokens.end())
        text += char(token);
    if (result.finish_reason == "length") {
      GrammarParseTable table(grammar);
      GrammarReplyBytes state = table.start();
      EXPECT_TRUE(state.feed(text)) << text;
    } else {
      EXPECT_TRUE(std::regex_match(text, reference)) << result.finish_reason << ": " << text;
      ++whole;
    }
  }
  EXPECT_GT(whole, 0u);
}

// Grammars built to make the reading or the opening of rules deep or wide (a review's fuzzing found each
// crashing or hanging a first version): they are read, opened and followed in bounded time and stack, or
// refused by name.
TEST(ReplyGrammar, DeepOrWideGrammarsAreFollowedOrRefusedNotCrashed) {
  // Empty groups repeated inside repetitions: many rules open at once that all may be empty (each inner
  // count over each outer one). 100 by 100 are followed; 300 by 300 open more than kMostGrammarOpens, and
  // are refused at compile, or at the character after which they open.
  for (const char* gbnf : {"root ::= (){0,100}{0,100} \"a\"", "root ::= ((e){0,100}){0,100} \"a\"\ne ::= \"\""})
    EXPECT_TRUE(ReplyGrammar::compile(gbnf)->matches("a")) << gbnf;
  EXPECT_THROW(ReplyGrammar::compile("root ::= (){0,300}{0,300} \"a\""), InputError);
  const auto late_opening = ReplyGrammar::compile("root ::= \"a\" (){0,300}{0,300} \"b\"");
  try {
    late_opening->matches("ab");
    ADD_FAILURE() << "(){0,300}{0,300} was opened";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("opens more than 65536 ways through its rules at one character"), std::string::npos)
        << error.what();
  }
  // Rules that may be empty, each twice in the one before: opened over every subset of what is left to
  // come after them, 2^levels ways. 8 levels are followed; 20 pass kMostGrammarOpens and are refused at
  // compile (a first version took 23 s over 16).
  const auto doubling = [](int levels) {
    std::string gbnf = "root ::= r0 \"x\"\n";
    for (int i = 0; i < levels; ++i) gbnf += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " r" + std::to_string(i + 1) + "\n";
    return gbnf + "r" + std::to_string(levels) + " ::= \"\" | \"y\"\n";
  };
  const auto doubled = ReplyGrammar::compile(doubling(8));
  EXPECT_TRUE(doubled->matches("x"));
  EXPECT_TRUE(doubled->matches("yyyx"));
  EXPECT_THROW(ReplyGrammar::compile(doubling(20)), InputError);
  // Groups inside one another: the reader's depth is bounded.
  try {
    ReplyGrammar::compile("root ::= " + std::string(30000, '('));
    ADD_FAILURE() << "30,000 open groups were read";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("groups nested more than 256 deep"), std::string::npos) << error.what();
  }
  // 300 rules each the next followed by "z": the first character would sit 300 rules deep, past the bound.
  std::string late = "root ::= l0\n";
  for (int i = 0; i < 300; ++i) late += "l" + std::to_string(i) + " ::= l" + std::to_string(i + 1) + " \"z\"\n";
  late += "l300 ::= \"a\"\n";
  try {
    ReplyGrammar::compile(late);
    ADD_FAILURE() << "a grammar whose first character is past the depth bound compiled";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("more than 256 rules inside one another before its first character"), std::string::npos)
        << error.what();
  }
  // An "a" a rule deeper at each of 300 levels: past the bound the reply has nothing within it to choose,
  // and the constraint says why.
  std::string nested = "root ::= n0\n";
  for (int i = 0; i < 300; ++i) nested += "n" + std::to_string(i) + " ::= \"a\" n" + std::to_string(i + 1) + " \"z\"\n";
  nested += "n300 ::= \"a\"\n";
  const std::vector<std::string> vocabulary = {"a", "z"};
  GrammarReplyConstraint constraint(std::make_shared<const TokenTrie>(vocabulary), ReplyGrammar::compile(nested), {});
  std::vector<int32_t> generated;
  std::vector<uint8_t> allowed(2);
  try {
    for (int step = 0; step < 400; ++step) {
      std::fill(allowed.begin(), allowed.end(), 0);
      constraint.allowed(generated, allowed);
      ASSERT_EQ(allowed, (std::vector<uint8_t>{1, 0})) << "after " << step << " a's";
      generated.push_back(0);
    }
    ADD_FAILURE() << "400 a's were followed";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("nests the grammar's rules 256 deep"), std::string::npos) << error.what();
    EXPECT_GT(generated.size(), 100u);
  }
}

// The depth message is for a state whose own steps the bound cut: another state with nothing to choose
// (here for want of a token with an é) is left to the engine's "allowed no token".
TEST(ReplyGrammar, TheDepthIsBlamedOnlyWhereItCutTheSteps) {
  std::string gbnf = "root ::= \"a\" r0 | \"b\" \"é\"\n";
  for (int i = 0; i < 300; ++i) gbnf += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"e\"\n";
  gbnf += "r300 ::= \"c\"\n";
  const std::vector<std::string> vocabulary = {"a", "b", "c", "e"};
  GrammarReplyConstraint constraint(std::make_shared<const TokenTrie>(vocabulary), ReplyGrammar::compile(gbnf), {});
  std::vector<uint8_t> allowed(vocabulary.size(), 0);
  constraint.allowed({}, allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 1, 0, 0}));  // after "a" every parse would sit past the bound
  std::fill(allowed.begin(), allowed.end(), 0);
  EXPECT_NO_THROW(constraint.allowed({1}, allowed));
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 0, 0, 0}));
}

TEST(ReplyGrammar, RefusesWhatItCannotHoldByName) {
  std::string deep_chain;  // l0 ::= l1 "z", ..., l300 ::= "a"
  for (int i = 0; i < 300; ++i) deep_chain += "l" + std::to_string(i) + " ::= l" + std::to_string(i + 1) + " \"z\"\n";
  deep_chain += "l300 ::= \"a\"\n";
  std::string many_places, many_alternatives;  // x 4000 times; x ::= "" | "b" | "b" ... (4000)
  for (int i = 0; i < 4000; ++i) many_places += " x", many_alternatives += " | \"b\"";
  std::string sixteen_thousand_options;  // under a long name: each its own rule, 4 symbols each
  for (int i = 0; i < 16400; ++i) sixteen_thousand_options += " \"a\"?";
  std::string seven_thousands;  // 70,000 symbols spelt out
  for (int i = 0; i < 7; ++i) seven_thousands += " \"abcdefghij\"{1000}";
  const std::string ambiguous = "root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\"";  // 2^n parses after n a's
  const std::vector<std::pair<std::string, std::string>> grammars = {
      {"", "the grammar is empty"},
      {"item ::= \"a\"", "no rule 'root'"},
      {"root ::= item", "line 1, column 10: rule 'item' is used but not defined"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
      {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
      {"root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"", "rule 'x' is left-recursive"},
      {"root ::= \"a\" x | \"b\"\nx ::= \"c\" x", "rule 'x' can never end"},
      {"root ::= \"a\" (\"b\" root)", "a group in rule 'root' can never end"},
      {"root ::= \"abc", "line 1, column 10: a literal is not closed"},
      {"root ::= [abc", "a class is not closed"},
      {"root ::= (\"a\"", "a group is not closed"},
      {"root ::= \"a\")", "a ')' with no group open"},
      {"root ::= [^\\x00-\\U0010FFFF]", "a class with no characters"},
      {"root ::= \"a\" [^\\x00-\\uD7FF\\uE000-\\U0010FFFF]", "a class with no characters (surrogates are none"},
      {"root ::= " + std::string(5000, 'n') + "\n" + std::string(5000, 'n') + " ::=" + sixteen_thousand_options, "more than 65536 symbols"},
      {"root ::= [z-a]", "a range whose end comes before its start"},
      {"root ::= \"\\q\"", "unknown escape \\q"},
      {"root ::= \"\\\xC3\xA9\"", "unknown escape: a backslash, then the byte \\xC3"},
      // The root may be empty or a parse nesting past the bound before its first character: the bound named.
      {"root ::= \"\" | l0\n" + deep_chain, "more than 256 rules inside one another before its first character"},
      // A rule of many alternatives opened at each of many places: the work is bounded, not only the parses.
      {"root ::= " + many_places + " \"a\"\nx ::= \"\"" + many_alternatives, "ways through its rules at one character"},
      {"root ::= \"\\xZZ\"", "an escape needs 2 hex digits"},
      {"root ::= \"\\uD800\"", "an escape names no character"},
      {"root ::= \"a\"{3,2}", "whose n is less than its m"},
      {"root ::= \"a\"{1001}", "a repetition past 1000"},
      {"root ::= \"a\"{2", "a repetition {m,n} is not closed"},
      {"root ::= *", "unexpected '*'"},
      {"root ::= \"a\" \xE2\x82\xAC", "unexpected the byte \\xE2"},  // a character outside a literal, named by its byte
      {"root ::= \"a\"\n\x01", "line 2, column 1: unexpected the byte \\x01"},
      {"\x01root ::= \"a\"", "line 1, column 1: expected a rule's name, got the byte \\x01"},
      {"root ::= \"\" | (\"\")*", "derives only the empty text"},
      {"root = \"a\"", "expected ::= after the rule name 'root'"},
      {"root ::= \"\xC3\"", "not UTF-8"},
      {"root ::=" + seven_thousands, "more than 65536 symbols"},
  };
  for (const auto& [gbnf, message] : grammars) {
    try {
      ReplyGrammar::compile(gbnf);
      ADD_FAILURE() << "compiled: " << gbnf;
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << gbnf << "\n  gave: " << error.what();
    }
  }
  // A table past its bound: a set of parses per character, each holding more (here 64 KiB, where a reply's
  // is 64 MiB); the refused step leaves the state and the table as they were.
  const auto counting = ReplyGrammar::compile("root ::= x{0,1000} \".\"\nx ::= \"a\" | \"a\" \"a\"");
  GrammarParseTable small(counting, 64 << 10);
  GrammarReplyBytes counted = small.start();
  size_t taken = 0;
  try {
    while (taken < 2000 && counted.feed(uint8_t('a'))) ++taken;
    ADD_FAILURE() << taken << " a's were followed";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("take more than 64 KiB"), std::string::npos) << error.what();
    EXPECT_GT(taken, 10u);
    const size_t sets = small.sets();
    EXPECT_TRUE(counted.feed(".")) << "the state before the refused step";
    EXPECT_TRUE(counted.ended());
    EXPECT_EQ(small.sets(), sets + 1);
  }
  // Too ambiguous to follow: found while reading, an InputError naming the bound.
  const auto grammar = ReplyGrammar::compile(ambiguous);
  GrammarParseTable table(grammar);
  GrammarReplyBytes state = table.start();
  EXPECT_TRUE(state.feed(std::string(8, 'a')));
  try {
    state.feed(std::string(8, 'a'));
    ADD_FAILURE() << "16 a's were followed";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("more than 1024 parses"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tilefire::testing
