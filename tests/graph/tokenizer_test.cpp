// The Hugging Face tokenizer (graph/tokenizer.h).
//
// Two kinds of check:
// - a small tokenizer written here, whose ids and text are worked out by hand, and the refusals of
//   tokenizer.json files Tilefire does not run;
// - the real tokenizer.json files of GPT-2, Llama 2, Llama 3 and Qwen3 against Hugging Face's own
//   JavaScript tokenizers run by Node.js on the same inputs (tests/graph/tokenizer_oracle.mjs): a corpus
//   of awkward text and random text (TILEFIRE_FUZZ_SCALE=K for K times as many), encoded with and without
//   the special tokens, and id lists decoded with and without them. scripts/fetch-tokenizers fetches
//   both (scripts/test and scripts/test-sanitizers run it); without them these tests skip, or fail when
//   TILEFIRE_REQUIRE_TOKENIZER_FILES=1 says they must run.
#include "graph/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "graph/unicode.h"
#include "tests/common/input_mutator.h"
#include "tests/common/test_models.h"
#include "tests/common/tokenizer_files.h"
#include "tests/common/tokenizer_oracle.h"
#include "tilefire/errors.h"
#include "tilefire/tokenizer.h"

namespace tilefire {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::have_tokenizer_files;
using testing::model_tokenizer;
using testing::tokenizer_files;
using testing::compare_with_oracle;
using testing::escaped;
using testing::random_text;

// ---- split_by_pattern ----------------------------------------------------------------------------

std::vector<std::string> pieces(SplitPattern pattern, std::string_view text) {
  std::vector<std::string> result;
  for (std::string_view piece : split_by_pattern(pattern, text)) result.emplace_back(piece);
  return result;
}

TEST(SplitByPattern, Llama3KeepsALeadingSpaceWithTheWordAndCutsDigitsByThree) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitPattern::llama3, "Hello world's  end\n\nok 12345"),
            (V{"Hello", " world", "'s", " ", " end", "\n\n", "ok", " ", "123", "45"}));
  // (?i:...) contractions, a tab before a word, punctuation with its line breaks, trailing space.
  EXPECT_EQ(pieces(SplitPattern::llama3, "IT'S\tgo!!\n\n x  "), (V{"IT", "'S", "\tgo", "!!\n\n", " x", "  "}));
}

TEST(SplitByPattern, Qwen2CutsEveryDigit) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitPattern::qwen2, "ok 12345"), (V{"ok", " ", "1", "2", "3", "4", "5"}));
}

TEST(SplitByPattern, Gpt2IsCaseSensitiveAndTakesOnlyASpaceBeforeAWord) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitPattern::gpt2, "Hello world's  end IT'S\tgo 42!"),
            (V{"Hello", " world", "'s", " ", " end", " IT", "'", "S", "\t", "go", " 42", "!"}));
}

// GPT-4o's regex splits words by case: a run of capitals keeps the small letters after its last one
// ("JSONParser" is one piece, "CamelCase" two), a contraction stays with its word, and punctuation keeps the
// line breaks and slashes after it.
TEST(SplitByPattern, O200kSplitsWordsByCase) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitPattern::o200k, "HelloWorld's CamelCase JSONParser x/y ok!!/\n\n12345"),
            (V{"Hello", "World's", " Camel", "Case", " JSONParser", " x", "/y", " ok", "!!/\n\n", "123", "45"}));
  // A mark is a word's head and tail both: after a space, the first word alternative takes the mark as its
  // tail and stops before the capital (its head run gives back the capital, which no tail may be).
  EXPECT_EQ(pieces(SplitPattern::o200k, "e\u0301tudeX \u0301A"), (V{"e\u0301tude", "X", " \u0301", "A"}));
}

// Mistral's Tekken: GPT-4o's word split without the contractions (the apostrophe leads a word of its own)
// and one number character per piece.
TEST(SplitByPattern, TekkenSplitsWordsByCaseWithoutContractions) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitPattern::tekken, "HelloWorld's IT'S CamelCase x/y ok!!/\n\n12345"),
            (V{"Hello", "World", "'s", " IT", "'S", " Camel", "Case", " x", "/y", " ok", "!!/\n\n", "1", "2", "3", "4", "5"}));
}

TEST(SplitByPattern, PiecesCoverTheTextInOrder) {
  const std::string text = "a\u00e9 \u6f22\u5b57\r\n\r\n 1\u00bd\u2160 \U0001F600!? \u3000x";
  for (SplitPattern pattern : {SplitPattern::gpt2, SplitPattern::llama3, SplitPattern::qwen2, SplitPattern::o200k, SplitPattern::tekken}) {
    std::string joined;
    for (const std::string& piece : pieces(pattern, text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

// ---- a tokenizer worked out by hand ----------------------------------------------------------------

// Llama 2's layout: characters with byte fallback, "▁" for spaces, <s> in the template.
json hand_tokenizer() {
  json vocab = testing::byte_fallback_vocabulary();
  int next = 259;
  for (const char* token : {"\u2581", "a", "b", "c", "ab", "\u2581ab", "bc"}) vocab[token] = next++;  // 259 .. 265
  return {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "\u2581 ab", "b c"}}, {"unk_token", "<unk>"},
                 {"fuse_unk", true}, {"byte_fallback", true}}},
      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}, {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                             {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                                       {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
  };
}

HfTokenizer load_json(const json& document, const testing::TempDir& dir) {
  const fs::path path = dir.path() / "tokenizer.json";
  testing::write_file_text(path, document.dump());
  return HfTokenizer::load(path);
}

TEST(HandTokenizer, MergesLowestRankFirstThenLeftmost) {
  const testing::TempDir dir("tokenizer");
  const HfTokenizer tokenizer = load_json(hand_tokenizer(), dir);
  // "▁ab▁abc": (a, b) merges at both places, then (▁, ab); "c" stays, since (b, c) lost its b.
  EXPECT_EQ(tokenizer.encode("ab abc"), (std::vector<int32_t>{1, 264, 264, 262}));
  EXPECT_EQ(tokenizer.encode("ab abc", /*add_special_tokens=*/false), (std::vector<int32_t>{264, 264, 262}));
  // "bc" merges when no "a" takes the b first.
  EXPECT_EQ(tokenizer.encode("bc", false), (std::vector<int32_t>{259, 265}));
}

TEST(HandTokenizer, ByteFallbackUnknownsAndAddedTokens) {
  const testing::TempDir dir("tokenizer");
  const HfTokenizer tokenizer = load_json(hand_tokenizer(), dir);
  // é has no token: its two UTF-8 bytes' <0xXX> tokens. An added token in the text is matched first, and
  // the Prepend normalizer applies to each piece of text between added tokens.
  EXPECT_EQ(tokenizer.encode("\u00e9</s>a", false), (std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9, 2, 259, 260}));
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{1, 264, 264, 262}), "<s> ab abc");
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{1, 264, 264, 262}, /*skip_special_tokens=*/true), "ab abc");
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9}), "\u00e9");
  // Bytes that do not form UTF-8: one U+FFFD per byte token.
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{260, 3 + 0xC3, 3 + 0x41}), "a\uFFFD\uFFFD");
  // Without byte fallback, consecutive unknown characters fuse into one <unk>.
  json document = hand_tokenizer();
  document["model"]["byte_fallback"] = false;
  const testing::TempDir dir2("tokenizer");
  EXPECT_EQ(load_json(document, dir2).encode("\u00e9\u00e9a", false), (std::vector<int32_t>{259, 0, 260}));
  // An id past the vocabulary decodes to nothing; a negative one is refused.
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{260, 100000}), "a");
  EXPECT_THROW(tokenizer.decode(std::vector<int32_t>{-1}), InputError);
}

