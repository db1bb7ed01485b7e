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
    if (!body.contains("max_tokens")) body["max_tokens"] = 6;
    body["temperature"] = 0;
    return post_json(port, "/v1/completions", body);
  };
  // Without the start token: the reply to the text's own tokens sent as ids.
  const json plain = greedy({{"prompt", text}, {"add_special_tokens", false}});
  EXPECT_EQ(plain.at("usage").at("prompt_tokens"), without_start.at("count"));
  EXPECT_EQ(completion_text(plain), completion_text(greedy({{"prompt", without_start.at("tokens")}})));
  // Truncated: the reply to the prompt's last K tokens. A text's start token, which the tokenizer added,
  // stays (Hugging Face's truncation keeps what it adds) and counts among the K; ids are cut as they are.
  const json tokens = with_start.at("tokens"), own = without_start.at("tokens");
  for (const size_t keep : {size_t(2), size_t(5), tokens.size(), tokens.size() + 3}) {
    SCOPED_TRACE(keep);
    json kept = tokens;
    if (keep < tokens.size()) {
      kept = json::array({tokens[0]});
      for (size_t i = own.size() - (keep - 1); i < own.size(); ++i) kept.push_back(own[i]);
    }
    const json by_text = greedy({{"prompt", text}, {"truncate_prompt_tokens", keep}});
    EXPECT_EQ(completion_text(by_text), completion_text(greedy({{"prompt", kept}})));
    EXPECT_EQ(by_text.value("usage", json::object()).value("prompt_tokens", 0u), kept.size());
    const json last_k(tokens.end() - std::ptrdiff_t(std::min(keep, tokens.size())), tokens.end());
    const json by_ids = greedy({{"prompt", tokens}, {"truncate_prompt_tokens", keep}});
    EXPECT_EQ(completion_text(by_ids), completion_text(greedy({{"prompt", last_k}})));
    EXPECT_EQ(by_ids.value("usage", json::object()).value("prompt_tokens", 0u), last_k.size());
  }
  // One token is the start token alone: no room for the text.
  const HttpReply no_room = post(port, "/v1/completions", json({{"prompt", text}, {"truncate_prompt_tokens", 1}}).dump());
  EXPECT_EQ(no_room.status, 400) << no_room.body;
  EXPECT_NE(no_room.body.find("'truncate_prompt_tokens' is 1, which leaves no room for the prompt beside the 1 tokens"), std::string::npos) << no_room.body;
  // -1 keeps what the context holds beside the reply's max_tokens (the whole context when none is given):
  // a prompt past it is read from its end instead of refused.
  json long_prompt = json::array();
  for (int i = 0; i < 1100; ++i) long_prompt.push_back(100 + i % 50);
  json cut_body = {{"prompt", long_prompt}, {"temperature", 0}};
  post_json(port, "/v1/completions", cut_body, 400);
  cut_body["truncate_prompt_tokens"] = -1;
  const json whole_context = post_json(port, "/v1/completions", cut_body);  // completions' default max_tokens is not given
  ASSERT_FALSE(whole_context.empty());
  EXPECT_EQ(whole_context.at("usage").at("prompt_tokens"), 1024);
  cut_body["max_tokens"] = 3;
  const json beside = post_json(port, "/v1/completions", cut_body);
  ASSERT_FALSE(beside.empty());
  EXPECT_EQ(beside.at("usage").at("prompt_tokens"), 1021);
  EXPECT_EQ(completion_text(beside), completion_text(greedy({{"prompt", json::array_t(long_prompt.end() - 1021, long_prompt.end())}, {"max_tokens", 3}})));
  cut_body["max_tokens"] = 1024;
  const HttpReply full = post(port, "/v1/completions", cut_body.dump());
  EXPECT_EQ(full.status, 400) << full.body;
  EXPECT_NE(full.body.find("'truncate_prompt_tokens' is -1, and max_tokens (1024) leaves no room"), std::string::npos) << full.body;
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
  EXPECT_NE(none.body.find("'allowed_token_ids' leaves no token to choose for generated token 0 beside"), std::string::npos) << none.body;
  // Streamed, the same failure comes after the head: an error event, and no [DONE].
  const HttpReply streamed = post(port, "/v1/completions", json({{"prompt", "x"}, {"max_tokens", 4}, {"allowed_token_ids", {int('x')}}, {"stream", true},
                                                                 {"response_format", {{"type", "json_object"}}}}).dump());
  EXPECT_NE(streamed.body.find("'allowed_token_ids' leaves no token"), std::string::npos) << streamed.body;
  EXPECT_EQ(streamed.body.find("[DONE]"), std::string::npos) << streamed.body;
  // The ending tokens listed alone while min_tokens holds them back.
  const HttpReply held_back = post(port, "/v1/completions", json({{"prompt", "x"}, {"max_tokens", 4}, {"min_tokens", 2}, {"allowed_token_ids", {2}}}).dump());  // 2: the sample's eos
  EXPECT_EQ(held_back.status, 400) << held_back.body;
  EXPECT_NE(held_back.body.find("'allowed_token_ids' leaves no token to choose for generated token 0 while min_tokens holds back the ending tokens"),
            std::string::npos) << held_back.body;
  // Neutral values of the fields refused otherwise are taken.
  for (const json& neutral : {json{{"priority", 0}}, json{{"modalities", {"text"}}}, json{{"bad_words", json::array()}}, json{{"skip_special_tokens", true}},
                              json{{"logits_processors", json::array()}}, json{{"return_token_ids", false}}})
  {
    json asked = {{"prompt", "x"}, {"max_tokens", 1}};
    asked.update(neutral);
    EXPECT_EQ(post(port, "/v1/completions", asked.dump()).status, 200) << neutral.dump();
  }
  EXPECT_EQ(post(port, "/v1/completions", json({{"prompt", "x"}, {"max_tokens", 2}}).dump()).status, 200);
}

