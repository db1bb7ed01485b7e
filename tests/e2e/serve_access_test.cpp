// tilefire serve's access: --api-key guarding the /v1/ paths, and --served-model-name, the model a request
// may name (another is answered 404) and the id the models list and every reply carry.
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/serve_client.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

TEST(ServeAccess, AnApiKeyGuardsTheV1Paths) {
  const std::string completion = R"({"prompt": [1, 2], "max_tokens": 2})";
  auto post_with = [](uint16_t port, const std::string& authorization, const std::string& body) {
    return http_exchange(port, "POST /v1/completions HTTP/1.1\r\n" + authorization + "Content-Length: " + std::to_string(body.size()) +
                                   "\r\n\r\n" + body);
  };
  for (const bool from_environment : {false, true}) {
    SCOPED_TRACE(from_environment ? "TILEFIRE_API_KEY" : "--api-key");
    if (from_environment) ::setenv("TILEFIRE_API_KEY", "s3cret", 1);
    Server server(from_environment ? std::vector<std::string>{"--threads", "1"}
                                   : std::vector<std::string>{"--threads", "1", "--api-key", "s3cret"});
    ::unsetenv("TILEFIRE_API_KEY");
    ASSERT_NE(server.port(), 0);
    const HttpReply none = post_with(server.port(), "", completion);
    EXPECT_EQ(none.status, 401) << none.body;
    EXPECT_NE(none.body.find("no API key"), std::string::npos) << none.body;
    for (const std::string wrong : {"Bearer s3cre", "Bearer s3cretx", "Bearer S3cret", "s3cret"}) {
      const HttpReply refused = post_with(server.port(), "Authorization: " + wrong + "\r\n", completion);
      EXPECT_EQ(refused.status, 401) << wrong;
      EXPECT_NE(refused.body.find("is not the server's"), std::string::npos) << refused.body;
    }
    EXPECT_EQ(post_with(server.port(), "Authorization: Bearer s3cret\r\n", completion).status, 200);
    EXPECT_EQ(http_exchange(server.port(), "GET /v1/models HTTP/1.1\r\n\r\n").status, 401);
    EXPECT_EQ(http_exchange(server.port(), "GET /v1/models HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n").status, 200);
    EXPECT_EQ(http_exchange(server.port(), "GET /health HTTP/1.1\r\n\r\n").status, 200);
    EXPECT_EQ(http_exchange(server.port(), "GET /metrics HTTP/1.1\r\n\r\n").status, 200);
    EXPECT_EQ(server.log().find("s3cret"), std::string::npos) << "the key is never logged:\n" << server.log();
  }
  const RunResult empty = run_cli({"serve", "--api-key", "", "--port", "0"});
  EXPECT_EQ(empty.status, 2) << describe(empty);
  EXPECT_NE(empty.err.find("--api-key needs a value"), std::string::npos) << empty.err;
  const RunResult spaced = run_cli({"serve", "--api-key", "two words", "--port", "0"});
  EXPECT_EQ(spaced.status, 2) << describe(spaced);
  EXPECT_NE(spaced.err.find("holds a space or control character"), std::string::npos) << spaced.err;
}