// The Metaspace pre-tokenizer and decoder, on the examples of the Rust library's own unit tests: with
// split, each "▁" begins a piece ("Hey   friend!" is "▁Hey", "▁", "▁", "▁friend!"); prepend_scheme
// "first" prepends only to the text at offset 0 (not after an added token); the decoder drops every "▁"
// of the first token.
TEST(HandTokenizer, MetaspaceAsTheRustLibraryDoes) {
  json document = hand_tokenizer();
  document["normalizer"] = nullptr;
  document["model"]["ignore_merges"] = true;  // a piece in the vocabulary is its token: no merges needed here
  json& vocab = document["model"]["vocab"];
  int next = 266;
  for (const char* token : {"\u2581Hey", "\u2581friend!", "\u2581\u2581", "how", "\u2581how"}) vocab[token] = next++;  // 266 .. 270
  const auto tokenizer_with = [&](const char* scheme, bool split, const testing::TempDir& dir) {
    document["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
    document["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
    return load_json(document, dir);
  };
  const testing::TempDir dir("tokenizer");
  const HfTokenizer split_always = tokenizer_with("always", true, dir);
  EXPECT_EQ(split_always.encode("Hey   friend!", false), (std::vector<int32_t>{266, 259, 259, 267}));
  EXPECT_EQ(split_always.decode(std::vector<int32_t>{266, 267}), "Hey friend!");
  EXPECT_EQ(split_always.decode(std::vector<int32_t>{268, 266}), " Hey");  // "▁▁" first: both dropped
  EXPECT_EQ(split_always.encode("</s>how", false), (std::vector<int32_t>{2, 270}));
  const testing::TempDir dir2("tokenizer");
  const HfTokenizer first = tokenizer_with("first", false, dir2);
  EXPECT_EQ(first.encode("</s>how", false), (std::vector<int32_t>{2, 269}));
  EXPECT_EQ(first.encode("how", false), (std::vector<int32_t>{270}));
  const testing::TempDir dir3("tokenizer");
  EXPECT_EQ(tokenizer_with("never", false, dir3).decode(std::vector<int32_t>{266, 267}), " Hey friend!");
}

// Cases where the Rust library's own rules decide, each one worked out from them (a review found these).
TEST(HandTokenizer, FollowsTheRustLibraryInItsCorners) {
  using Ids = std::vector<int32_t>;
  {  // A pair listed twice takes its last rank: (a, b) ranks after (x, a) here, so "xab" is "xa" "b".
    json document = hand_tokenizer();
    document["model"]["vocab"]["x"] = 266;
    document["model"]["vocab"]["xa"] = 267;
    document["model"]["merges"] = {"a b", "x a", "a b"};
    document["normalizer"] = nullptr;
    const testing::TempDir dir("tokenizer");
    EXPECT_EQ(load_json(document, dir).encode("xab", false), (Ids{267, 261}));
  }
  {  // A segment the normalizer empties is no piece: no prefix is added to it.
    json document = hand_tokenizer();
    document["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "c"}}}, {"content", ""}};
    document["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", false}};
    const testing::TempDir dir("tokenizer");
    EXPECT_EQ(load_json(document, dir).encode("c", false), Ids{});
    EXPECT_EQ(load_json(document, dir).encode("ca", false), (Ids{259, 260}));
  }
  {  // An unknown character waits: byte-fallback bytes go before it, and it fuses with the next unknown.
    json document = hand_tokenizer();
    document["normalizer"] = nullptr;
    document["model"]["vocab"].erase("<0xBC>");  // so "ü" (C3 BC) has no byte tokens; "é" (C3 A9) has
    const testing::TempDir dir("tokenizer");
    EXPECT_EQ(load_json(document, dir).encode("\u00fc\u00e9\u00fca", false), (Ids{3 + 0xC3, 3 + 0xA9, 0, 260}));
  }
  {  // Added tokens with `normalized` are matched after the normalizer, in the text between the others, and
     // as the normalizer makes them: "\u2581ab" is matched as "\u2581\u2581ab" (Prepend), which "  ab" in
     // the text becomes. Matched as written, the second "\u2581" of "\u2581c\u2581\u2581ab" would be a 259.
    json document = hand_tokenizer();
    document["added_tokens"].push_back({{"id", 264}, {"content", "\u2581ab"}, {"special", false}, {"normalized", true}});
    const testing::TempDir dir("tokenizer");
    const HfTokenizer tokenizer = load_json(document, dir);
    EXPECT_EQ(tokenizer.encode("c  ab</s>ab", false), (Ids{259, 262, 264, 2, 264}));
    // A normalized token the normalizer empties could match nowhere (or everywhere): refused by name.
    document["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "\u2581ab"}}}, {"content", ""}};
    const testing::TempDir dir2("tokenizer");
    testing::write_file_text(dir2.path() / "tokenizer.json", document.dump());
    try {
      HfTokenizer::load(dir2.path() / "tokenizer.json");
      ADD_FAILURE() << "a normalized token the normalizer empties was loaded";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("is nothing after the normalizer"), std::string::npos) << e.what();
    }
  }
}

// Streaming: a character split over byte-fallback tokens shows once it is whole, never as U+FFFD first.
// ByteFallback decodes a run of byte tokens that is not UTF-8 as one U+FFFD per token, the characters it
// already completed included; add() waits while that is so, and finish() gives the whole text on a line of
// its own should the run never complete. Through the public API, as the command line uses it.
TEST(HandTokenizer, StreamingTextHoldsBackAnUnfinishedCharacter) {
  const testing::TempDir dir("tokenizer");
  testing::write_file_text(dir.path() / "tokenizer.json", hand_tokenizer().dump());
  const Tokenizer tokenizer((dir.path() / "tokenizer.json").string());
  const std::vector<int32_t> prompt = tokenizer.encode("ab");  // <s> ▁ab
  StreamingText stream(tokenizer, prompt);
  EXPECT_EQ(stream.add(264), " ab");          // ▁ab
  EXPECT_EQ(stream.add(3 + 0xC3), "");        // the first byte of é: held back
  EXPECT_EQ(stream.add(3 + 0xA9), "\u00e9");  // whole
  EXPECT_EQ(stream.add(3 + 0xE2), "");        // the run C3 A9 E2 is not UTF-8: é reads as U+FFFD for now
  EXPECT_EQ(stream.add(3 + 0x82), "");
  EXPECT_EQ(stream.add(3 + 0xAC), "\u20ac");  // € completes the run
  EXPECT_EQ(stream.add(3 + 0xE2), "");        // a last character never finished
  const std::string six_replacements = "\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD";
  EXPECT_EQ(stream.finish(), "\n(the generated text, decoded whole:)  ab" + six_replacements);
  // Without the unfinished byte, the stream ends with nothing more to say.
  StreamingText whole(tokenizer, prompt);
  std::string shown;
  for (int32_t token : {264, 3 + 0xC3, 3 + 0xA9, 259, 260}) shown += whole.add(token);
  EXPECT_EQ(shown + whole.finish(), " ab\u00e9 a");
}

// A negative id is refused where it is given, and a refused add() leaves the stream as it was. The stream
// holds the tokenizer's tables, so moving the Tokenizer it was made with does not break it.
TEST(HandTokenizer, StreamingTextRefusesNegativeIdsAndOutlivesAMovedTokenizer) {
  const testing::TempDir dir("tokenizer");
  testing::write_file_text(dir.path() / "tokenizer.json", hand_tokenizer().dump());
  Tokenizer tokenizer((dir.path() / "tokenizer.json").string());
  const std::vector<int32_t> prompt = tokenizer.encode("ab");
  EXPECT_THROW({ StreamingText refused(tokenizer, std::vector<int32_t>{prompt[0], -3}); }, InputError);
  StreamingText stream(tokenizer, prompt);
  const Tokenizer moved = std::move(tokenizer);
  std::string shown = stream.add(264);
  EXPECT_THROW(stream.add(-1), InputError);
  shown += stream.add(259);
  shown += stream.add(260);
  EXPECT_EQ(shown + stream.finish(), " ab a");
  EXPECT_EQ(moved.continuation(prompt, {264, 259, 260}), " ab a");
}

// The Digits pre-tokenizer splits by \p{N}, as Rust's char::is_numeric does: merges that would join two
// pieces show where it cut. U+216B (ROMAN NUMERAL TWELVE, Nl) is a number character.
TEST(HandTokenizer, DigitsSplitEveryNumberCharacter) {
  json document = hand_tokenizer();
  document["normalizer"] = nullptr;
  json& vocab = document["model"]["vocab"];
  int next = 266;
  for (const char* token : {"1", "2", "12", "\u216b", "\u216b1", "a1"}) vocab[token] = next++;  // 266 .. 271
  document["model"]["merges"] = {"1 2", "\u216b 1", "a 1"};
  using Ids = std::vector<int32_t>;
  const auto encode_with = [&](bool individual, const std::string& text) {
    document["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", individual}};
    const testing::TempDir dir("tokenizer");
    return load_json(document, dir).encode(text, false);
  };
  EXPECT_EQ(encode_with(true, "12"), (Ids{266, 267}));
  EXPECT_EQ(encode_with(false, "12"), (Ids{268}));
  EXPECT_EQ(encode_with(true, "\u216b1"), (Ids{269, 266}));
  EXPECT_EQ(encode_with(false, "\u216b1"), (Ids{270}));       // one run of number characters
  EXPECT_EQ(encode_with(false, "a1"), (Ids{260, 266}));        // a letter and a number: two pieces
}

// A Split on a literal (Gemma's files split on {"String": " "}), with each SplitDelimiterBehavior of the
// tokenizers library, here on "b": the merges (a b), (b c) and (b b) show where the pieces were cut.
TEST(HandTokenizer, SplitOnALiteralPlacesTheMatchAsItsBehaviorSays) {
  json document = hand_tokenizer();
  document["normalizer"] = nullptr;
  document["model"]["vocab"]["bb"] = 266;
  document["model"]["merges"].push_back("b b");
  using Ids = std::vector<int32_t>;
  const auto encode_with = [&](const char* behavior, const std::string& text) {
    document["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "b"}}}, {"behavior", behavior}, {"invert", false}};
    const testing::TempDir dir("tokenizer");
    return load_json(document, dir).encode(text, false);
  };
  // "abc": a | b | c. ab = 263, bc = 265.
  EXPECT_EQ(encode_with("Removed", "abc"), (Ids{260, 262}));
  EXPECT_EQ(encode_with("Isolated", "abc"), (Ids{260, 261, 262}));
  EXPECT_EQ(encode_with("MergedWithPrevious", "abc"), (Ids{263, 262}));
  EXPECT_EQ(encode_with("MergedWithNext", "abc"), (Ids{260, 265}));
  EXPECT_EQ(encode_with("Contiguous", "abc"), (Ids{260, 261, 262}));
  // "abbc": a match right after another stays alone when merged; Contiguous joins the run (bb = 266).
  EXPECT_EQ(encode_with("Isolated", "abbc"), (Ids{260, 261, 261, 262}));
  EXPECT_EQ(encode_with("MergedWithPrevious", "abbc"), (Ids{263, 261, 262}));
  EXPECT_EQ(encode_with("MergedWithNext", "abbc"), (Ids{260, 261, 265}));
  EXPECT_EQ(encode_with("Contiguous", "abbc"), (Ids{260, 266, 262}));
  EXPECT_EQ(encode_with("Removed", "abbc"), (Ids{260, 262}));
  // A leading match has nothing before it to join.
  EXPECT_EQ(encode_with("MergedWithPrevious", "bab"), (Ids{261, 263}));

  document["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "b"}}}, {"behavior", "Isolated"}, {"invert", true}};
  const testing::TempDir dir("tokenizer");
  EXPECT_THROW(load_json(document, dir), InputError);
}

TEST(HandTokenizer, RefusesTextThatIsNotUtf8) {
  const testing::TempDir dir("tokenizer");
  const HfTokenizer tokenizer = load_json(hand_tokenizer(), dir);
  try {
    tokenizer.encode("abc\xC3(");
    FAIL() << "no error";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("not valid UTF-8 at byte 3"), std::string::npos) << error.what();
  }
}

// Each edit of the hand tokenizer makes a file Tilefire does not run; the message names the key.
TEST(HandTokenizer, RefusesWhatItDoesNotRunByName) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> edits = {
      {[](json& d) { d["model"]["type"] = "WordPiece"; }, "model.type: 'WordPiece' is not supported"},
      {[](json& d) { d.erase("model"); }, "the key 'model' is missing"},
      {[](json& d) { d["model"]["merges"].push_back("a zz"); }, "model.merges[3]: \"zz\" is not in model.vocab"},
      {[](json& d) { d["model"]["merges"].push_back("abc"); }, "model.merges[3]: \"abc\" is not two tokens"},
      {[](json& d) { d["model"]["vocab"]["x"] = -2; }, "model.vocab: the id of \"x\" is -2"},
      {[](json& d) { d["model"]["vocab"]["x"] = 260; }, "the id 260 is given to both"},
      {[](json& d) { d["model"]["unk_token"] = "<nope>"; }, "model.unk_token: \"<nope>\" is not in model.vocab"},
      {[](json& d) { d["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix: is \"##\""},
      {[](json& d) { d["model"]["dropout"] = 0.1; }, "model.dropout: is 0.1"},
      {[](json& d) { d["added_tokens"][0]["single_word"] = true; }, "added_tokens[0].single_word: is true for \"<s>\""},
      {[](json& d) { d["added_tokens"][0]["rstrip"] = "yes"; }, "added_tokens[0].rstrip"},
      {[](json& d) { d["normalizer"] = {{"type", "NFKC"}}; }, "normalizer: the normalizer 'NFKC' is not supported"},
      {[](json& d) { d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}}; },
       "pre_tokenizer.pattern.Regex: the regex \"\\\\w+\" is not one Tilefire knows"},
      {[](json& d) { d["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "the pre-tokenizer 'Whitespace' is not supported"},
      {[](json& d) { d["decoder"] = nullptr; }, "decoder: is missing"},
      {[](json& d) { d["decoder"]["decoders"][3]["start"] = "one"; }, "decoder.decoders[3].start: expected a count"},
      {[](json& d) { d["post_processor"] = {{"type", "BertProcessing"}}; }, "the post-processor 'BertProcessing' is not supported"},
      {[](json& d) { d["post_processor"]["special_tokens"]["<s>"]["ids"] = {99999}; }, "99999 is not a token id of this tokenizer"},
      {[](json& d) { d["post_processor"] = {{"type", "Sequence"}, {"processors", {d["post_processor"], d["post_processor"]}}}; },
       "post_processor.processors[1]: a second TemplateProcessing"},
      {[](json& d) { d["added_tokens"][0]["id"] = 300; }, "added_tokens[0].id: \"<s>\" has the id 300 here and 1 in model.vocab"},
      {[](json& d) { d["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}, {"prepend_scheme", "first"}}; },
       "pre_tokenizer.add_prefix_space: is false while prepend_scheme is \"first\""},
      {[](json& d) { d["decoder"] = {{"type", "Metaspace"}, {"replacement", ""}}; }, "decoder.replacement: expected one character, not \"\""},
      {[](json& d) { d["decoder"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}}; },
       "decoder.prepend_scheme: expected always, first or never"},
      {[](json& d) {
         json nested = {{"type", "NFC"}};
         for (int level = 0; level < 40; ++level) nested = {{"type", "Sequence"}, {"normalizers", {nested}}};
         d["normalizer"] = nested;
       },
       "Sequences nest deeper than 16"},
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    json document = hand_tokenizer();
    edits[i].first(document);
    const testing::TempDir dir("tokenizer");
    try {
      load_json(document, dir);
      ADD_FAILURE() << "edit " << i << " was accepted; expected: " << edits[i].second;
    } catch (const InputError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(edits[i].second), std::string::npos) << "edit " << i << ": " << message;
      EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
    }
  }
}

// tokenizer.json's vocabulary and merges are read as flat lists (graph/tokenizer_json.h), not as a JSON
// tree: every form of them must still load, or be refused, as the tree gave it.
TEST(HandTokenizer, VocabularyAndMergesReadInEveryForm) {
  const testing::TempDir dir("tokenizer");
  const fs::path path = dir.path() / "tokenizer.json";
  const auto load_text = [&](const std::string& text) {
    testing::write_file_text(path, text);
    return HfTokenizer::load(path);
  };
  const auto expect_refused = [&](const std::string& text, const std::string& expected) {
    try {
      load_text(text);
      ADD_FAILURE() << "accepted: " << text.substr(0, 200) << "; expected: " << expected;
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  const std::string texts[] = {"ab abc", "bc", "\u00e9ab", "</s>ab"};

  // Merges as [left, right] lists (newer files) give the same tokenizer as "left right" strings.
  json pairs = hand_tokenizer();
  pairs["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"\u2581", "ab"}), json::array({"b", "c"})});
  const HfTokenizer from_strings = load_json(hand_tokenizer(), dir), from_pairs = load_json(pairs, dir);
  for (const std::string& text : texts) EXPECT_EQ(from_strings.encode(text), from_pairs.encode(text)) << text;

  // A vocabulary or a merge list outside "model" is an ordinary member; "model" may come last.
  json elsewhere = hand_tokenizer();
  elsewhere["extra"] = {{"vocab", {{"zz", 1}}}, {"merges", {"z z"}}};
  const std::string model_last = "{\"extra\": " + elsewhere["extra"].dump() + ", \"added_tokens\": " + elsewhere["added_tokens"].dump() +
                                 ", \"normalizer\": " + elsewhere["normalizer"].dump() + ", \"decoder\": " + elsewhere["decoder"].dump() +
                                 ", \"post_processor\": " + elsewhere["post_processor"].dump() + ", \"model\": " + elsewhere["model"].dump() + "}";
  const HfTokenizer reordered = load_text(model_last);
  for (const std::string& text : texts) EXPECT_EQ(reordered.encode(text), from_strings.encode(text)) << text;

  // A key given twice keeps the last, as the JSON tree does: the first "merges" here would be refused, and
  // the second, without (b, c), leaves "bc" in characters.
  std::string twice = hand_tokenizer().dump();
  const std::string merges_key = "\"merges\":";
  twice.insert(twice.find(merges_key), merges_key + "[\"z z\", 7],");
  twice.replace(twice.find(",\"b c\""), 6, "");
  EXPECT_EQ(load_text(twice).encode("bc", false), (std::vector<int32_t>{259, 261, 262}));

  // Merges of another shape are refused showing the value as the file gives it.
  for (const auto& [merge, shown] : std::vector<std::pair<std::string, std::string>>{
           {"[]", "[]"}, {"[\"a\"]", "[\"a\"]"}, {"[\"a\", \"b\", \"c\"]", "[\"a\",\"b\",\"c\"]"}, {"[1, \"b\"]", "[1,\"b\"]"},
           {"[\"a\", [\"b\"]]", "[\"a\",[\"b\"]]"}, {"{\"a\": \"b\"}", "{\"a\":\"b\"}"}, {"null", "null"}, {"[\"a\", \"b\", {}]", "[\"a\",\"b\",{}]"}}) {
    std::string text = hand_tokenizer().dump();
    text.replace(text.find("\"b c\""), 5, merge);
    expect_refused(text, "model.merges[2]: expected \"left right\" or [left, right], not " + shown);
  }
  // A token listed twice in the vocabulary is refused: the tree kept the last, leaving an id without a token.
  std::string listed_twice = hand_tokenizer().dump();
  listed_twice.insert(listed_twice.find("\"bc\":"), "\"bc\":265,");
  expect_refused(listed_twice, "model.vocab: the token \"bc\" is listed twice");
  std::string nested_id = hand_tokenizer().dump();
  nested_id.insert(nested_id.find("\"bc\":"), "\"x\":{\"id\":[300]},");
  expect_refused(nested_id, "model.vocab: the id of \"x\" is {\"id\":[300]}");
  // Not an object of token: id, not a list; a syntax error inside either names its line.
  json list_vocab = hand_tokenizer();
  list_vocab["model"]["vocab"] = json::array({json::array({"a", 259})});
  expect_refused(list_vocab.dump(), "model.vocab: expected an object of token: id");
  json object_merges = hand_tokenizer();
  object_merges["model"]["merges"] = json::object({{"a", "b"}});
  expect_refused(object_merges.dump(), "model.merges: expected a list");
  std::string broken = hand_tokenizer().dump(1);
  broken.replace(broken.find("\"b c\""), 5, "\"b c\" \"a b\"");
  expect_refused(broken, "not valid JSON: parse error at line");
  std::string overflow = hand_tokenizer().dump();
  overflow.replace(overflow.find("265"), 3, "1e400");
  expect_refused(overflow, "not valid JSON: number overflow parsing '1e400'");
}

TEST(HandTokenizer, MissingOrBrokenFilesAreInputErrors) {
  const testing::TempDir dir("tokenizer");
  EXPECT_THROW(HfTokenizer::load(dir.path() / "absent.json"), InputError);
  testing::write_file_text(dir.path() / "cut.json", hand_tokenizer().dump().substr(0, 200));
  EXPECT_THROW(HfTokenizer::load(dir.path() / "cut.json"), InputError);
  // Mutated files: refused with an InputError, or loaded and then able to encode and decode.
  for (uint64_t i = 0; i < testing::fuzz_case_count(200); ++i) {
    testing::InputMutator case_mutator(1000 + i);
    testing::write_file_text(dir.path() / "mutated.json", case_mutator.mutate_json_text(hand_tokenizer()));
    try {
      const HfTokenizer tokenizer = HfTokenizer::load(dir.path() / "mutated.json");
      const std::vector<int32_t> ids = tokenizer.encode("ab abc \u00e9</s>");
      for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < tokenizer.vocab_size()) << "case " << i;
      tokenizer.decode(ids);
    } catch (const InputError&) {
    }
  }
}

// lstrip and rstrip as the Rust library's find_matches applies them (its \s: Unicode White_Space), worked out
// by hand on the hand tokenizer (Prepend "▁" to each stretch of text, then " " to "▁"; ▁ 259, a 260, b 261).
TEST(HandTokenizer, LstripAndRstripTakeWhiteSpaceAsTheRustLibraryDoes) {
  using Ids = std::vector<int32_t>;
  json document = hand_tokenizer();
  document["added_tokens"][0]["lstrip"] = true;  // <s>
  document["added_tokens"][1]["rstrip"] = true;  // </s>
  // A raw token beginning with white space, and a normalized one (matched in the normalized text) with rstrip.
  document["added_tokens"].push_back({{"id", 266}, {"content", "\n\n"}, {"special", false}, {"normalized", false}});
  document["added_tokens"].push_back({{"id", 267}, {"content", "ca"}, {"special", false}, {"normalized", true}, {"rstrip", true}});
  const testing::TempDir dir("tokenizer-strip");
  const HfTokenizer tokenizer = load_json(document, dir);
  // </s> takes the spaces, tab, newline and U+0085 after it (White_Space), not U+FEFF (not White_Space);
  // "b" is then a stretch of its own, prepended "▁".
  EXPECT_EQ(tokenizer.encode("a</s>  \t \u0085b", false), (Ids{259, 260, 2, 259, 261}));
  EXPECT_EQ(tokenizer.encode("</s>\ufeffa", false), (Ids{2, 259, 3 + 0xEF, 3 + 0xBB, 3 + 0xBF, 260}));
  // <s> takes the white space before it (after it, the stretch gets its "▁" prepended); </s> can take all
  // of a text's white space, leaving no stretch.
  EXPECT_EQ(tokenizer.encode("a \u3000\t<s>b", false), (Ids{259, 260, 1, 259, 261}));
  EXPECT_EQ(tokenizer.encode("   <s>   ", false), (Ids{1, 259, 259, 259, 259}));
  EXPECT_EQ(tokenizer.encode("</s>   ", false), (Ids{2}));
  // What </s> took is not taken again by <s>, and nothing is left between them.
  EXPECT_EQ(tokenizer.encode("</s> \n <s>", false), (Ids{2, 1}));
  // Without the flags the white space is text ("▁▁" and the newline's byte).
  EXPECT_EQ(tokenizer.encode("<s> \n", false), (Ids{1, 259, 259, 3 + 0x0A}));
  // The search goes on right after </s>, so a token beginning with the white space it took is still
  // matched (the Rust library's matches are found in the text before any stripping).
  EXPECT_EQ(tokenizer.encode("</s>\n\nb", false), (Ids{2, 266, 259, 261}));
  // "ca" is normalized: matched as the normalizer makes it, "▁ca", in the normalized text, where a space is
  // already "▁", which is not white space: it takes the newline and the tab only.
  EXPECT_EQ(tokenizer.encode("ca \nb", false), (Ids{267, 259, 3 + 0x0A, 261}));
  EXPECT_EQ(tokenizer.encode("ca\n\tb", false), (Ids{267, 261}));
  // The white space taken is gone from the text: decoding does not bring it back.
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("a</s> \nb", false)), "a</s> b");

  // Metaspace's prepend_scheme "first" prepends to the text at offset 0 only: not to text after a token
  // whose lstrip took the white space the text began with.
  document["normalizer"] = nullptr;
  document["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  const testing::TempDir dir2("tokenizer-strip");
  const HfTokenizer metaspace = load_json(document, dir2);
  EXPECT_EQ(metaspace.encode("  <s>ab", false), (Ids{1, 263}));
  EXPECT_EQ(metaspace.encode("ab<s>", false), (Ids{264, 1}));
}

// ---- the real tokenizers against Hugging Face's JavaScript tokenizers ----------------------------
// (the corpus, the random text and the comparison: tests/common/tokenizer_oracle.h)

class RealTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTokenizer, MatchesHuggingFaceTokenizers) {
  REQUIRE_TOKENIZER_FILES();
  const fs::path path = model_tokenizer(GetParam());
  const uint64_t seed = std::hash<std::string>{}(GetParam());
  if (GetParam() != "gpt2") return compare_with_oracle(path, testing::fuzz_case_count(300), seed);
  // GPT-2's ByteLevel pre-tokenizer splits by its regex, which the Rust library runs with Oniguruma. The
  // JavaScript library runs that built-in regex with JavaScript's \s, which takes U+FEFF and not U+0085,
  // unlike Oniguruma's; a regex spelled out in a Split it translates to Oniguruma's meaning. So the oracle
  // reads the same tokenizer with the regex spelled out, and Tilefire the file as published.
  json document = json::parse(testing::read_file_text(path));
  document["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}}},
                          {"behavior", "Isolated"}, {"invert", false}},
                         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  const testing::TempDir dir("tokenizer-gpt2");
  testing::write_file_text(dir.path() / "tokenizer.json", document.dump());
  compare_with_oracle(path, testing::fuzz_case_count(300), seed, true, dir.path() / "tokenizer.json");
}

INSTANTIATE_TEST_SUITE_P(Models, RealTokenizer,
                         ::testing::Values("gpt2", "llama2", "llama3", "qwen3", "gpt4o", "gemma3", "gemma2", "mistral_nemo"));

// Llama 2's vocabulary with the Metaspace pre-tokenizer newer Llama and Mistral files use in place of the
// Prepend/Replace normalizer. The JavaScript library is the oracle of encoding without `split` only: it
// does not split on the replacement (its README says so of MergedWithNext), and its Metaspace decoder
// keeps the spaces of the first token after the first, where the Rust library drops them all. Both are
// checked against the Rust library's own unit tests' examples in MetaspaceAsTheRustLibraryDoes.
TEST(RealTokenizerVariants, MetaspaceMatchesHuggingFaceTokenizers) {
  REQUIRE_TOKENIZER_FILES();
  json document = json::parse(testing::read_file_text(model_tokenizer("llama2")));
  document["normalizer"] = nullptr;
  const bool split = false;  // the oracle does not split (above)
  for (const char* scheme : {"first", "always"}) {
    {
      document["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
      const json metaspace = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
      document["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({metaspace, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
      const testing::TempDir dir("tokenizer-metaspace");
      const fs::path path = dir.path() / "variant" / "models" / "tokenizer.json";
      fs::create_directories(path.parent_path());
      testing::write_file_text(path, document.dump());
      SCOPED_TRACE(std::string("prepend_scheme ") + scheme + (split ? ", split" : ""));
      compare_with_oracle(path, testing::fuzz_case_count(100), 11, /*compare_decode=*/false);
    }
  }
}

// Variants of real files for what the published copies here lack: Llama 3 with the template Meta's file
// has (<|begin_of_text|> in a Sequence with ByteLevel), and Qwen3 with its non-special added tokens
// marked `normalized`, so that they are matched in the NFC text between the special ones.
TEST(RealTokenizerVariants, TemplateAndNormalizedAddedTokensMatchHuggingFaceTokenizers) {
  REQUIRE_TOKENIZER_FILES();
  const auto compare_variant = [](const std::string& model, const std::function<void(json&)>& edit) {
    json document = json::parse(testing::read_file_text(model_tokenizer(model)));
    edit(document);
    const testing::TempDir dir("tokenizer-variant");
    const fs::path path = dir.path() / (model + "-variant") / "models" / "tokenizer.json";
    fs::create_directories(path.parent_path());
    testing::write_file_text(path, document.dump());
    compare_with_oracle(path, testing::fuzz_case_count(100), 13);
  };
  compare_variant("llama3", [](json& d) {
    const json begin = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
    const json template_processing = {
        {"type", "TemplateProcessing"},
        {"single", {begin, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {begin, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, begin, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {128000}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
    d["post_processor"] = {{"type", "Sequence"}, {"processors", {d["post_processor"], template_processing}}};
  });
  compare_variant("qwen3", [](json& d) {
    size_t marked = 0;
    for (json& added : d["added_tokens"])
      if (!added["special"].get<bool>()) added["normalized"] = true, ++marked;
    ASSERT_GT(marked, 0u);
  });
}

// Added tokens with lstrip and rstrip, on real vocabularies: Phi-3's tokenizer (Llama 2's vocabulary and
// merges with Phi-3's eleven added tokens, rstrip on </s> and on <|assistant|> to <|user|>, as Microsoft's
// file has them), Llama 3 with some of its special tokens given lstrip and others rstrip, and Qwen3 with its
// non-special tokens normalized and stripping (the stripping then happens in the NFC text). The oracle
// trims with JavaScript's white space, which takes U+FEFF and not U+0085, unlike the Rust library's \s:
// texts with those two are left out here (HandTokenizer.LstripAndRstripTakeWhiteSpaceAsTheRustLibraryDoes
// checks them).
TEST(RealTokenizerVariants, StrippingAddedTokensMatchHuggingFaceTokenizers) {
  REQUIRE_TOKENIZER_FILES();
  const auto without_disputed_white_space = [](const std::string& text) {
    return text.find("\u0085") == std::string::npos && text.find("\ufeff") == std::string::npos;
  };
  const auto compare_variant = [&](const std::string& model, const std::string& name, const std::function<void(json&)>& edit,
                                   const std::function<void(const HfTokenizer&)>& check = {}) {
    json document = json::parse(testing::read_file_text(model_tokenizer(model)));
    edit(document);
    const testing::TempDir dir("tokenizer-strip");
    const fs::path path = dir.path() / name / "models" / "tokenizer.json";
    fs::create_directories(path.parent_path());
    testing::write_file_text(path, document.dump());
    SCOPED_TRACE(name);
    compare_with_oracle(path, testing::fuzz_case_count(150), 23, true, {}, without_disputed_white_space);
    if (check) check(HfTokenizer::load(path));
  };
  compare_variant("llama2", "phi3", [](json& d) {
    for (json& added : d["added_tokens"])
      if (added["content"] == "</s>") added["rstrip"] = true;
    const char* phi3_added[] = {"<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>", "<|placeholder4|>",
                                "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>"};
    for (int i = 0; i < 11; ++i)
      d["added_tokens"].push_back({{"id", 32000 + i}, {"content", phi3_added[i]}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", i > 0}, {"normalized", false}, {"special", true}});
  }, [](const HfTokenizer& phi3) {
    // What Phi-3's chat template writes: no newline token (<0x0A>, 13) after its markers.
    std::vector<int32_t> expected = {32010};
    for (int32_t id : phi3.encode("Hi", false)) expected.push_back(id);
    expected.insert(expected.end(), {32007, 32001});
    EXPECT_EQ(phi3.encode("<|user|>\nHi<|end|>\n<|assistant|>\n", false), expected);
  });
  compare_variant("llama3", "llama3-strip", [](json& d) {
    for (json& added : d["added_tokens"]) {
      const std::string content = added["content"];
      if (content == "<|eot_id|>" || content == "<|end_of_text|>") added["lstrip"] = true;
      if (content == "<|start_header_id|>" || content == "<|end_header_id|>") added["rstrip"] = true;
      if (content == "<|begin_of_text|>") added["lstrip"] = added["rstrip"] = true;
    }
  });
  compare_variant("qwen3", "qwen3-strip", [](json& d) {
    size_t marked = 0;
    for (json& added : d["added_tokens"])
      if (!added["special"].get<bool>()) {
        added["normalized"] = true;
        (marked++ % 2 == 0 ? added["lstrip"] : added["rstrip"]) = true;
      }
    ASSERT_GT(marked, 1u);
  });
}

// GPT-2's vocabulary behind the Digits pre-tokenizer, as StarCoder2's and SmolLM's tokenizers have it
// before their ByteLevel: each number character alone, or runs of them. (GPT-2's regex is spelled out in a
// Split for the oracle's sake, as in MatchesHuggingFaceTokenizers.) The oracle takes only ASCII digits for
// numbers where the Rust library takes every \p{N} (char::is_numeric), so texts with other number
// characters are left to HandTokenizer.DigitsSplitEveryNumberCharacter.
TEST(RealTokenizerVariants, DigitsMatchHuggingFaceTokenizers) {
  REQUIRE_TOKENIZER_FILES();
  for (bool individual : {true, false}) {
    json document = json::parse(testing::read_file_text(model_tokenizer("gpt2")));
    document["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", individual}},
                           {{"type", "Split"}, {"pattern", {{"Regex", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}}},
                            {"behavior", "Isolated"}, {"invert", false}},
                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    const testing::TempDir dir("tokenizer-digits");
    const fs::path path = dir.path() / "gpt2-digits" / "models" / "tokenizer.json";
    fs::create_directories(path.parent_path());
    testing::write_file_text(path, document.dump());
    SCOPED_TRACE(individual ? "individual digits" : "runs of digits");
    compare_with_oracle(path, testing::fuzz_case_count(100), 19, true, {}, [](const std::string& text) {
      std::u32string chars;
      unicode::decode_utf8(text, chars);
      return std::none_of(chars.begin(), chars.end(), [](char32_t c) { return c >= 0x80 && unicode::is_number(c); });
    });
  }
}

// Byte-level tokenizers without a normalizer give back the text they were given.
TEST(RealTokenizerVariants, ByteLevelDecodeInvertsEncode) {
  REQUIRE_TOKENIZER_FILES();
  for (const char* model : {"gpt2", "llama3"}) {
    const HfTokenizer tokenizer = HfTokenizer::load(model_tokenizer(model));
    std::mt19937_64 rng(5);
    for (uint64_t i = 0; i < testing::fuzz_case_count(200); ++i) {
      const std::string text = random_text(rng, {});
      ASSERT_EQ(tokenizer.decode(tokenizer.encode(text, false)), text) << model << ": " << escaped(text);
    }
  }
}

// Streaming decodes a window of the tokens, not all of them: on the real tokenizers, a random text's
// tokens streamed one by one give the text of all of them, decoded whole.
TEST(RealTokenizerVariants, StreamingGivesTheWholeText) {
  REQUIRE_TOKENIZER_FILES();
  for (const char* model : {"gpt2", "llama2", "llama3", "qwen3"}) {
    const Tokenizer tokenizer(model_tokenizer(model).string());
    std::mt19937_64 rng(17);
    for (uint64_t i = 0; i < testing::fuzz_case_count(40); ++i) {
      const std::vector<int32_t> prompt = tokenizer.encode(random_text(rng, {}));
      const std::vector<int32_t> generated = tokenizer.encode(random_text(rng, {}) + random_text(rng, {}), false);
      StreamingText stream(tokenizer, prompt);
      std::string shown, steps;  // steps: each token and what add() gave, for the failure message
      for (int32_t token : generated) {
        const std::string added = stream.add(token);
        shown += added;
        steps += std::to_string(token) + " " + escaped(tokenizer.decode({token})) + " -> " + escaped(added) + "\n";
      }
      shown += stream.finish();
      ASSERT_EQ(shown, tokenizer.continuation(prompt, generated)) << model << ", case " << i << ", prompt " << json(prompt).dump()
                                                                  << ", tokens:\n" << steps;
    }
  }
}

// Streaming random ids, as a model may generate them: special tokens, ids past the tokenizer's vocabulary
// (a model's padding rows), byte tokens in any order. Byte-level decoders never take back text, so the
// streamed text is the whole decode. Llama 2's ByteFallback reads a run of byte tokens that is not UTF-8
// as U+FFFD throughout, characters already shown included: without byte tokens the same holds, and with
// them the stream may end with the whole text on a line of its own, which must then be right.
TEST(RealTokenizerVariants, StreamingRandomIdsGivesTheWholeText) {
  REQUIRE_TOKENIZER_FILES();
  for (const char* model : {"gpt2", "llama2", "llama3", "qwen3"}) {
    const Tokenizer tokenizer(model_tokenizer(model).string());
    const bool byte_fallback = std::string(model) == "llama2";
    const json document = json::parse(testing::read_file_text(model_tokenizer(model)));
    std::vector<int32_t> specials;
    for (const json& added : document["added_tokens"]) specials.push_back(added["id"].get<int32_t>());
    std::mt19937_64 rng(23);
    for (uint64_t i = 0; i < testing::fuzz_case_count(60); ++i) {
      const bool with_bytes = byte_fallback && i % 2 == 1;
      const auto random_id = [&]() -> int32_t {
        switch (rng() % 6) {
          case 0: return specials[rng() % specials.size()];
          case 1: return tokenizer.vocab_size() + int32_t(rng() % 100);  // past the vocabulary
          default: {
            const int32_t id = int32_t(rng() % tokenizer.vocab_size());
            return byte_fallback && !with_bytes && id >= 3 && id < 259 ? 259 : id;  // Llama 2's <0x00> .. <0xFF>
          }
        }
      };
      std::vector<int32_t> prompt(rng() % 12), generated(rng() % 40);
      for (int32_t& id : prompt) id = random_id();
      for (int32_t& id : generated) id = random_id();
      StreamingText stream(tokenizer, prompt);
      std::string shown;
      for (int32_t token : generated) shown += stream.add(token);
      shown += stream.finish();
      const std::string whole = tokenizer.continuation(prompt, generated);
      const std::string fallback = "\n(the generated text, decoded whole:) " + whole;
      const bool ended_whole = with_bytes && shown.size() >= fallback.size() && shown.compare(shown.size() - fallback.size(), fallback.size(), fallback) == 0;
      if (!ended_whole) {
        ASSERT_EQ(shown, whole) << model << ", case " << i << ", prompt " << json(prompt).dump() << ", generated " << json(generated).dump();
      }
    }
  }
  // A window of tokens without text (eight </s>) does not make the next token the text's first: Llama 2's
  // Strip would drop its space.
  const Tokenizer llama2(model_tokenizer("llama2").string());
  const std::vector<int32_t> prompt = llama2.encode("Hello");
  std::vector<int32_t> generated(8, 2);
  for (int32_t id : llama2.encode(" world", false)) generated.push_back(id);
  StreamingText stream(llama2, prompt);
  std::string shown;
  for (int32_t token : generated) shown += stream.add(token);
  EXPECT_EQ(shown + stream.finish(), llama2.continuation(prompt, generated));
}

}  // namespace
}  // namespace tilefire