// An id in a gap of the tokenizer's ids (no token has it) has no text either: refused as vLLM refuses ids
// past the tokenizer's; the token past the gap is taken.
TEST(ServePromptFields, AllowedTokenIdsInAGapOfTheTokenizersIdsAreRefused) {
  TempDir dir("serve-allowed-gap");
  const std::filesystem::path model = text_model(dir);
  json tokenizer = tiny_byte_level_tokenizer();
  tokenizer["added_tokens"].push_back({{"id", 280}, {"content", "<after_gap>"}, {"special", true}});
  write_file_text(model / "tokenizer.json", tokenizer.dump());
  Server server(TextModelServer::args(model, {}));
  const uint16_t port = server.port();
  ASSERT_NE(port, 0);
  const HttpReply gap = post(port, "/v1/completions", json({{"prompt", "hi"}, {"max_tokens", 2}, {"allowed_token_ids", {270}}}).dump());
  EXPECT_EQ(gap.status, 400) << gap.body;
  EXPECT_NE(gap.body.find("'allowed_token_ids' holds 270, an id the tokenizer has no token for"), std::string::npos) << gap.body;
  EXPECT_EQ(post(port, "/v1/completions", json({{"prompt", "hi"}, {"max_tokens", 2}, {"allowed_token_ids", {280}}}).dump()).status, 200);
  const HttpReply past = post(port, "/v1/completions", json({{"prompt", "hi"}, {"max_tokens", 2}, {"allowed_token_ids", {281}}}).dump());
  EXPECT_NE(past.body.find("not a token id of the tokenizer (ids below 281;"), std::string::npos) << past.body;
}

// The Responses API passes the chat's fields to the chat, which honours or refuses each: none is dropped.
TEST(ServePromptFields, TheResponsesApiTakesThemToo) {
  TextModelServer served("serve-responses-fields", {});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  const json a_and_b = post_json(port, "/tokenize", {{"prompt", "ab"}, {"add_special_tokens", false}}).at("tokens");
  ASSERT_EQ(a_and_b.size(), 2u);  // a byte-level tokenizer without a merge of the two
  const json listed = post_json(port, "/v1/responses", {{"input", "hi"}, {"max_output_tokens", 6}, {"seed", 1}, {"allowed_token_ids", a_and_b}});
  ASSERT_FALSE(listed.empty());
  const std::string text = listed.at("output")[0].at("content")[0].at("text");
  EXPECT_EQ(text.find_first_not_of("ab"), std::string::npos) << text;
  // An id past the tokenizer's, within the model's 512 rows (padding, with no text), is refused as vLLM
  // refuses it; the tokenizer's last id (262) is taken.
  for (const std::string api : {"/v1/completions", "/v1/chat/completions", "/v1/responses"}) {
    json body = {{api == "/v1/responses" ? "max_output_tokens" : "max_tokens", 2}, {"allowed_token_ids", {a_and_b[0], 300}}};
    if (api == "/v1/completions") body["prompt"] = "hi";
    else if (api == "/v1/responses") body["input"] = "hi";
    else body["messages"] = {{{"role", "user"}, {"content", "hi"}}};
    const HttpReply past = post(port, api, body.dump());
    EXPECT_EQ(past.status, 400) << api << ": " << past.body;
    EXPECT_NE(past.body.find("'allowed_token_ids' holds 300, not a token id of the tokenizer (ids below 263; the model's rows past them have "
                             "no text)"), std::string::npos) << past.body;
    body["allowed_token_ids"] = {262};
    EXPECT_EQ(post(port, api, body.dump()).status, 200) << api;
  }
  // vLLM's request_id names the reply, in each API's prefix.
  EXPECT_EQ(post_json(port, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1}, {"request_id", "job-7.a"}})
                .value("id", ""), "chatcmpl-job-7.a");
  EXPECT_EQ(post_json(port, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}, {"request_id", "job-8"}}).value("id", ""), "cmpl-job-8");
  EXPECT_EQ(post_json(port, "/v1/responses", {{"input", "hi"}, {"max_output_tokens", 1}, {"request_id", "job-9"}}).value("id", ""), "resp_job-9");
  for (const json& bad : {json(""), json("two words"), json(7), json(std::string(257, 'x'))}) {
    const HttpReply refused = post(port, "/v1/completions", json({{"prompt", "hi"}, {"request_id", bad}}).dump());
    EXPECT_EQ(refused.status, 400) << refused.body;
    EXPECT_NE(refused.body.find("'request_id'"), std::string::npos) << refused.body;
  }
  const json cut = post_json(port, "/v1/responses", {{"input", "hi there, how are you"}, {"max_output_tokens", 2}, {"truncate_prompt_tokens", 3}});
  ASSERT_FALSE(cut.empty());
  EXPECT_EQ(cut.at("usage").at("input_tokens"), 3);
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"priority", 5}, {"n", 2}, {"logprobs", true}, {"skip_special_tokens", "no"}, {"response_format", {{"type", "json_object"}}}}) {
    const HttpReply refused = post(port, "/v1/responses", json({{"input", "hi"}, {field, value}}).dump());
    EXPECT_EQ(refused.status, 400) << field << ": " << refused.body;
    EXPECT_NE(refused.body.find("'" + (field == "response_format" ? std::string("text.format") : field) + "'"), std::string::npos) << refused.body;
  }
}

