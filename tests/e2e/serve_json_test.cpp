// tilefire serve with response_format {"type": "json_object"}: every reply, of a completion or a chat,
// whole or streamed, in turn or batched, is a JSON object by nlohmann::json's parser when it ends ("stop")
// and a prefix of one when max_tokens cuts it ("length"); a streamed reply is the whole one; a model
// without a tokenizer (its text its tokens' bytes) too. With {"type": "json_schema"} every reply that ends
// is valid under the schema by Ajv (the oracle). Schemas outside the subset and other formats are refused
// by name, and so are echo and min_tokens beside either.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/json_reply.h"
#include "tests/common/schema_oracle.h"
#include "tests/common/serve_client.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

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
    for (const ChoiceText& choice : sampled_choices(port, path, body, 40, 11)) ended += expect_json_object_or_prefix(choice) ? 1 : 0;
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

// Required keys of each kind, bounded strings and arrays, an enum, a nullable bounded number: a random model's
// replies reach most of it within max_tokens.
const char* const kReplySchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
    "mood": {"enum": ["calm", "glad", 3]}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
    "score": {"type": ["number", "null"], "minimum": -1, "exclusiveMaximum": 1}, "id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,3}$"},
    "day": {"type": "string", "format": "date"}}, "required": ["name", "ok", "mood", "id", "day"]})";

// Whether a JSON text (or a prefix of one) holds whitespace between its tokens.
bool whitespace_outside_strings(const std::string& text) {
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      in_string = escaped || c != '"';
      escaped = !escaped && c == '\\';
    } else if (c == '"') {
      in_string = true;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      return true;
    }
  }
  return false;
}

// With --json-whitespace 0 (compact replies: a random model would otherwise pad its reply with whitespace
// tokens until max_tokens, a real one may too).
void json_schema_replies(std::vector<std::string> extra) {
  REQUIRE_SCHEMA_ORACLE();
  extra.insert(extra.end(), {"--json-whitespace", "0"});
  TextModelServer served("serve-json-schema", extra);
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  SchemaCase ended{json::parse(kReplySchema), {}};
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completion");
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "Who are you?"}}}}} : json{{"prompt", "Person:"}};
    body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", ended.schema}, {"strict", true}}}};
    for (const ChoiceText& choice : sampled_choices(port, path, body, 160, 5)) {
      if (expect_json_object_or_prefix(choice)) ended.documents.push_back(choice.text);
      EXPECT_FALSE(whitespace_outside_strings(choice.text)) << json(choice.text).dump();
    }
  }
  EXPECT_GE(ended.documents.size(), 8u) << "too few replies ended for the schema's check to say much";
  const auto verdicts = validate_with_ajv({ended});
  for (size_t i = 0; i < ended.documents.size(); ++i)
    EXPECT_EQ(verdicts[0][i], std::optional<bool>(true)) << ended.documents[i];
}

TEST(ServeJson, JsonSchemaRepliesAreValid) { json_schema_replies({}); }
TEST(ServeJson, BatchedJsonSchemaRepliesAreValid) { json_schema_replies({"--sequences", "3", "--prefill-chunk", "4"}); }
TEST(ServeJson, SpeculatingJsonSchemaRepliesAreValid) { json_schema_replies({"--speculate", "3"}); }

TEST(ServeJson, OtherFormatsAreRefusedByName) {
  TextModelServer served("serve-json-refused", {});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"j({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=b)"}}}}})j",
       "'response_format' json_schema: #/properties/a/pattern: lookahead (?= and (?! is not supported"},
      {R"({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "propertyNames": {"maxLength": 3}}}})",
       "'response_format' json_schema: #: 'propertyNames' is not supported"},
      {R"({"type": "json_schema", "json_schema": "x"})", "json_schema must be an object"},
      {R"({"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}})", "json_schema's \"strict\" must be true or false"},
      {R"({"type": "json_schema", "json_schema": {"schema": {}, "schemas": {}}})", "json_schema has \"schemas\""},
      {R"({"type": "json_schema", "json_schema": {"schema": "{}"}})", "must be an object or a boolean"},
      {R"({"type": "json_schema"})", "'response_format' must be"},
      {R"({"type": "xml"})", "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or"},
      {R"("json")", "'response_format' must be"},
      {R"({"type": "json_object", "strict": true})", "'response_format' must be"},
  };
  for (const std::string format : {R"({"type": "json_object"})", R"({"type": "json_schema", "json_schema": {"schema": {}}})"})
    for (const char* with : {R"("echo": true)", R"("min_tokens": 2)"}) {
      const HttpReply bad = post(port, "/v1/completions", R"({"prompt": "x", "response_format": )" + format + ", " + with + "}");
      EXPECT_EQ(bad.status, 400) << with << ": " << bad.body;
      const std::string type = json::parse(format).at("type");
      EXPECT_NE(bad.body.find("with response_format " + type), std::string::npos) << bad.body;
    }
  for (const auto& [format, named] : refused) {
    const HttpReply bad = post(port, "/v1/completions", R"({"prompt": "x", "response_format": )" + format + "}");
    EXPECT_EQ(bad.status, 400) << format;
    const std::string message = bad.status == 400 ? json::parse(bad.body).at("error").at("message").get<std::string>() : bad.body;
    EXPECT_NE(message.find(named), std::string::npos) << message;
  }
  const HttpReply text = post(port, "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "response_format": {"type": "text"}})");
  EXPECT_EQ(text.status, 200) << text.body;
  // OpenAI's schema is optional (then any JSON value), and a null field is one not given.
  const HttpReply any = post(port, "/v1/completions", R"({"prompt": "x", "max_tokens": 30, "temperature": 0,
      "response_format": {"type": "json_schema", "json_schema": {"name": null, "strict": null}}})");
  ASSERT_EQ(any.status, 200) << any.body;
  const ChoiceText reply = choice_texts(any, false, false, 1)[0];
  if (reply.finish_reason == "stop") {
    EXPECT_NO_THROW((void)json::parse(reply.text).type()) << reply.text;
  }
}

}  // namespace
}  // namespace tilefire::testing
