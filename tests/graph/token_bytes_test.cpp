// Tokenizer::token_bytes (what each token adds to a text it is generated into, what constrained decoding
// matches tokens by) against Tokenizer::continuation, the decoder the replies' text comes from: tokens
// whose bytes together are UTF-8 continue a prompt's text by exactly those bytes. On a tokenizer written
// here (SentencePiece's byte fallback and leading spaces, by hand) and on the real GPT-2, Llama 2, Llama 3
// and Qwen3 files with random ids.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/input_mutator.h"
#include "tests/common/test_models.h"
#include "tests/common/tokenizer_files.h"
#include "tilefire/tokenizer.h"

namespace tilefire {
namespace {

using nlohmann::json;

bool is_utf8(const std::string& bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char lead = static_cast<unsigned char>(bytes[i]);
    size_t more = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead < 0x80) more = 0;
    else if (lead >= 0xC2 && lead <= 0xDF) more = 1;
    else if (lead >= 0xE0 && lead <= 0xEF) more = 2, low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
    else if (lead >= 0xF0 && lead <= 0xF4) more = 3, low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (i + more >= bytes.size()) return false;  // cut short
    for (size_t k = 1; k <= more; ++k) {
      const unsigned char next = static_cast<unsigned char>(bytes[i + k]);
      if (next < (k == 1 ? low : 0x80) || next > (k == 1 ? high : 0xBF)) return false;
    }
    i += more + 1;
  }
  return true;
}

// Random sequences of `tokenizer`'s ids (special ones left out) after `prompt`: where their bytes together
// are UTF-8, the continuation is those bytes. Returns how many sequences were compared.
size_t expect_bytes_continue_the_text(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt, uint64_t sequences,
                                      const std::vector<int32_t>& favoured = {}) {
  const std::vector<std::string> bytes = tokenizer.token_bytes();
  EXPECT_EQ(bytes.size(), size_t(tokenizer.vocab_size()));
  std::vector<int32_t> ids;  // those with text
  for (size_t id = 0; id < bytes.size(); ++id)
    if (!bytes[id].empty()) ids.push_back(int32_t(id));
  std::mt19937_64 random(uint64_t(tokenizer.vocab_size()));
  size_t compared = 0;
  for (uint64_t n = 0; n < sequences; ++n) {
    std::vector<int32_t> generated;
    std::string joined;
    for (uint64_t k = 1 + random() % 6; k > 0; --k) {
      const bool favour = !favoured.empty() && random() % 2 == 0;
      generated.push_back(favour ? favoured[random() % favoured.size()] : ids[random() % ids.size()]);
      joined += bytes[size_t(generated.back())];
    }
    if (!is_utf8(joined)) continue;
    ++compared;
    EXPECT_EQ(tokenizer.continuation(prompt, generated), joined) << "ids " << json(generated).dump();
    if (::testing::Test::HasFailure()) break;
  }
  return compared;
}

// Llama 2's decoder (spaces as ▁, byte fallback, a leading space stripped) over a small vocabulary.
json sentencepiece_tokenizer() {
  json vocab = testing::byte_fallback_vocabulary();
  int next = 259;
  for (const char* token : {"\u2581", "\u2581{", "\":", "\u2581\"", "a", "\u2581a"}) vocab[token] = next++;  // 259 .. 264
  return {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"unk_token", "<unk>"}, {"byte_fallback", true}}},
      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}, {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                                       {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
  };
}