// --served-model-name is the id the models list, OpenAI's retrieve, and every reply carry, and the one a
// request may name.
TEST(ServeAccess, TheServedModelNameIsTheModelsId) {
  Server server({"--threads", "1", "--served-model-name", "team-model-v2"});
  ASSERT_NE(server.port(), 0);
  const HttpReply listed = http_exchange(server.port(), "GET /v1/models HTTP/1.1\r\n\r\n");
  ASSERT_EQ(listed.status, 200) << listed.body;
  EXPECT_EQ(json::parse(listed.body).at("data")[0].at("id"), "team-model-v2");
  const HttpReply one = http_exchange(server.port(), "GET /v1/models/team-model-v2 HTTP/1.1\r\n\r\n");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body), json::parse(listed.body).at("data")[0]);
  const HttpReply other = http_exchange(server.port(), "GET /v1/models/tiny HTTP/1.1\r\n\r\n");
  EXPECT_EQ(other.status, 404) << other.body;
  // OpenAI's error for a model it does not have: its code is what a client reads.
  const json expected_error = {{"message", "no model 'tiny': this server has 'team-model-v2' (--served-model-name)"},
                               {"type", "invalid_request_error"}, {"param", "model"}, {"code", "model_not_found"}};
  EXPECT_EQ(json::parse(other.body).at("error"), expected_error) << other.body;
  // A request naming the served model, none, or "" (vLLM's "this one") is answered by it.
  for (const std::string named : {R"("model": "team-model-v2", )", "", R"("model": "", )", R"("model": null, )"}) {
    const HttpReply reply = post(server.port(), "/v1/completions", "{" + named + R"("prompt": "a", "max_tokens": 2})");
    ASSERT_EQ(reply.status, 200) << named << reply.body;
    EXPECT_EQ(json::parse(reply.body).at("model"), "team-model-v2");
  }
  // Another model's name is answered 404 on every path that takes a body, before the body's other fields
  // are read (the sample has no chat template, and the tokens are past its vocabulary); not a string, 400.
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"/v1/completions", R"({"model": "tiny", "prompt": "a", "max_tokens": 2})"},
      {"/v1/chat/completions", R"({"model": "tiny", "messages": [{"role": "user", "content": "a"}]})"},
      {"/v1/responses", R"({"model": "tiny", "input": "a"})"},
      {"/tokenize", R"({"model": "tiny", "prompt": "a"})"},
      {"/detokenize", R"({"model": "tiny", "tokens": [99999999]})"}};
  for (const auto& [path, body] : requests) {
    const HttpReply refused = post(server.port(), path, body);
    EXPECT_EQ(refused.status, 404) << path << ": " << refused.body;
    EXPECT_EQ(json::parse(refused.body).at("error"), expected_error) << path;
  }
  // A stream asked of another model is refused before its head: a JSON 404, not events.
  const HttpReply streamed = post(server.port(), "/v1/completions", R"({"model": "tiny", "prompt": "a", "stream": true})");
  EXPECT_EQ(streamed.status, 404) << streamed.body;
  EXPECT_EQ(json::parse(streamed.body).at("error"), expected_error);
  const HttpReply not_a_name = post(server.port(), "/v1/chat/completions", R"({"model": ["team-model-v2"], "messages": []})");
  EXPECT_EQ(not_a_name.status, 400) << not_a_name.body;
  EXPECT_EQ(json::parse(not_a_name.body).at("error").at("message"), R"('model' must be the served model's id, a string, got ["team-model-v2"])");
  // A name with a line break is logged on one line (as \x0a), so that it cannot pass for another entry.
  EXPECT_EQ(post(server.port(), "/tokenize", R"({"model": "x\nPOST /v1/completions 200", "prompt": "a"})").status, 404);
  EXPECT_NE(server.log().find("no model 'x\\x0aPOST /v1/completions 200'"), std::string::npos) << server.log();
  EXPECT_EQ(server.log().find("\nPOST /v1/completions 200"), std::string::npos) << server.log();
  for (const std::string bad : {"two words", "tab\tname"}) {
    const RunResult refused = run_cli({"serve", "--served-model-name", bad, "--port", "0"});
    EXPECT_EQ(refused.status, 2) << describe(refused);
    EXPECT_NE(refused.err.find("--served-model-name must be a name without spaces or control characters"), std::string::npos) << refused.err;
  }
}

// A Hugging Face id ("org/name", vLLM's default) as the served name: requests name it as it is, and
// OpenAI's retrieve takes it with its '/' escaped (as the SDKs send it) or not.
TEST(ServeAccess, AServedNameWithASlashIsTheModelsId) {
  Server server({"--threads", "1", "--served-model-name", "meta-llama/Llama-3.2-1B"});
  ASSERT_NE(server.port(), 0);
  const HttpReply reply = post(server.port(), "/v1/completions", R"({"model": "meta-llama/Llama-3.2-1B", "prompt": "a", "max_tokens": 2})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(json::parse(reply.body).at("model"), "meta-llama/Llama-3.2-1B");
  for (const std::string path : {"/v1/models/meta-llama/Llama-3.2-1B", "/v1/models/meta-llama%2FLlama-3.2-1B", "/v1/models/meta-llama%2fLlama-3.2-1B"}) {
    const HttpReply one = http_exchange(server.port(), "GET " + path + " HTTP/1.1\r\n\r\n");
    ASSERT_EQ(one.status, 200) << path << ": " << one.body;
    EXPECT_EQ(json::parse(one.body).at("id"), "meta-llama/Llama-3.2-1B");
  }
  for (const std::string path : {"/v1/models/meta-llama", "/v1/models/Llama-3.2-1B", "/v1/models/meta-llama%2", "/v1/models/meta-llama%2GLlama-3.2-1B"})
    EXPECT_EQ(http_exchange(server.port(), "GET " + path + " HTTP/1.1\r\n\r\n").status, 404) << path;
  EXPECT_EQ(post(server.port(), "/v1/completions", R"({"model": "meta-llama", "prompt": "a"})").status, 404);
}

// The default name is the folder's own, however --model spells it ("." from inside it, a trailing '/').
TEST(ServeAccess, TheDefaultNameIsTheFoldersOwn) {
  TempDir dir("serve-name");
  const std::filesystem::path model = text_model(dir);
  const std::string folder = model.filename().string();
  for (const auto& [spelled, cwd] : std::vector<std::pair<std::string, std::filesystem::path>>{
           {".", model}, {"./", model}, {folder + "/", model.parent_path()}, {"../" + folder + "/.", model}}) {
    Server server({"--model", spelled, "--threads", "1"}, cwd);
    ASSERT_NE(server.port(), 0) << spelled;
    const HttpReply listed = http_exchange(server.port(), "GET /v1/models HTTP/1.1\r\n\r\n");
    ASSERT_EQ(listed.status, 200) << listed.body;
    EXPECT_EQ(json::parse(listed.body).at("data")[0].at("id"), folder) << spelled;
    const std::string body = R"({"model": ")" + folder + R"(", "prompt": "a", "max_tokens": 1})";
    EXPECT_EQ(post(server.port(), "/v1/completions", body).status, 200) << spelled;
  }
}

}  // namespace
}  // namespace tilefire::testing
