// tilefire serve: the OpenAI completions and chat completions API on a loopback port. Replies are checked
// against `tilefire run --json` with the same settings; streamed events add up to the whole reply; bad
// requests get a status and a message naming the field; clients at once each get their own reply; a client
// that leaves does not stop the server; SIGTERM ends it with status 0.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/serve_client.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

extern char** environ;

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `batching`: the server's extra flags (--sequences N), none for requests in turn.
void replies_are_runs_replies(const std::vector<std::string>& batching) {
  TempDir dir("cli-serve");
  const fs::path model = text_model(dir);
  std::vector<std::string> args = {"--model", model.string(), "--threads", "2"};
  args.insert(args.end(), batching.begin(), batching.end());
  Server server(args);
  ASSERT_NE(server.port(), 0);

  // The first request (nothing cached to reuse) against run, greedy.
  HttpReply reply = post(server.port(), "/v1/completions", R"({"model": "tiny-serve", "prompt": "hello hello", "max_tokens": 12, "temperature": 0})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  json body = json::parse(reply.body);
  json expected = run_json({"--model", model.string(), "--prompt", "hello hello", "--max-new-tokens", "12", "--threads", "2"});
  EXPECT_EQ(body.at("object"), "text_completion");
  EXPECT_EQ(body.at("model"), "tiny-serve");
  EXPECT_EQ(body.at("choices")[0].at("text"), expected.at("text")) << body.dump();
  EXPECT_EQ(body.at("choices")[0].at("finish_reason"), "length");
  EXPECT_EQ(body.at("usage").at("prompt_tokens"), expected.at("prompt_tokens").size());
  EXPECT_EQ(body.at("usage").at("completion_tokens"), 12);

  // Sampled, from token ids, with a seed: run's reply with the same seed and cuts.
  reply = post(server.port(), "/v1/completions", R"({"prompt": [7, 100, 200], "max_tokens": 10, "temperature": 0.9, "top_k": 40, "top_p": 0.95, "seed": 11})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  expected = run_json({"--model", model.string(), "--prompt-tokens", "7,100,200", "--max-new-tokens", "10", "--temperature", "0.9",
                       "--top-k", "40", "--top-p", "0.95", "--seed", "11"});
  EXPECT_EQ(json::parse(reply.body).at("choices")[0].at("text"), expected.at("text")) << reply.body;

  // Streamed with a stop string: the events add up to the whole reply, cut before the stop string.
  const std::string whole = expected.at("text").get<std::string>();
  ASSERT_GE(whole.size(), 4u);
  std::string stop;  // the first printable ASCII pair past the first character, where it first appears
  for (size_t p = 1; p + 2 <= whole.size() && stop.empty(); ++p)
    if (whole[p] > ' ' && whole[p] < 127 && whole[p + 1] > ' ' && whole[p + 1] < 127 && whole.find(whole.substr(p, 2)) == p) stop = whole.substr(p, 2);
  ASSERT_FALSE(stop.empty()) << "no two printable characters in a row in: " << whole;
  for (bool stream : {false, true}) {
    json request = {{"prompt", {8, 100, 200}}, {"max_tokens", 10}, {"temperature", 0.9}, {"top_k", 40}, {"top_p", 0.95}, {"seed", 11}, {"stream", stream}};
    request["stop"] = {"\x01never", stop};
    reply = post(server.port(), "/v1/completions", request.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    if (!stream) {
      expected = json::parse(reply.body);
      continue;
    }
    EXPECT_NE(reply.head.find("Content-Type: text/event-stream"), std::string::npos) << reply.head;
    const std::vector<std::string> data = events(reply.body);
    ASSERT_GE(data.size(), 2u) << reply.body;
    EXPECT_EQ(data.back(), "[DONE]");
    std::string text;
    for (size_t i = 0; i + 1 < data.size(); ++i) text += json::parse(data[i]).at("choices")[0].at("text").get<std::string>();
    const json last = json::parse(data[data.size() - 2]);
    EXPECT_EQ(text, expected.at("choices")[0].at("text")) << reply.body;
    EXPECT_EQ(last.at("choices")[0].at("finish_reason"), expected.at("choices")[0].at("finish_reason"));
    for (const char* count : {"prompt_tokens", "completion_tokens", "total_tokens"})  // (cached_tokens: the first left them)
      EXPECT_EQ(last.at("usage").at(count), expected.at("usage").at(count)) << count;
  }

  // Chat: the messages through the template, as run --chat puts them; streamed deltas add up to the message.
  reply = post(server.port(), "/v1/chat/completions",
               R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  body = json::parse(reply.body);
  expected = run_json({"--model", model.string(), "--system", "be brief", "--chat", "hello", "--max-new-tokens", "8"});
  EXPECT_EQ(body.at("object"), "chat.completion");
  EXPECT_EQ(body.at("choices")[0].at("message"), json({{"role", "assistant"}, {"content", expected.at("text")}})) << body.dump();
  EXPECT_EQ(body.at("usage").at("prompt_tokens"), expected.at("prompt_tokens").size());
  reply = post(server.port(), "/v1/chat/completions",
               R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0, "stream": true})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const std::vector<std::string> data = events(reply.body);
  ASSERT_GE(data.size(), 3u) << reply.body;
  EXPECT_EQ(json::parse(data[0]).at("choices")[0].at("delta").at("role"), "assistant");
  std::string content;
  for (size_t i = 0; i + 1 < data.size(); ++i) content += json::parse(data[i]).at("choices")[0].at("delta").value("content", "");
  EXPECT_EQ(content, expected.at("text"));
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(CliServe, RepliesAreRunsRepliesAndStreamedEventsAddUpToThem) { replies_are_runs_replies({}); }
// Continuous batching: the same replies, each request a sequence of its own.
TEST(CliServe, BatchedRepliesAreRunsReplies) { replies_are_runs_replies({"--sequences", "2"}); }
// ... with every prompt chunk run as a program of its own after the decode step.
TEST(CliServe, BatchedRepliesWithChunksApartFromTheDecodeStepAreRunsReplies) {
  replies_are_runs_replies({"--sequences", "2", "--separate-prefill"});
}
// ... with each joining prompt prefilled whole when it joins, not by the steps.
TEST(CliServe, BatchedRepliesWithPromptsPrefilledWholeAreRunsReplies) {
  replies_are_runs_replies({"--sequences", "2", "--prefill-chunks", "0"});
}

// The official OpenAI SDK for JavaScript (fetched by scripts/fetch-tokenizers) as the client, as an
// application would use it: the model list, a completion and a chat, whole and streamed, a named
// function's call, the Responses API, and a refusal; the replies are run --json's.
TEST(CliServe, TheOpenAiSdkGetsRunsReplies) {
  const fs::path sdk = fs::path(TILEFIRE_SOURCE_DIR) / ".deps" / "tokenizers" / "node_modules" / "openai" / "index.mjs";
  if (!fs::exists(sdk)) {
    const char* required = std::getenv("TILEFIRE_REQUIRE_TOKENIZER_FILES");
    if (required && std::string(required) == "1") FAIL() << sdk << " is missing: run scripts/fetch-tokenizers";
    GTEST_SKIP() << "no OpenAI SDK: run scripts/fetch-tokenizers";
  }
  TempDir dir("cli-serve-sdk");
  const fs::path model = text_model(dir);
  Server server({"--model", model.string(), "--threads", "2", "--json-whitespace", "0"});  // compact calls: a random model pads JSON
  ASSERT_NE(server.port(), 0);
  const RunResult client = run_program("node", {(fs::path(TILEFIRE_SOURCE_DIR) / "tests" / "e2e" / "openai_client.mjs").string(),
                                                sdk.string(), "http://127.0.0.1:" + std::to_string(server.port()) + "/v1"});
  ASSERT_EQ(client.status, 0) << describe(client) << "\nserver log:\n" << server.log();
  const json got = json::parse(client.out);
  EXPECT_EQ(got.at("models"), json({"tiny-serve"}));
  const json completion = run_json({"--model", model.string(), "--prompt-tokens", "9,100,200", "--max-new-tokens", "10"});
  EXPECT_EQ(got.at("completion").at("text"), completion.at("text")) << got.dump();
  EXPECT_EQ(got.at("completion").at("finish_reason"), "length");
  EXPECT_EQ(got.at("completion").at("usage").at("completion_tokens"), 10);
  EXPECT_EQ(got.at("completion_streamed"), completion.at("text"));
  const json chat = run_json({"--model", model.string(), "--system", "be brief", "--chat", "hello", "--max-new-tokens", "8"});
  EXPECT_EQ(got.at("chat").at("role"), "assistant");
  EXPECT_EQ(got.at("chat").at("content"), chat.at("text")) << got.dump();
  EXPECT_EQ(got.at("chat_streamed"), chat.at("text"));
  // stream_options.include_usage: the SDK reads the usage from the stream's last chunk, which has no choices.
  EXPECT_EQ(got.at("chat_streamed_usage").at("choices"), 0) << got.dump();
  EXPECT_EQ(got.at("chat_streamed_usage").at("usage").at("completion_tokens"), chat.at("tokens").size()) << got.dump();
  EXPECT_EQ(got.at("refused").at("status"), 400) << got.dump();
  EXPECT_NE(got.at("refused").at("message").get<std::string>().find("'n' must be a whole number from 1 to 64"), std::string::npos)
      << got.dump();
  // A request for another model: the SDK's NotFoundError, which names both.
  EXPECT_EQ(got.at("other_model").at("status"), 404) << got.dump();
  EXPECT_EQ(got.at("other_model").at("name"), "NotFoundError") << got.dump();
  EXPECT_NE(got.at("other_model").at("message").get<std::string>().find("no model 'another-model': this server has 'tiny-serve'"),
            std::string::npos)
      << got.dump();
  // A named function's call: the SDK reads it whole, and joins the streamed deltas into the same call.
  const json& call = got.at("tool_call");
  EXPECT_EQ(call.at("name"), "get_weather") << got.dump();
  EXPECT_TRUE(call.at("content").is_null()) << got.dump();
  EXPECT_EQ(call.at("id").get<std::string>().rfind("call_", 0), 0u) << got.dump();
  const json& streamed_call = got.at("tool_call_streamed");
  EXPECT_EQ(streamed_call.at("name"), "get_weather") << got.dump();
  EXPECT_EQ(streamed_call.at("arguments"), call.at("arguments")) << got.dump();
  EXPECT_EQ(streamed_call.at("finish_reason"), call.at("finish_reason")) << got.dump();
  ASSERT_EQ(call.at("finish_reason"), "stop") << got.dump();  // compact and greedy, the call ends within 40 tokens
  EXPECT_TRUE(json::parse(call.at("arguments").get<std::string>()).contains("city")) << got.dump();
  // The Responses API through the SDK: its output_text (the SDK joins the message items' texts) is the
  // chat's reply to the same conversation; a named function's call is a function_call item, as the chat's.
  const json& response = got.at("response");
  EXPECT_EQ(response.at("output_text"), chat.at("text")) << got.dump();
  EXPECT_EQ(response.at("id").get<std::string>().rfind("resp_", 0), 0u) << got.dump();
  EXPECT_EQ(response.at("usage").at("output_tokens"), chat.at("tokens").size()) << got.dump();
  EXPECT_EQ(response.at("status"), chat.at("tokens").size() == 8 ? "incomplete" : "completed") << got.dump();
  EXPECT_EQ(got.at("response_streamed").at("text"), chat.at("text")) << got.dump();
  EXPECT_EQ(got.at("response_streamed").at("deltas"), chat.at("text")) << got.dump();
  const json& response_call = got.at("response_call");
  EXPECT_EQ(response_call.at("name"), "get_weather") << got.dump();
  EXPECT_EQ(response_call.at("arguments"), call.at("arguments")) << got.dump();
  EXPECT_EQ(response_call.at("call_id").get<std::string>().rfind("call_", 0), 0u) << got.dump();
  const json greedy_choices = {{{"index", 0}, {"text", completion.at("text")}}, {{"index", 1}, {"text", completion.at("text")}}};
  EXPECT_EQ(got.at("two_choices"), greedy_choices) << "n 2 at temperature 0: the greedy text twice";
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(CliServe, BadRequestsGetAStatusAndAMessageNamingWhatIsWrong) {
  Server server({"--threads", "1", "--io-timeout-ms", "2000"});  // the built-in sample: text as bytes
  ASSERT_NE(server.port(), 0);
  std::string past_the_context = "1";  // 1,101 token ids for the sample's context of 1,024
  for (int i = 0; i < 1100; ++i) past_the_context += ",1";
  const std::vector<std::tuple<std::string, std::string, int, std::string>> cases = {
      {"/v1/completions", "{", 400, "the request body: not valid JSON"},
      {"/v1/completions", std::string(1000, '[') + std::string(1000, ']'), 400, "nest more than 400 levels deep"},
      {"/v1/completions", R"({"prompt": "a", "stop": )" + std::string(100000, '[') + std::string(100000, ']') + "}", 400,
       "nest more than 400 levels deep"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 1e400})", 400, "the request body"},
      {"/v1/completions", R"({"prompt": [)" + past_the_context + R"(], "stream": true})", 400,
       "'prompt' makes a prompt of 1101 tokens, and the context holds 1024"},
      {"/v1/completions", R"({"prompt": "a", "repetition_penalty": 0})", 400, "'repetition_penalty' must be a number from 0.001 to 100"},
      {"/v1/completions", R"({"prompt": "a", "min_p": 1.1})", 400, "'min_p' must be a number from 0 to 1"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"512": 1}})", 400, "'logit_bias' names '512', not a token id of the vocabulary of 512"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"-3": 1}})", 400, "'logit_bias' names '-3'"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"3": 100.5}})", 400, "'logit_bias' gives token 3 100.5"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": [3]})", 400, "'logit_bias' must be an object"},
      {"/v1/completions", R"({"prompt": "a", "stop_token_ids": [600]})", 400, "'stop_token_ids' holds 600"},
      {"/v1/completions", "[1]", 400, "not a JSON object"},
      {"/v1/completions", "{}", 400, "'prompt' is missing"},
      {"/v1/completions", R"({"prompt": {"a": 1}})", 400, "'prompt' must be a string, a list of token ids, or a list of those"},
      {"/v1/completions", R"({"prompt": ["a", 5]})", 400, "'prompt' must be a string, a list of token ids, or a list of those"},
      {"/v1/completions", R"({"prompt": [1, 99999]})", 400, "'prompt' holds token 99999, outside the vocabulary of 512"},
      {"/v1/completions", R"({"prompt": ""})", 400, "'prompt' is empty"},
      {"/v1/completions", R"({"prompt": "a", "temperature": -1})", 400, "'temperature' must be a number from 0 to 100, got -1"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": "9"})", 400, "'max_tokens' must be a whole number"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": -3})", 400, "'max_tokens' must be a whole number"},
      {"/v1/completions", R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", 400, "'stop' must be a string or a list of up to 4"},
      {"/v1/completions", R"({"prompt": "a", "stop": ""})", 400, "'stop' holds an empty string"},
      {"/v1/completions", R"({"prompt": "a", "n": 0})", 400, "'n' must be a whole number from 1 to 64"},
      {"/v1/completions", R"({"prompt": "a", "n": 2, "best_of": 3})", 400, "'best_of' must be 1 or n"},
      {"/v1/completions", R"({"prompt": "a", "presence_penalty": 2.5})", 400, "'presence_penalty' must be a number from -2 to 2"},
      {"/v1/completions", R"({"prompt": "a", "stream": "yes"})", 400, "'stream' must be true or false"},
      {"/v1/completions", R"({"prompt": "a", "skip_special_tokens": "no"})", 400, "'skip_special_tokens' must be true or false"},
      {"/v1/completions", R"({"prompt": "a", "bad_words": ["x"]})", 400, "'bad_words' is not supported (only an empty list)"},
      {"/v1/completions", R"({"prompt": "a", "logits_processors": ["m.f"]})", 400, "'logits_processors' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "priority": 3})", 400, "'priority' is not supported (only 0"},
      {"/v1/completions", R"({"prompt": "a", "prompt_logprobs": 1})", 400, "'prompt_logprobs' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "return_tokens_as_token_ids": true})", 400, "'return_tokens_as_token_ids' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "return_token_ids": true})", 400, "'return_token_ids' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "guided_whitespace_pattern": " *"})", 400, "'guided_whitespace_pattern' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "cache_salt": "s"})", 400, "'cache_salt' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "prompt_embeds": "AAAA"})", 400, "'prompt_embeds' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "vllm_xargs": {"k": 1}})", 400, "'vllm_xargs' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "modalities": ["text", "audio"]})", 400, "'modalities' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "audio": {"voice": "x"}})", 400, "'audio' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "web_search_options": {}})", 400, "'web_search_options' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "verbosity": "low"})", 400, "'verbosity' is not supported"},
      {"/v1/completions", R"({"prompt": "a", "truncate_prompt_tokens": 0})", 400, "'truncate_prompt_tokens' must be -1"},
      {"/v1/completions", R"({"prompt": "a", "truncate_prompt_tokens": -2})", 400, "'truncate_prompt_tokens' must be -1"},
      {"/v1/completions", R"({"prompt": "a", "truncate_prompt_tokens": 1025})", 400, "'truncate_prompt_tokens' must be -1"},
      {"/v1/completions", R"({"prompt": "a", "truncate_prompt_tokens": "4"})", 400, "'truncate_prompt_tokens' must be -1"},
      {"/v1/completions", R"({"prompt": "a", "allowed_token_ids": []})", 400, "'allowed_token_ids' must be a non-empty list"},
      {"/v1/completions", R"({"prompt": "a", "allowed_token_ids": [512]})", 400, "'allowed_token_ids' holds 512"},
      {"/v1/completions", R"({"prompt": "a", "allowed_token_ids": [-1]})", 400, "'allowed_token_ids' holds -1"},
      {"/v1/completions", R"({"prompt": "a", "add_special_tokens": "no"})", 400, "'add_special_tokens' must be true or false"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "no tokenizer.json"},
      {"/v1/embeddings", "{}", 404, "no such path: /v1/embeddings"},
  };
  for (const auto& [path, body, status, message] : cases) {
    const HttpReply reply = post(server.port(), path, body);
    EXPECT_EQ(reply.status, status) << path << " " << body << "\n" << reply.body;
    EXPECT_NE(reply.body.find(message), std::string::npos) << body << "\n" << reply.body;
    if (reply.status != 0) {
      EXPECT_NO_THROW(json::parse(reply.body).at("error").at("message")) << reply.body;
    }
  }
  // What is wrong with the HTTP itself.
  EXPECT_EQ(http_exchange(server.port(), "GET /v1/completions HTTP/1.1\r\n\r\n").status, 405);
  EXPECT_EQ(http_exchange(server.port(), "POST /v1/completions HTTP/1.1\r\n\r\n").status, 411);
  EXPECT_EQ(http_exchange(server.port(), "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n").status, 413);
  EXPECT_EQ(http_exchange(server.port(), "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").status, 411);
  EXPECT_EQ(http_exchange(server.port(), "GET /health HTTP/1.1\r\nX: " + std::string(70000, 'x') + "\r\n\r\n").status, 431);
  EXPECT_EQ(http_exchange(server.port(), "nonsense\r\n\r\n").status, 400);
  EXPECT_EQ(http_exchange(server.port(), "GET http://127.0.0.1/health HTTP/1.1\r\n\r\n").status, 200) << "the absolute form";
  EXPECT_EQ(http_exchange(server.port(), "GET /health HTTP/1.1\n\n").status, 200) << "bare line feeds";
  EXPECT_EQ(http_exchange(server.port(), "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}").status, 400);
  // The neutral values of what is refused otherwise, and what maps onto the engine, are taken.
  const std::string greedy = post(server.port(), "/v1/completions", R"({"prompt": "hello", "max_tokens": 12, "temperature": 0})").body;
  for (const char* same : {R"({"prompt": "hello", "max_tokens": 12, "top_p": 0, "seed": -1, "repetition_penalty": 1, "min_p": 0, "logit_bias": {}})",
                           R"({"prompt": "hello", "max_completion_tokens": 12, "temperature": 0, "ignore_eos": false, "stop_token_ids": []})"}) {
    const HttpReply reply = post(server.port(), "/v1/completions", same);
    ASSERT_EQ(reply.status, 200) << same << "\n" << reply.body;
    EXPECT_EQ(json::parse(reply.body).at("choices"), json::parse(greedy).at("choices")) << same;
  }
  // Streamed, the sample's bytes arrive as whole characters: the events add up to the reply.
  const HttpReply streamed = post(server.port(), "/v1/completions", R"({"prompt": "hello", "max_tokens": 12, "temperature": 0, "stream": true})");
  std::string text;
  for (const std::string& data : events(streamed.body))
    if (data != "[DONE]") text += json::parse(data).at("choices")[0].at("text").get<std::string>();
  EXPECT_EQ(json(text), json::parse(greedy).at("choices")[0].at("text")) << streamed.body;
  // A body cut short, and a client that sends nothing: each answered 408 after --io-timeout-ms, nothing else.
  EXPECT_EQ(http_exchange(server.port(), "POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"pro").status, 408);
  EXPECT_EQ(http_exchange(server.port(), "").status, 408);
  const HttpReply health = http_exchange(server.port(), "GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(json::parse(health.body), json({{"status", "ok"}}));
  const HttpReply models = http_exchange(server.port(), "GET /v1/models HTTP/1.1\r\n\r\n");
  EXPECT_EQ(json::parse(models.body).at("data")[0].at("id"), "tiny") << models.body;
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// `batching`: the server's extra flags (--sequences N), none for requests in turn; `ranks`: flags of the
// server and of the runs its replies are compared with (--tp N).
void clients_at_once(const std::vector<std::string>& batching, const std::vector<std::string>& ranks = {}) {
  std::vector<std::string> args = {"--threads", "2"};
  args.insert(args.end(), batching.begin(), batching.end());
  args.insert(args.end(), ranks.begin(), ranks.end());
  Server server(args);
  ASSERT_NE(server.port(), 0);
  // Batching: a long stream runs while the clients come, so their sequences join it (its client reads all
  // the while; one that stops reading is AClientThatStopsReadingHoldsUpNoOtherRequest's).
  std::atomic<bool> clients_done{false}, streaming{false};
  std::thread holding;
  if (!batching.empty()) {
    holding = std::thread([&] {
      const int fd = connect_to(server.port());
      ASSERT_GE(fd, 0);
      const std::string body = R"({"prompt": [9], "max_tokens": 1000, "stream": true, "temperature": 0})";
      send_text(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
      char chunk[4096];
      pollfd readable{fd, POLLIN, 0};
      while (!clients_done.load() && ::poll(&readable, 1, 10) >= 0) {
        if ((readable.revents & POLLIN) && ::recv(fd, chunk, sizeof chunk, 0) <= 0) break;
        streaming.store(true);
      }
      ::close(fd);
    });
    while (!streaming.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Prompts that share no first token: no request reuses another's cache, so each reply is a fresh run's.
  const std::vector<std::string> prompts = {"11,12,13", "21,22", "31,32,33,34", "41"};
  std::vector<std::string> expected;
  for (const std::string& prompt : prompts) {
    std::vector<std::string> run_args = {"--prompt-tokens", prompt, "--max-new-tokens", "24", "--threads", ranks.empty() ? "1" : "2"};
    run_args.insert(run_args.end(), ranks.begin(), ranks.end());
    expected.push_back(run_json(run_args).at("text").get<std::string>());
  }
  // One client asks for a long stream and leaves after its first event.
  std::thread leaving([&] {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0);
    const std::string body = R"({"prompt": [5], "max_tokens": 1000, "stream": true, "temperature": 0})";
    send_text(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    char first[256];
    EXPECT_GT(::recv(fd, first, sizeof first, 0), 0);
    ::close(fd);
  });
  std::vector<std::string> got(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] {
      const HttpReply reply = post(server.port(), "/v1/completions",
                                   R"({"prompt": [)" + prompts[i] + R"(], "max_tokens": 24, "temperature": 0})");
      if (reply.status == 200) got[i] = json::parse(reply.body).at("choices")[0].at("text").get<std::string>();
      else got[i] = "status " + std::to_string(reply.status) + ": " + reply.body;
    });
  for (std::thread& client : clients) client.join();
  leaving.join();
  clients_done.store(true);
  if (holding.joinable()) holding.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    // run prints bytes of the sample; the server's JSON replaces what is not UTF-8 the same way run's --json does.
    EXPECT_EQ(json(got[i]).dump(-1, ' ', false, json::error_handler_t::replace),
              json(expected[i]).dump(-1, ' ', false, json::error_handler_t::replace)) << "prompt " << prompts[i];
  }
  EXPECT_EQ(http_exchange(server.port(), "GET /health HTTP/1.1\r\n\r\n").status, 200);

  // A client that closes right after a request that is not streamed: its generation ends at the next token.
  int fd = connect_to(server.port());
  const std::string long_reply = R"({"prompt": [6], "max_tokens": 1000, "temperature": 0})";
  send_text(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(long_reply.size()) + "\r\n\r\n" + long_reply);
  ::close(fd);
  for (int waited = 0; waited < 1000 && server.log().find("tokens, stopped)") == std::string::npos; ++waited)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_NE(server.log().find("tokens, stopped)"), std::string::npos) << server.log();
  EXPECT_EQ(server.log().find("1000 tokens"), std::string::npos) << server.log();

  // "Expect: 100-continue": the server asks for the body, then answers.
  fd = connect_to(server.port());
  const std::string short_reply = R"({"prompt": [7], "max_tokens": 2})";
  send_text(fd, "POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: " + std::to_string(short_reply.size()) + "\r\n\r\n");
  char first[64] = {};
  EXPECT_GT(::recv(fd, first, sizeof first - 1, 0), 0);
  EXPECT_EQ(std::string(first).rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << first;
  send_text(fd, short_reply);
  std::string rest;
  char chunk[4096];
  for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) > 0;) rest.append(chunk, size_t(n));
  ::close(fd);
  EXPECT_EQ(rest.rfind("HTTP/1.1 200 OK", 0), 0u) << rest;

  // A connection that sends nothing does not hold the server's stopping back (--io-timeout-ms is 30 s).
  const int idle = connect_to(server.port());
  const auto stop_began = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_began, std::chrono::seconds(5));
  ::close(idle);
  if (!batching.empty()) {  // the clients' sequences decoded beside the long stream's
    const std::string log = server.log();
    const size_t at = log.find("stopped (at most ");
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_GE(std::atoi(log.c_str() + at + std::strlen("stopped (at most ")), 2) << log;
  }
}

TEST(CliServe, ClientsAtOnceEachGetTheirReplyAndALeavingClientEndsOnlyItsOwn) { clients_at_once({}); }
TEST(CliServe, BatchedClientsAtOnceEachGetTheirReplyAndALeavingClientEndsOnlyItsOwn) { clients_at_once({"--sequences", "3"}); }
// ... on two tensor-parallel ranks: each reply is run --tp 2's.
TEST(CliServe, BatchedClientsOnTensorParallelRanksEachGetRunsReply) { clients_at_once({"--sequences", "3"}, {"--tp", "2"}); }

// A prompt that runs the model into non-finite logits (a token whose embedding holds an infinity) is a
// 400 naming them, and with --sequences it fails alone: its prompt's chunk fails in a step (after the
// step's decode), and the request decoding beside it runs on to its end (before, every request in the
// batch got the error).
TEST(CliServe, APromptWithNonFiniteLogitsFailsOnlyItsOwnRequest) {
  TempDir dir("cli-serve-nonfinite");
  const fs::path model = gen_tiny_model(dir, "tiny-poisoned");
  const std::vector<int32_t> good_prompt = {11, 12, 13};
  constexpr uint32_t kGoodTokens = 300;
  int32_t poisoned = 0;
  {
    EngineOptions options;  // the good request's greedy tokens on the clean model: the poisoned one is none of them
    options.model_dir = model.string();
    options.threads = 1;
    Engine clean(options);
    GenerateRequest good;
    good.prompt = good_prompt;
    good.max_new_tokens = kGoodTokens;
    good.stop_at_eos = false;
    std::vector<int32_t> seen = clean.generate(good).tokens;
    seen.insert(seen.end(), good_prompt.begin(), good_prompt.end());
    while (std::find(seen.begin(), seen.end(), poisoned) != seen.end()) ++poisoned;
    overwrite_f32(model, "model.embed_tokens.weight", uint64_t(poisoned) * clean.model().hidden, std::numeric_limits<float>::infinity());
  }
  Server server({"--model", model.string(), "--threads", "1", "--sequences", "2"});
  ASSERT_NE(server.port(), 0);
  std::atomic<bool> streaming{false};
  std::string good_body;
  std::thread good([&] {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0);
    const std::string body = json({{"prompt", good_prompt}, {"max_tokens", kGoodTokens}, {"temperature", 0}, {"ignore_eos", true},
                                   {"stream", true}}).dump();
    send_text(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    char chunk[4096];
    for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) > 0;) {
      good_body.append(chunk, size_t(n));
      streaming.store(true);
    }
    ::close(fd);
  });
  while (!streaming.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const HttpReply bad = post(server.port(), "/v1/completions",
                             json({{"prompt", {3, poisoned, 4}}, {"max_tokens", 5}, {"temperature", 0}}).dump());
  good.join();
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("non-finite"), std::string::npos) << bad.body;
  const std::vector<std::string> data = events(good_body.substr(good_body.find("\r\n\r\n") + 4));
  ASSERT_GE(data.size(), 2u) << good_body << "\nthe server's log:\n" << server.log();
  ASSERT_EQ(data.back(), "[DONE]") << "the server's log:\n" << server.log();
  EXPECT_EQ(good_body.find("\"error\""), std::string::npos) << "the good request got the other's error";
  const json last = json::parse(data[data.size() - 2]);
  EXPECT_EQ(last.at("choices")[0].at("finish_reason"), "length") << last.dump();
  EXPECT_EQ(last.at("usage").at("completion_tokens"), kGoodTokens) << last.dump();
  EXPECT_EQ(server.stop(), 0) << server.log();
  const std::string log = server.log();
  const size_t at = log.find("stopped (at most ");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_EQ(std::atoi(log.c_str() + at + std::strlen("stopped (at most ")), 2) << "the two requests shared steps\n" << log;
}

