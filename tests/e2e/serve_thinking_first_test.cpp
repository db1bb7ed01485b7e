// A held reply after the thinking (samples/cli/serve_thinking_first.cpp), its parts alone: the tags'
// tokens found in a tokenizer, and a format (here a hand-made one: tokens 5 and 6 alone, ended after two)
// that sees only the tokens after </think>, while the thinking may be anything but an end.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "samples/cli/serve_thinking_first.h"
#include "tests/common/cli_runner.h"  // tiny_byte_level_tokenizer, TempDir, write_file_text

namespace tilefire::cli {
namespace {

using nlohmann::json;

constexpr int32_t kOpen = 10, kClose = 11, kStop = 2, kEos = 12;  // kEos: the model's end, past the request's stop tokens
constexpr size_t kVocab = 16;

// What the hand-made format was asked about, and the request it holds.
struct Held {
  std::vector<std::vector<int32_t>> seen;  // the tokens the format was given, each time
  bool stop_string = false;                // what the request's own stop_when says
  GenerateRequest request;

  explicit Held(bool opened_in_prompt) {
    request.stop_tokens = {kStop};
    request.stop_when = [this](const std::vector<int32_t>&) { return stop_string; };
    hold_after_thinking(request, ThinkingTokens{kOpen, kClose, opened_in_prompt}, request.ending_tokens({kEos}), [this](GenerateRequest& format) {
      format.allowed_tokens = [this](const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
        seen.push_back(generated);
        allowed[5] = allowed[6] = 1;
      };
      format.stop_when = [](const std::vector<int32_t>& generated) { return generated.size() >= 2; };
    });
  }

  // The tokens allowed after `generated`.
  std::vector<int32_t> allowed(const std::vector<int32_t>& generated) {
    std::vector<uint8_t> mask(kVocab, 0);
    request.allowed_tokens(generated, mask);
    std::vector<int32_t> tokens;
    for (size_t t = 0; t < kVocab; ++t)
      if (mask[t]) tokens.push_back(static_cast<int32_t>(t));
    return tokens;
  }
};

std::vector<int32_t> all_but_the_stop() {  // nor the model's end: a reply that ended while thinking would hold no answer
  std::vector<int32_t> tokens;
  for (int32_t t = 0; t < static_cast<int32_t>(kVocab); ++t)
    if (t != kStop && t != kEos) tokens.push_back(t);
  return tokens;
}

TEST(ThinkingFirst, Qwen3MayOpenItsThinkingFirstAndIsHeldAfterIt) {
  Held held(false);
  // The first token: the format's, or <think>.
  EXPECT_EQ(held.allowed({}), (std::vector<int32_t>{5, 6, kOpen}));
  // Thinking: anything but the stop token, <think> again included, and no end by the format.
  EXPECT_EQ(held.allowed({kOpen}), all_but_the_stop());
  EXPECT_EQ(held.allowed({kOpen, 3, kOpen}), all_but_the_stop());
  EXPECT_FALSE(held.request.stop_when({kOpen, 3, 4}));
  // After </think>, the format, which sees the answer alone.
  held.seen.clear();
  EXPECT_EQ(held.allowed({kOpen, 3, kClose}), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(held.allowed({kOpen, 3, kClose, 5}), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(held.seen, (std::vector<std::vector<int32_t>>{{}, {5}}));
  EXPECT_FALSE(held.request.stop_when({kOpen, 3, kClose, 5}));
  EXPECT_TRUE(held.request.stop_when({kOpen, 3, kClose, 5, 6}));
  // The request's own stop_when (a stop string) still ends it, thinking or not.
  held.stop_string = true;
  EXPECT_TRUE(held.request.stop_when({kOpen, 3}));
}

TEST(ThinkingFirst, Qwen3WithoutThinkingIsHeldFromItsFirstToken) {
  Held held(false);
  held.allowed({});
  held.seen.clear();
  EXPECT_EQ(held.allowed({5}), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(held.allowed({5, kClose}), (std::vector<int32_t>{5, 6}));  // a later </think> is the answer's
  EXPECT_EQ(held.seen, (std::vector<std::vector<int32_t>>{{5}, {5, kClose}}));
  EXPECT_TRUE(held.request.stop_when({5, 6}));
  // A reply asked about anew (shorter than the last) is looked at from its start.
  held.seen.clear();
  EXPECT_EQ(held.allowed({kOpen}), all_but_the_stop());
  EXPECT_EQ(held.allowed({kOpen, 3, kClose}), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(held.seen, (std::vector<std::vector<int32_t>>{{}}));
}

TEST(ThinkingFirst, DeepSeekR1BeginsInsideItsThinking) {
  Held held(true);
  EXPECT_EQ(held.allowed({}), all_but_the_stop());
  EXPECT_EQ(held.allowed({kOpen, 4}), all_but_the_stop());  // a <think> it writes again is thinking
  EXPECT_FALSE(held.request.stop_when({4, 4}));
  EXPECT_EQ(held.allowed({kClose}), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(held.allowed({3, kClose, 6}), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(held.seen.back(), (std::vector<int32_t>{6}));
  EXPECT_TRUE(held.request.stop_when({3, kClose, 6, 5}));
}

TEST(ThinkingFirst, TheTagsMustEachBeOneToken) {
  testing::TempDir dir("thinking-tokens");
  json tokenizer = testing::tiny_byte_level_tokenizer();
  const std::filesystem::path without = dir.path() / "without.json", with = dir.path() / "with.json";
  testing::write_file_text(without, tokenizer.dump());
  tokenizer["added_tokens"].push_back({{"id", 300}, {"content", "<think>"}, {"special", false}});
  tokenizer["added_tokens"].push_back({{"id", 301}, {"content", "</think>"}, {"special", false}});
  testing::write_file_text(with, tokenizer.dump());
  const Tokenizer tags(with.string()), bytes(without.string());
  const std::optional<ThinkingTokens> qwen3 = thinking_tokens(tags, ReasoningParser::qwen3);
  ASSERT_TRUE(qwen3.has_value());
  EXPECT_EQ(qwen3->open, 300);
  EXPECT_EQ(qwen3->close, 301);
  EXPECT_FALSE(qwen3->opened_in_prompt);
  EXPECT_TRUE(thinking_tokens(tags, ReasoningParser::deepseek_r1)->opened_in_prompt);
  EXPECT_FALSE(thinking_tokens(tags, ReasoningParser::none).has_value());
  EXPECT_FALSE(thinking_tokens(bytes, ReasoningParser::qwen3).has_value());  // the tags are several tokens there
  // Special tags: a reply's text leaves them out, so the thinking could not be split off by it.
  for (json& added : tokenizer["added_tokens"])
    if (added.at("id") == 300 || added.at("id") == 301) added["special"] = true;
  const std::filesystem::path special = dir.path() / "special.json";
  testing::write_file_text(special, tokenizer.dump());
  EXPECT_FALSE(thinking_tokens(Tokenizer(special.string()), ReasoningParser::qwen3).has_value());
}

}  // namespace
}  // namespace tilefire::cli
