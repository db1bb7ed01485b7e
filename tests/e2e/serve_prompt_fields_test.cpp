// vLLM's request fields that shape what the model reads and may write, in tilefire serve: a completion's
// "add_special_tokens", "truncate_prompt_tokens" (completions and chats) and "allowed_token_ids" (alone
// and beside a format). Each against an independent reference: the reply to the prompt's tokens sent as
// ids (from /tokenize), and the bytes of the built-in sample's replies (its tokens are bytes).
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/serve_client.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

std::string completion_text(const json& reply) { return reply.empty() ? "(none)" : reply.at("choices")[0].at("text").get<std::string>(); }

TEST(ServePromptFields, AddSpecialTokensAndTruncationAreTheTokensTheModelReads) {
  TextModelServer served("serve-prompt-fields", {});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  const std::string text = "the quick brown fox jumps over the lazy dog";
  const json with_start = post_json(port, "/tokenize", {{"prompt", text}});
  const json without_start = post_json(port, "/tokenize", {{"prompt", text}, {"add_special_tokens", false}});
  ASSERT_EQ(with_start.at("count").get<size_t>(), without_start.at("count").get<size_t>() + 1);  // the tokenizer's start token
  auto greedy = [&](json body) {
    body["max_tokens"] = 6;
    body["temperature"] = 0;
    return post_json(port, "/v1/completions", body);
  };
  // Without the start token: the reply to the text's own tokens sent as ids.
  const json plain = greedy({{"prompt", text}, {"add_special_tokens", false}});
  EXPECT_EQ(plain.at("usage").at("prompt_tokens"), without_start.at("count"));
  EXPECT_EQ(completion_text(plain), completion_text(greedy({{"prompt", without_start.at("tokens")}})));
  // Truncated: the reply to the prompt's last K tokens, for a text and for ids; the chat's too.
  const json tokens = with_start.at("tokens");
  for (const size_t keep : {size_t(1), size_t(5), tokens.size(), tokens.size() + 3}) {
    SCOPED_TRACE(keep);
    const json last_k(tokens.end() - std::ptrdiff_t(std::min(keep, tokens.size())), tokens.end());
    const std::string expected = completion_text(greedy({{"prompt", last_k}}));
    const json by_text = greedy({{"prompt", text}, {"truncate_prompt_tokens", keep}});
    EXPECT_EQ(completion_text(by_text), expected);
    EXPECT_EQ(by_text.value("usage", json::object()).value("prompt_tokens", 0u), last_k.size());
    EXPECT_EQ(completion_text(greedy({{"prompt", tokens}, {"truncate_prompt_tokens", keep}})), expected);
  }
  // -1 keeps what the context holds: a prompt past it is read from its end instead of refused.
  json long_prompt = json::array();
  for (int i = 0; i < 1100; ++i) long_prompt.push_back(100 + i % 50);
  const json context = json::array_t(long_prompt.end() - 1024, long_prompt.end());
  json one_token = {{"max_tokens", 1}, {"temperature", 0}};
  one_token["prompt"] = long_prompt;
  post_json(port, "/v1/completions", one_token, 400);
  one_token["truncate_prompt_tokens"] = -1;
  const json cut = post_json(port, "/v1/completions", one_token);
  ASSERT_FALSE(cut.empty());
  EXPECT_EQ(cut.at("usage").at("prompt_tokens"), 1024);
  EXPECT_EQ(cut.at("choices")[0].at("finish_reason"), "length");  // the context is full: nothing more fits
  // A chat's rendered prompt, cut the same way.
  const json messages = json::array({{{"role", "user"}, {"content", text}}});
  const json chat_tokens = post_json(port, "/tokenize", {{"messages", messages}}).at("tokens");
  const json chat = post_json(port, "/v1/chat/completions", {{"messages", messages}, {"truncate_prompt_tokens", 7}, {"max_tokens", 6}, {"temperature", 0}});
  ASSERT_FALSE(chat.empty());
  EXPECT_EQ(chat.at("usage").at("prompt_tokens"), 7);
  EXPECT_EQ(chat.at("choices")[0].at("message").at("content"),
            completion_text(greedy({{"prompt", json::array_t(chat_tokens.end() - 7, chat_tokens.end())}})));
}

TEST(ServePromptFields, AllowedTokenIdsAreTheOnlyTokensChosen) {
  Server server({"--threads", "1"});  // the built-in sample: a token is a byte, so the reply's bytes are its tokens
  const uint16_t port = server.port();
  ASSERT_NE(port, 0);
  const std::set<char> listed = {'a', 'b', ' '};
  json ids = json::array();
  for (char c : listed) ids.push_back(int(c));
  for (const int seed : {1, 2, 3}) {
    const json reply = post_json(port, "/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 12}, {"seed", seed}, {"allowed_token_ids", ids}});
    const std::string text = completion_text(reply);
    EXPECT_EQ(text.size(), 12u) << text;  // no eos among them: the reply runs to max_tokens
    for (char c : text) EXPECT_TRUE(listed.count(c)) << "'" << text << "'";
  }
  // Beside a format: a JSON object's prefix, written with the listed bytes alone.
  const std::string json_bytes = "{}\":a ";
  json json_ids = json::array();
  for (char c : json_bytes) json_ids.push_back(int(c));
  const json held = post_json(port, "/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 16}, {"seed", 4}, {"allowed_token_ids", json_ids},
                                                       {"response_format", {{"type", "json_object"}}}});
  const std::string object = completion_text(held);
  ASSERT_FALSE(object.empty());
  EXPECT_EQ(object.find_first_not_of(json_bytes), std::string::npos) << object;
  EXPECT_EQ(object.find_first_not_of(" "), object.find('{')) << object;  // whitespace, then the object opens
  if (held.at("choices")[0].at("finish_reason") == "stop") {
    EXPECT_TRUE(json::accept(object)) << object;
  }
  // Nothing both allow: the format's first byte is not listed. One clear refusal, and the server goes on.
  const HttpReply none = post(port, "/v1/completions", json({{"prompt", "x"}, {"max_tokens", 4}, {"allowed_token_ids", {int('x')}},
                                                             {"response_format", {{"type", "json_object"}}}}).dump());
  EXPECT_EQ(none.status, 400) << none.body;
  EXPECT_NE(none.body.find("no token"), std::string::npos) << none.body;
  EXPECT_EQ(post(port, "/v1/completions", json({{"prompt", "x"}, {"max_tokens", 2}}).dump()).status, 200);
}

}  // namespace
}  // namespace tilefire::testing
