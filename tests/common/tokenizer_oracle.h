#pragma once
// The oracle of the tokenizer tests (tests/graph/tokenizer*_test.cpp): Hugging Face's JavaScript tokenizers
// (@huggingface/tokenizers, fetched by scripts/fetch-tokenizers) run by Node.js through
// tests/graph/tokenizer_oracle.mjs on the same tokenizer.json and the same inputs as Tilefire's tokenizer: a
// corpus of awkward text and random text (TILEFIRE_FUZZ_SCALE=K for K times as many), encoded with and
// without the special tokens, and id lists decoded with and without them.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graph/tokenizer.h"
#include "tests/common/input_mutator.h"    // fuzz_case_count
#include "tests/common/test_models.h"      // TempDir, read_file_text, write_file_text
#include "tests/common/tokenizer_files.h"  // tokenizer_files

namespace tilefire::testing {

// Text that exercises what tokenizers get wrong: contractions in every case, runs of digits, white space of
// every kind and its line breaks, composed and decomposed accents (NFC), scripts without spaces, emoji with
// modifiers, a character past the Basic Multilingual Plane, the special tokens inside words.
inline std::vector<std::string> corpus() {
  return {
      "",
      "Hello world",
      "Once upon a time, there was a tokenizer.",
      "It's we're they've I'm you'll he'd IT'S WE'RE THEY'VE I'M YOU'LL HE'D 'ſ",
      "1 12 123 1234 12345 3.14159 1,000,000 0x1F",
      "   leading and trailing   ",
      "tabs\tand\nnew\nlines\r\n\r\nand\u00a0no-break\u3000ideographic\u2028line",
      "a\n\n\n b  \n  c\t\t\n",
      "caf\u00e9 cafe\u0301 \u212b \u0041\u030a \u1100\u1161\u11a8 \u0915\u093c",
      "\u6f22\u5b57\u3068\u304b\u306a \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940",
      "\U0001F600 \U0001F44D\U0001F3FD \U0001F1EB\U0001F1F7 \U00010348 \U0001D400",
      "Roman \u2160\u2161 fractions \u00bd\u00be Arabic-Indic \u0661\u0662\u0663",
      "def f(x):\n    return x**2  # comment\n",
      "<|begin_of_text|>Hi<|eot_id|> <s>[INST] hi [/INST]</s><|im_start|>user\n<|endoftext|>",
      "<<s>> <|begin_of_text <|im_end|>>",
      std::string(300, 'a'),
      std::string(100, ' ') + "x",
  };
}

// Random text from fragments of the corpus's kinds and random code points of every plane.
inline std::string random_text(std::mt19937_64& rng, const std::vector<std::string>& specials) {
  static const std::vector<std::string> fragments = {
      "the", "The", " quick", "Brown", "fox", "'s", "'T", "'re", "'LL", "'d", "'", "\u017f", "0", "42", "98765", "3.5",
      " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b", "\ufeff", "!", "...", "(", ")", "\"",
      "\u2014", "#", "$", "\u00e9", "e\u0301", "\u0301", "\u212b", "\u1100", "\u1161", "\u11a8", "\uac00", "\u6f22", "\u65e5\u672c",
      "\u0627", "\u0939\u093f", "\u03b1\u03b2", "\u0436", "\u0661", "\u00bd", "\u2160", "\U0001F600", "\U0001F3FD", "\U0001F1EB",
      "\u0915\u093c", "\u00c5", "A\u030a\u0323", "\u1e69", "s\u0323\u0307", "\u00df", "\u0130",
      // GPT-4o's regex reads case: capitals in a run, a title-case (U+01C5) and a modifier letter (U+02B0).
      "JSON", "Parser", "McD", "/", "\u01c5", "\u02b0"};
  std::string text;
  const size_t parts = rng() % 12;
  for (size_t i = 0; i < parts; ++i) {
    const uint64_t kind = rng() % 10;
    if (kind < 7) {
      text += fragments[rng() % fragments.size()];
    } else if (kind < 9) {  // any scalar value: mostly low planes, some anywhere
      char32_t c = rng() % 3 == 0 ? char32_t(rng() % 0x110000) : char32_t(rng() % 0x3000);
      if (c >= 0xD800 && c <= 0xDFFF) c = U'x';
      if (c == 0) c = U'z';
      std::string bytes;
      if (c < 0x80) bytes = std::string(1, char(c));
      else if (c < 0x800) bytes = {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
      else if (c < 0x10000) bytes = {char(0xE0 | (c >> 12)), char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
      else bytes = {char(0xF0 | (c >> 18)), char(0x80 | ((c >> 12) & 0x3F)), char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
      text += bytes;
    } else if (!specials.empty()) {
      text += specials[rng() % specials.size()];
    }
  }
  return text;
}

inline std::string escaped(const std::string& text) { return nlohmann::json(text).dump(); }

struct OracleRun {
  nlohmann::json with_specials, without_specials, decoded, decoded_skipping_specials;
};

inline OracleRun run_oracle(const std::filesystem::path& tokenizer_json, const std::vector<std::string>& texts, const std::vector<std::vector<int32_t>>& id_lists,
                     const TempDir& dir) {
  const std::filesystem::path cases = dir.path() / "cases.json", out = dir.path() / "oracle.json";
  write_file_text(cases, nlohmann::json{{"texts", texts}, {"id_lists", id_lists}}.dump());
  const std::string command = "node '" + (std::filesystem::path(TILEFIRE_SOURCE_DIR) / "tests/graph/tokenizer_oracle.mjs").string() + "' '" +
                              (tokenizer_files() / "@huggingface/tokenizers").string() + "' '" + tokenizer_json.string() + "' '" +
                              cases.string() + "' '" + out.string() + "'";
  const int status = std::system(command.c_str());
  if (status != 0) throw std::runtime_error("the oracle failed (status " + std::to_string(status) + "): " + command);
  const nlohmann::json result = nlohmann::json::parse(read_file_text(out));
  return {result.at("with_specials"), result.at("without_specials"), result.at("decoded"), result.at("decoded_skipping_specials")};
}

// Encodes the corpus and random text with Tilefire and with the oracle, and decodes id lists (the
// oracle's encodings, and random ids with special ones among them) with both.
// `oracle_json` is the file the oracle reads, when it is not `tokenizer_json`.
inline void compare_with_oracle(const std::filesystem::path& tokenizer_json, uint64_t random_texts, uint64_t seed, bool compare_decode = true,
                         const std::filesystem::path& oracle_json = {}, const std::function<bool(const std::string&)>& compared = {}) {
  const HfTokenizer tokenizer = HfTokenizer::load(tokenizer_json);
  const nlohmann::json document = nlohmann::json::parse(read_file_text(tokenizer_json));
  std::vector<std::string> specials;
  std::vector<int32_t> special_ids;
  for (const nlohmann::json& added : document["added_tokens"]) {
    specials.push_back(added["content"].get<std::string>());
    special_ids.push_back(added["id"].get<int32_t>());
  }
  std::vector<std::string> texts = corpus();
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < random_texts; ++i) texts.push_back(random_text(rng, specials));
  if (compared) std::erase_if(texts, [&](const std::string& text) { return !compared(text); });

  std::vector<std::vector<int32_t>> id_lists;
  for (const std::string& text : texts) id_lists.push_back(tokenizer.encode(text));
  for (uint64_t i = 0; i < random_texts / 2; ++i) {
    std::vector<int32_t> ids(rng() % 10);
    for (int32_t& id : ids) id = rng() % 4 == 0 && !special_ids.empty() ? special_ids[rng() % special_ids.size()] : int32_t(rng() % tokenizer.vocab_size());
    id_lists.push_back(ids);
  }

  const TempDir dir("tokenizer-oracle");
  const OracleRun oracle = run_oracle(oracle_json.empty() ? tokenizer_json : oracle_json, texts, id_lists, dir);
  size_t mismatches = 0;
  const auto report = [&](bool same, const std::string& what) {
    if (same || ++mismatches > 8) return;
    ADD_FAILURE() << tokenizer_json.parent_path().parent_path().filename().string() << ": " << what;
  };
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> with = tokenizer.encode(texts[i], true), without = tokenizer.encode(texts[i], false);
    report(nlohmann::json(with) == oracle.with_specials[i], "encode " + escaped(texts[i]) + ": " + nlohmann::json(with).dump() + ", the oracle " +
                                                      oracle.with_specials[i].dump());
    report(nlohmann::json(without) == oracle.without_specials[i], "encode without specials " + escaped(texts[i]) + ": " + nlohmann::json(without).dump() +
                                                            ", the oracle " + oracle.without_specials[i].dump());
  }
  for (size_t i = 0; compare_decode && i < id_lists.size(); ++i) {
    const std::string text = tokenizer.decode(id_lists[i]), skipped = tokenizer.decode(id_lists[i], true);
    report(text == oracle.decoded[i].get<std::string>(),
           "decode " + nlohmann::json(id_lists[i]).dump() + ": " + escaped(text) + ", the oracle " + oracle.decoded[i].dump());
    report(skipped == oracle.decoded_skipping_specials[i].get<std::string>(),
           "decode skipping specials " + nlohmann::json(id_lists[i]).dump() + ": " + escaped(skipped) + ", the oracle " +
               oracle.decoded_skipping_specials[i].dump());
  }
  EXPECT_EQ(mismatches, 0u) << "of " << texts.size() << " texts and " << id_lists.size() << " id lists";
}

}  // namespace tilefire::testing