// A tokenizer.json for the tiny preset whose tokens 256..511 each spell 16000 letters (and their id): a
// reply of a few hundred tokens is megabytes, more than the sockets between a server and a client that
// stops reading hold (a few MiB on Linux's loopback), so the server's writes to that client must wait.
json long_token_tokenizer() {
  json vocab = json::object();
  for (int id = 0; id < 512; ++id) {
    const char32_t c = byte_level_char(uint8_t(id % 256));
    std::string spelled = c < 0x80 ? std::string(1, char(c)) : std::string{char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
    if (id >= 256) spelled = std::string(16000, char('a' + id % 26)) + std::to_string(id);
    vocab[spelled] = id;
  }
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

// A streamed reply whose client stops reading holds up nobody else: with --sequences, the batch's thread
// only queues its text (StreamWriter), so other requests are answered while its writes wait, and its own
// generation runs to its end; the writes give up after --io-timeout-ms and the log says the client went.
// Before the writer thread, the batch's thread waited in that write, every other sequence with it.
TEST(CliServe, AClientThatStopsReadingHoldsUpNoOtherRequest) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // The stall takes megabytes of text, which a sanitizer build's server decodes at tens of KB/s: 40 s of
  // CI for a path every streamed reply of the tests above takes there too (StreamWriter's thread).
  GTEST_SKIP() << "run by the main build: a sanitizer build decodes the megabytes it needs too slowly";
#endif
  TempDir dir("cli-serve-stalled");
  const fs::path model = gen_tiny_model(dir, "tiny-long-tokens");
  write_file_text(model / "tokenizer.json", long_token_tokenizer().dump());
  constexpr int kIoTimeoutSeconds = 6;
  Server server({"--model", model.string(), "--threads", "1", "--sequences", "2", "--io-timeout-ms",
                 std::to_string(kIoTimeoutSeconds * 1000)});
  ASSERT_NE(server.port(), 0);
  // The stalled client: a receive buffer as small as Linux allows, and no read after its request.
  const int stalled = ::socket(AF_INET, SOCK_STREAM, 0);
  const int small_buffer = 2048;
  ::setsockopt(stalled, SOL_SOCKET, SO_RCVBUF, &small_buffer, sizeof small_buffer);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(server.port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(stalled, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const std::string body = R"({"prompt": [5], "max_tokens": 1000, "stream": true, "ignore_eos": true, "temperature": 1, "seed": 3})";
  send_text(stalled, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  // Other requests, one after another, until the stalled one is logged (its writes gave up): each is
  // answered in a small part of the io timeout, the one its writes would otherwise have held the batch.
  const auto began = std::chrono::steady_clock::now();
  int answered = 0;
  while (server.log().find("streamed") == std::string::npos &&
         std::chrono::steady_clock::now() - began < std::chrono::seconds(6 * kIoTimeoutSeconds)) {
    const auto sent = std::chrono::steady_clock::now();
    const HttpReply reply = post(server.port(), "/v1/completions", R"({"prompt": [7], "max_tokens": 4, "temperature": 0})");
    ASSERT_EQ(reply.status, 200) << reply.body;
    const auto took = std::chrono::steady_clock::now() - sent;
    ASSERT_LT(took, std::chrono::seconds(kIoTimeoutSeconds / 2))
        << "request " << answered << " waited for the stalled client's writes\n" << server.log();
    ++answered;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the held writes last seconds: no need to press
  }
  ::close(stalled);
  const std::string log = server.log();
  // Its writes gave up on the client (its generation went on meanwhile, to max_tokens or to that moment).
  EXPECT_NE(log.find(", streamed, client gone)"), std::string::npos) << log;
  EXPECT_GT(answered, 1) << log;
  EXPECT_EQ(server.stop(), 0) << log;
}

// The server's log line of the one request that was not streamed ("(N tokens, REASON)"), once it is
// there (within 30 s); empty if it never comes.
std::string unstreamed_request_line(const Server& server) {
  for (int waited = 0; waited < 3000; ++waited) {
    const std::string log = server.log();
    for (size_t at = 0, end; (end = log.find('\n', at)) != std::string::npos; at = end + 1) {
      const std::string line = log.substr(at, end - at);
      if (line.find("POST /v1/completions 200 (") != std::string::npos && line.find("streamed") == std::string::npos) return line;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "";
}

// Sends a completion request whose client leaves after `linger`, having read nothing.
void send_and_leave(uint16_t port, const std::string& body, std::chrono::milliseconds linger) {
  const int fd = connect_to(port);
  ASSERT_GE(fd, 0);
  send_text(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  std::this_thread::sleep_for(linger);
  ::close(fd);
}

// `holders` streams hold the engine (every sequence, or its turn) while a request (`body`) whose client
// leaves waits behind them; the log line of that request, once they are let go.
std::string line_of_a_request_left_waiting(const std::vector<std::string>& server_flags, int holders,
                                           const std::string& body = R"({"prompt": [8], "max_tokens": 5, "temperature": 0})") {
  Server server(server_flags);
  if (server.port() == 0) return "the server did not start: " + server.log();
  std::atomic<bool> release{false};
  std::atomic<int> streaming{0};
  auto hold = [&](int prompt) {
    const int fd = connect_to(server.port());
    if (fd < 0) return;
    const std::string body = R"({"prompt": [)" + std::to_string(prompt) + R"(], "max_tokens": 1000, "stream": true, "ignore_eos": true, "temperature": 0})";
    send_text(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    char chunk[4096];
    bool counted = false;
    pollfd readable{fd, POLLIN, 0};
    while (!release.load() && ::poll(&readable, 1, 10) >= 0) {
      if ((readable.revents & POLLIN) && ::recv(fd, chunk, sizeof chunk, 0) <= 0) break;
      if ((readable.revents & POLLIN) && !counted) counted = true, ++streaming;
    }
    ::close(fd);
  };
  std::vector<std::thread> holding;
  for (int h = 0; h < holders; ++h) holding.emplace_back(hold, 9 + h);
  for (int waited = 0; waited < 3000 && streaming.load() < holders; ++waited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool held = streaming.load() == holders;
  if (held) {
    send_and_leave(server.port(), body, std::chrono::milliseconds(200));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  release.store(true);
  for (std::thread& thread : holding) thread.join();
  return held ? unstreamed_request_line(server) : "the holding streams did not start: " + server.log();
}

// A request whose client leaves before its first token is not run on: one that waits for its turn or
// for a free sequence is dropped (nothing prefilled, no token), and one whose long prompt is being
// prefilled (a chunk a step) is taken out between steps. Before, each ran until its first token, the only
// point where its stop_when was asked ("1 tokens").
TEST(CliServe, ARequestWhoseClientLeftBeforeItsFirstTokenIsNotRunOn) {
  // Each task waits up to 100 us (about 9 ms a step of the sample), so the streams hold the engine, and a
  // prompt prefilled a token a step takes seconds, while the clients come and go.
  const std::vector<std::string> slow = {"--threads", "1", "--stress-delay-us", "100"};
  // In turn: the request waits for the engine's turn.
  std::string line = line_of_a_request_left_waiting(slow, 1);
  EXPECT_NE(line.find("(0 tokens, stopped)"), std::string::npos) << "in turn: " << line;
  // An echo with logprobs, whose prompt was never scored, is no reply's fault (it was a 500).
  line = line_of_a_request_left_waiting(slow, 1, R"({"prompt": [8, 9, 10], "max_tokens": 5, "echo": true, "logprobs": 1})");
  EXPECT_NE(line.find("(0 tokens, stopped)"), std::string::npos) << "in turn, echoed with logprobs: " << line;
  // Batched, a prompt prefilled whole as it joins (--prefill-chunks 0): only the check as it joins stops it.
  std::vector<std::string> batched = slow;
  for (const char* flag : {"--sequences", "2", "--prefill-chunks", "0"}) batched.push_back(flag);
  line = line_of_a_request_left_waiting(batched, 2);
  EXPECT_NE(line.find("(0 tokens, stopped)"), std::string::npos) << "batched: " << line;

  // A prompt of 400 tokens prefilled a token a step (seconds), whose client leaves after 300 ms.
  std::vector<std::string> chunked = slow;
  for (const char* flag : {"--sequences", "2", "--prefill-chunk", "1"}) chunked.push_back(flag);
  Server prefilling(chunked);
  ASSERT_NE(prefilling.port(), 0);
  std::string prompt = "1";
  for (int i = 2; i <= 400; ++i) prompt += "," + std::to_string(i % 200 + 1);
  send_and_leave(prefilling.port(), R"({"prompt": [)" + prompt + R"(], "max_tokens": 5, "temperature": 0})", std::chrono::milliseconds(300));
  line = unstreamed_request_line(prefilling);
  EXPECT_NE(line.find("(0 tokens, stopped)"), std::string::npos) << "prefilling: " << line << "\n" << prefilling.log();
}

// A device or transport fault leaves the engine refusing every later step (errors.h): the request fails
// 500 naming it, and the server stops by itself with exit status 3 (as the other commands exit on one),
// for a supervisor to restart it, rather than answer 500 to every request while /health says ok. The
// fault: two tensor-parallel ranks whose tasks each wait a random delay of up to 20 ms, and a collective
// timeout of 1 ms.
TEST(CliServe, AnEngineFaultStopsTheServerWithStatusThree) {
  for (const std::vector<std::string>& batching : {std::vector<std::string>{}, std::vector<std::string>{"--sequences", "2"}}) {
    SCOPED_TRACE(batching.empty() ? "requests in turn" : "--sequences 2");
    std::vector<std::string> args = {"--threads", "2", "--tp", "2", "--tp-timeout-ms", "1", "--stress-delay-us", "20000"};
    args.insert(args.end(), batching.begin(), batching.end());
    Server server(args);
    ASSERT_NE(server.port(), 0);
    const HttpReply reply = post(server.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 4})");
    EXPECT_EQ(reply.status, 500) << reply.body;
    // "rank R of 2: <collective> (slot, epoch) waited N ms for rank P, which is at epoch E: it died or ..."
    EXPECT_NE(reply.body.find(" of 2: "), std::string::npos) << reply.body;
    EXPECT_NE(reply.body.find(": it died or never arrived"), std::string::npos) << reply.body;
    EXPECT_EQ(server.wait_exit(20000), 3) << server.log();
    const std::string log = server.log();
    EXPECT_NE(log.find("the engine stopped after a fault, so the server stops (exit status 3): rank"), std::string::npos) << log;
  }
}

TEST(CliServe, WhatStopsTheServerFromStartingIsNamed) {
  TempDir dir("cli-serve-errors");
  Server first({"--threads", "1"});
  ASSERT_NE(first.port(), 0);
  RunResult taken = run_cli({"serve", "--port", std::to_string(first.port())});
  EXPECT_EQ(taken.status, 2) << describe(taken);
  EXPECT_NE(taken.err.find("--port " + std::to_string(first.port()) + ": cannot listen there"), std::string::npos) << taken.err;
  RunResult chunks_alone = run_cli({"serve", "--prefill-chunks", "2", "--port", "0"});
  EXPECT_EQ(chunks_alone.status, 2) << describe(chunks_alone);
  EXPECT_NE(chunks_alone.err.find("--prefill-chunks applies to continuous batching"), std::string::npos) << chunks_alone.err;
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"serve", "--separate-prefill", "--port", "0"},
                                                 {"serve", "--sequences", "2", "--prefill-chunks", "0", "--separate-prefill"}}) {
    RunResult separate = run_cli(flags);
    EXPECT_EQ(separate.status, 2) << describe(separate);
    EXPECT_NE(separate.err.find("--separate-prefill applies to prompts prefilled by the steps"), std::string::npos) << separate.err;
  }
  RunResult no_sequences = run_cli({"serve", "--sequences", "0", "--port", "0"});
  EXPECT_EQ(no_sequences.status, 2) << describe(no_sequences);
  EXPECT_NE(no_sequences.err.find("--sequences"), std::string::npos) << no_sequences.err;
  RunResult host = run_cli({"serve", "--host", "localhost:80"});
  EXPECT_EQ(host.status, 2) << describe(host);
  EXPECT_NE(host.err.find("--host expects an IPv4 address"), std::string::npos) << host.err;
  const fs::path unread = gen_tiny_model(dir, "tiny-unread");
  write_file_text(unread / "tokenizer.model", "{}");
  RunResult tokenizer = run_cli({"serve", "--model", unread.string(), "--port", "0"});
  EXPECT_EQ(tokenizer.status, 2) << describe(tokenizer);
  EXPECT_NE(tokenizer.err.find("tokenizer.model is this model's tokenizer"), std::string::npos) << tokenizer.err;
}

}  // namespace
}  // namespace tilefire::testing