// skip_special_tokens false: the special tokens a reply holds are written into its text, whole and
// streamed alike, but for the token that ends it (as vLLM leaves that out). A special token (id 263) made
// the greedy reply by a bias; as a stop token it ends the reply.
TEST(ServePromptFields, SpecialTokensAreWrittenWhenAskedFor) {
  TempDir dir("serve-special-tokens");
  const std::filesystem::path model = text_model_with_tokens(dir, {{"<|marker|>", true}});
  Server server({"--model", model.string(), "--threads", "1"});
  const uint16_t port = server.port();
  ASSERT_NE(port, 0);
  const json asked = {{"prompt", "hi"}, {"max_tokens", 3}, {"temperature", 0}, {"logit_bias", {{"263", 100}}}};
  auto texts = [&](json body) {  // the whole reply's text and the streamed one's
    const std::string whole = completion_text(post_json(port, "/v1/completions", body));
    body["stream"] = true;
    std::string streamed;
    for (const std::string& data : events(post(port, "/v1/completions", body.dump()).body))
      if (data != "[DONE]") streamed += json::parse(data).at("choices")[0].value("text", "");
    return std::make_pair(whole, streamed);
  };
  EXPECT_EQ(texts(asked), std::make_pair(std::string(), std::string()));  // left out by default
  json shown = asked;
  shown["skip_special_tokens"] = false;
  EXPECT_EQ(texts(shown), std::make_pair(std::string("<|marker|><|marker|><|marker|>"), std::string("<|marker|><|marker|><|marker|>")));
  // The token that ends the reply is left out.
  shown["stop_token_ids"] = {263};
  EXPECT_EQ(texts(shown), std::make_pair(std::string(), std::string()));
  const json stopped = post_json(port, "/v1/completions", shown);
  ASSERT_FALSE(stopped.empty());
  EXPECT_EQ(stopped.at("choices")[0].at("finish_reason"), "stop");
  EXPECT_EQ(stopped.at("usage").at("completion_tokens"), 1);
  // A chat too: its markers are written, and the template's end of turn, which ends it, is left out.
  const json user_hi = json::array({{{"role", "user"}, {"content", "hi"}}});
  const json chat = post_json(port, "/v1/chat/completions", {{"messages", user_hi}, {"max_tokens", 2},
                                                              {"temperature", 0}, {"logit_bias", {{"263", 100}}}, {"skip_special_tokens", false}});
  ASSERT_FALSE(chat.empty());
  EXPECT_EQ(chat.at("choices")[0].at("message").at("content"), "<|marker|><|marker|>");
  const json end_of_turn = post_json(port, "/tokenize", {{"prompt", "<|end|>"}, {"add_special_tokens", false}}).at("tokens");
  ASSERT_EQ(end_of_turn.size(), 1u);
  const json ended = post_json(port, "/v1/chat/completions", {{"messages", user_hi}, {"max_tokens", 2}, {"temperature", 0},
                                                               {"logit_bias", {{end_of_turn[0].dump(), 100}}}, {"skip_special_tokens", false}});
  ASSERT_FALSE(ended.empty());
  EXPECT_EQ(ended.at("choices")[0].at("message").at("content"), "");
  EXPECT_EQ(ended.at("choices")[0].at("finish_reason"), "stop");
}

}  // namespace
}  // namespace tilefire::testing