TEST(TokenBytes, SentencePieceKeepsItsSpacesAndGivesFallbackBytesRaw) {
  const testing::TempDir dir("token-bytes");
  testing::write_file_text(dir.path() / "tokenizer.json", sentencepiece_tokenizer().dump());
  const Tokenizer tokenizer((dir.path() / "tokenizer.json").string());
  const std::vector<std::string> bytes = tokenizer.token_bytes();
  ASSERT_EQ(bytes.size(), 265u);
  EXPECT_EQ(bytes[1], "");  // special
  EXPECT_EQ(bytes[2], "");
  EXPECT_EQ(bytes[3 + 0xC3], "\xC3");  // part of a character: decode() alone would give U+FFFD
  EXPECT_EQ(bytes[3 + '{'], "{");
  EXPECT_EQ(bytes[259], " ");
  EXPECT_EQ(bytes[260], " {");  // within a text the space stays (Strip acts on the text's start)
  EXPECT_EQ(bytes[261], "\":");
  EXPECT_EQ(tokenizer.continuation({263}, {260, 3 + 0xC3, 3 + 0xA9, 261}), " {\xC3\xA9\":");
  const std::vector<int32_t> favoured = {3 + 0xC3, 3 + 0xA9, 3 + 0xE2, 3 + 0x82, 3 + 0xAC, 259, 260};
  const uint64_t sequences = testing::fuzz_case_count(2000);
  EXPECT_GT(expect_bytes_continue_the_text(tokenizer, {263, 264}, sequences, favoured), sequences / 20);
}

// Newer Llama and Mistral files decode with Metaspace (its replacement a space, dropped from the text's
// first token only): within a text a token keeps its space.
TEST(TokenBytes, MetaspaceKeepsTheSpaceWithinAText) {
  json document = sentencepiece_tokenizer();
  document["normalizer"] = nullptr;
  document["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  document["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  const testing::TempDir dir("token-bytes");
  testing::write_file_text(dir.path() / "tokenizer.json", document.dump());
  const Tokenizer tokenizer((dir.path() / "tokenizer.json").string());
  const std::vector<std::string> bytes = tokenizer.token_bytes();
  EXPECT_EQ(bytes[260], " {");
  EXPECT_EQ(bytes[264], " a");
  EXPECT_EQ(tokenizer.continuation({263}, {260, 264}), " { a");
  const uint64_t sequences = testing::fuzz_case_count(1000);
  EXPECT_GT(expect_bytes_continue_the_text(tokenizer, {263, 264}, sequences), sequences / 20);
}

TEST(TokenBytes, ByteLevelGivesEachTokensBytes) {
  const testing::TempDir dir("token-bytes");
  testing::write_file_text(dir.path() / "tokenizer.json", testing::tiny_byte_level_tokenizer().dump());
  const Tokenizer tokenizer((dir.path() / "tokenizer.json").string());
  const std::vector<std::string> bytes = tokenizer.token_bytes();
  for (int byte = 0; byte < 256; ++byte) EXPECT_EQ(bytes[size_t(byte)], std::string(1, char(byte))) << byte;
  EXPECT_EQ(bytes[260], " hello");
  EXPECT_EQ(bytes[261], "");  // <|end|>, special
  const uint64_t sequences = testing::fuzz_case_count(2000);
  EXPECT_GT(expect_bytes_continue_the_text(tokenizer, tokenizer.encode("a prompt"), sequences), sequences / 20);
}

class RealTokenBytes : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTokenBytes, ContinueTheTextAsDecoded) {
  using testing::have_tokenizer_files;
  REQUIRE_TOKENIZER_FILES();
  const Tokenizer tokenizer(testing::model_tokenizer(GetParam()).string());
  const std::vector<int32_t> prompt = tokenizer.encode("Reply in JSON:");
  // The JSON pieces a constrained reply is made of, and byte tokens (Llama 2's fallback, the byte-level
  // alphabet's), often.
  std::vector<int32_t> favoured;
  for (const char* piece : {"{\"", "\":", " {", "\"}", "\\u", "\xC3\xA9", "\xE2\x82\xAC"})
    for (int32_t id : tokenizer.encode(piece, false)) favoured.push_back(id);
  const uint64_t sequences = testing::fuzz_case_count(3000);
  EXPECT_GT(expect_bytes_continue_the_text(tokenizer, prompt, sequences, favoured), sequences / 3);
}

INSTANTIATE_TEST_SUITE_P(Models, RealTokenBytes, ::testing::Values("gpt2", "llama2", "llama3", "qwen3"));

}  // namespace
}  // namespace tilefire
