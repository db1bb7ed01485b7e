// tilefire serve with response_format {"type": "json_object"}: every reply, of a completion or a chat,
// whole or streamed, in turn or batched, is a JSON object by nlohmann::json's parser when it ends ("stop")
// and a prefix of one when max_tokens cuts it ("length"); a streamed reply is the whole one; a model
// without a tokenizer (its text its tokens' bytes) too; a JSON schema and other formats are refused, and
// so are echo and min_tokens beside json_object.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/json_reply.h"
#include "tests/common/serve_client.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

// The text of choice `index` of a reply, whole (a chat's message or a completion's text) or streamed (its
// chunks' pieces joined), with its finish reason.
struct ChoiceText {
  std::string text;
  std::string finish_reason;
};
std::vector<ChoiceText> choice_texts(const HttpReply& reply, bool chat, bool streamed, size_t choices) {
  std::vector<ChoiceText> texts(choices);
  const auto take = [&](const json& choice, bool chunk) {
    const size_t index = choice.at("index").get<size_t>();
    EXPECT_LT(index, choices);
    if (index >= choices) return;
    const json& content = chat ? choice.at(chunk ? "delta" : "message") : choice.at("text");
    if (!chat) texts[index].text += content.get<std::string>();
    else if (content.contains("content") && content.at("content").is_string()) texts[index].text += content.at("content").get<std::string>();
    if (choice.at("finish_reason").is_string()) texts[index].finish_reason = choice.at("finish_reason").get<std::string>();
  };
  if (!streamed) {
    const json body = json::parse(reply.body);  // held: a range-for over a temporary's member would dangle
    for (const json& choice : body.at("choices")) take(choice, false);
    return texts;
  }
  for (const std::string& data : events(reply.body))
    if (data != "[DONE]") {
      const json chunk = json::parse(data);
      for (const json& choice : chunk.at("choices")) take(choice, true);
    }
  return texts;
}

// A reply that ended is a JSON object; one max_tokens cut ("length") is a prefix of one.
bool expect_json_object_or_prefix(const ChoiceText& choice) {
  EXPECT_TRUE(choice.finish_reason == "stop" || choice.finish_reason == "length") << choice.finish_reason;
  return testing::expect_json_object_or_prefix(choice.text, choice.finish_reason == "stop");
}

void json_object_replies(const std::vector<std::string>& extra) {
  TextModelServer served("serve-json", extra);
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  size_t ended = 0;
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completion");
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "Reply in JSON"}}}}} : json{{"prompt", "Reply in JSON:"}};
    body["response_format"] = {{"type", "json_object"}};
    body["n"] = 6;
    body["max_tokens"] = 40;
    body["temperature"] = 0.8;
    body["seed"] = 11;
    const HttpReply whole = post(port, path, body.dump());
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    const HttpReply streamed = post(port, path, body.dump());
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const std::vector<ChoiceText> texts = choice_texts(whole, chat, false, 6), pieces = choice_texts(streamed, chat, true, 6);
    for (size_t i = 0; i < texts.size(); ++i) {
      ended += expect_json_object_or_prefix(texts[i]) ? 1 : 0;
      EXPECT_EQ(pieces[i].text, texts[i].text) << "choice " << i << ": streamed";
      EXPECT_EQ(pieces[i].finish_reason, texts[i].finish_reason) << "choice " << i << ": streamed";
    }
    // A bias towards the braces: the greedy reply is "{}", ended after its two tokens.
    json closing = chat ? json{{"messages", {{{"role", "user"}, {"content", "x"}}}}} : json{{"prompt", "x"}};
    closing["response_format"] = {{"type", "json_object"}};
    closing["temperature"] = 0;
    closing["max_tokens"] = 40;
    closing["logit_bias"] = {{"123", 100}, {"125", 100}};  // '{' and '}': the byte-level tokens of those bytes
    const HttpReply closed = post(port, path, closing.dump());
    ASSERT_EQ(closed.status, 200) << closed.body;
    const ChoiceText braces = choice_texts(closed, chat, false, 1)[0];
    EXPECT_EQ(braces.text, "{}");
    EXPECT_EQ(braces.finish_reason, "stop");
    EXPECT_EQ(json::parse(closed.body).at("usage").at("completion_tokens"), 2);
  }
  EXPECT_GT(ended, 0u) << "no reply ended: the check of whole replies never ran";
}

TEST(ServeJson, JsonObjectRepliesAreJsonObjects) { json_object_replies({}); }
TEST(ServeJson, BatchedJsonObjectRepliesAreJsonObjects) { json_object_replies({"--sequences", "3", "--prefill-chunk", "4"}); }
TEST(ServeJson, SpeculatingJsonObjectRepliesAreJsonObjects) { json_object_replies({"--speculate", "3"}); }

// Without a tokenizer a reply's text is its tokens' bytes: the constraint allows the byte tokens alone.
TEST(ServeJson, AModelWithoutATokenizerRepliesInJsonToo) {
  Server server({"--threads", "1"});
  ASSERT_NE(server.port(), 0);
  const HttpReply reply = post(server.port(), "/v1/completions",
                               R"({"prompt": [9, 10], "max_tokens": 24, "n": 4, "temperature": 0.7, "seed": 3,
                                   "response_format": {"type": "json_object"}})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  for (const ChoiceText& choice : choice_texts(reply, false, false, 4)) expect_json_object_or_prefix(choice);
}

TEST(ServeJson, OtherFormatsAreRefusedByName) {
  TextModelServer served("serve-json-refused", {});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})",
       "'response_format' json_schema is not supported"},
      {R"({"type": "xml"})", "'response_format' must be {\"type\": \"text\"} or {\"type\": \"json_object\"}"},
      {R"("json")", "'response_format' must be"},
      {R"({"type": "json_object", "strict": true})", "'response_format' must be"},
  };
  for (const char* with : {R"("echo": true)", R"("min_tokens": 2)"}) {
    const HttpReply bad = post(port, "/v1/completions", std::string(R"({"prompt": "x", "response_format": {"type": "json_object"}, )") + with + "}");
    EXPECT_EQ(bad.status, 400) << with << ": " << bad.body;
    EXPECT_NE(bad.body.find("with response_format json_object"), std::string::npos) << bad.body;
  }
  for (const auto& [format, named] : refused) {
    const HttpReply bad = post(port, "/v1/completions", R"({"prompt": "x", "response_format": )" + format + "}");
    EXPECT_EQ(bad.status, 400) << format;
    const std::string message = bad.status == 400 ? json::parse(bad.body).at("error").at("message").get<std::string>() : bad.body;
    EXPECT_NE(message.find(named), std::string::npos) << message;
  }
  const HttpReply text = post(port, "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "response_format": {"type": "text"}})");
  EXPECT_EQ(text.status, 200) << text.body;
}

}  // namespace
}  // namespace tilefire::testing
