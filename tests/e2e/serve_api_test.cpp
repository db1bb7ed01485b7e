// tilefire serve beyond the replies' text: GET /metrics (Prometheus's text format) against what the
// replies' usage says, and the log-probabilities of a reply (OpenAI's completions and chat forms) against
// `tilefire run --logprobs` and the form's own rules; with requests in turn and batched.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/serve_client.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

// Each (path, body) of `refused` is answered 400 with a message holding `named`'s line of the same index.
void expect_refused(uint16_t port, const std::vector<std::pair<std::string, std::string>>& refused,
                    const std::vector<std::string>& named) {
  ASSERT_EQ(refused.size(), named.size());
  for (size_t i = 0; i < refused.size(); ++i) {
    const HttpReply bad = post(port, refused[i].first, refused[i].second);
    EXPECT_EQ(bad.status, 400) << refused[i].second;
    const std::string message = bad.status == 400 ? json::parse(bad.body).at("error").at("message").get<std::string>() : bad.body;
    EXPECT_NE(message.find(named[i]), std::string::npos) << message;
  }
}

// GET /metrics as Prometheus's text format: every line a comment or `name{labels} value`, read into a map
// by `name{labels}`. A line of another form fails the test.
std::map<std::string, double> scrape(uint16_t port) {
  const HttpReply reply = http_exchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_NE(reply.head.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << reply.head;
  std::map<std::string, double> samples;
  std::istringstream lines(reply.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    char* end = nullptr;
    const double value = space == std::string::npos ? 0 : std::strtod(line.c_str() + space + 1, &end);
    EXPECT_TRUE(space != std::string::npos && end && *end == '\0' && std::isfinite(value)) << "not a sample: '" << line << "'";
    if (space != std::string::npos) samples[line.substr(0, space)] = value;
  }
  return samples;
}

// GET /metrics counts what the server did: requests by path and status (a scrape counted once it is
// answered), the prompt and generated tokens of the replies (whole and streamed, as their usage says),
// finish reasons, and one observation per generation in the latency histograms, whose buckets add up.
void metrics_count_what_was_served(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  Server server(args);
  ASSERT_NE(server.port(), 0);
  std::map<std::string, double> m = scrape(server.port());
  EXPECT_EQ(m["tilefire_generation_tokens_total"], 0);
  EXPECT_EQ(m["tilefire_time_to_first_token_seconds_count"], 0);

  HttpReply whole = post(server.port(), "/v1/completions", R"({"prompt": [5, 6, 7], "max_tokens": 7, "temperature": 0})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  HttpReply streamed = post(server.port(), "/v1/completions", R"({"prompt": [9, 10], "max_tokens": 5, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<std::string> data = events(streamed.body);
  ASSERT_GE(data.size(), 2u);
  const json streamed_usage = json::parse(data[data.size() - 2]).at("usage");
  EXPECT_EQ(post(server.port(), "/v1/completions", R"({"prompt": "x", "n": 0})").status, 400);
  EXPECT_EQ(http_exchange(server.port(), "GET /v1/models HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_EQ(http_exchange(server.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").status, 405);
  EXPECT_EQ(post(server.port(), "/v1/responses", R"({"input": "x"})").status, 400);  // the sample has no chat template
  EXPECT_EQ(http_exchange(server.port(), "GET /v1/models/tiny HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_EQ(http_exchange(server.port(), "GET /v1/models/gpt-4 HTTP/1.1\r\n\r\n").status, 404);
  EXPECT_EQ(post(server.port(), "/tokenize", R"({"prompt": "x"})").status, 200);

  m = scrape(server.port());
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/v1/completions\",status=\"200\"}"], 2);
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/v1/completions\",status=\"400\"}"], 1);
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/v1/models\",status=\"200\"}"], 1);
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/metrics\",status=\"200\"}"], 1);
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/metrics\",status=\"405\"}"], 1);
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/v1/responses\",status=\"400\"}"], 1);
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/v1/models/{model}\",status=\"200\"}"], 1);  // one label for every name asked
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/v1/models/{model}\",status=\"404\"}"], 1);
  EXPECT_EQ(m["tilefire_http_requests_total{path=\"/tokenize\",status=\"200\"}"], 1);
  const json whole_usage = json::parse(whole.body).at("usage");
  EXPECT_EQ(m["tilefire_prompt_tokens_total"], whole_usage.at("prompt_tokens").get<double>() + streamed_usage.at("prompt_tokens").get<double>());
  // The streamed request samples with a seed of the server's choosing, so it may meet the end-of-text token
  // before max_tokens: the counters are held to what the replies themselves say.
  const json whole_reply = json::parse(whole.body);
  const json streamed_last = json::parse(data[data.size() - 2]);
  EXPECT_EQ(m["tilefire_generation_tokens_total"],
            whole_usage.at("completion_tokens").get<double>() + streamed_usage.at("completion_tokens").get<double>());
  EXPECT_GE(m["tilefire_generation_tokens_total"], 8) << "7 greedy tokens of the whole reply, at least one streamed";
  double length_replies = 0;
  for (const json& reply : {whole_reply, streamed_last})
    for (const json& choice : reply.at("choices"))
      if (choice.contains("finish_reason") && choice.at("finish_reason") == "length") ++length_replies;
  EXPECT_EQ(m["tilefire_generations_finished_total{reason=\"length\"}"], length_replies);
  EXPECT_EQ(m["tilefire_generations_finished_total{reason=\"length\"}"] + m["tilefire_generations_finished_total{reason=\"eos\"}"], 2);
  EXPECT_EQ(m["tilefire_generations_in_flight"], 0);
  ASSERT_EQ(m.count("tilefire_draft_tokens_total"), 1u) << "the metric is written";
  EXPECT_EQ(m["tilefire_draft_tokens_total"], 0) << "nothing speculated without --speculate";
  for (const std::string name : {"tilefire_time_to_first_token_seconds", "tilefire_time_per_output_token_seconds",
                                 "tilefire_generation_request_seconds"}) {
    const double count = name == "tilefire_generation_request_seconds" ? 4 : 2;  // the refused requests too
    EXPECT_EQ(m[name + "_count"], count) << name;
    EXPECT_EQ(m[name + "_bucket{le=\"+Inf\"}"], count) << name;
    EXPECT_GT(m[name + "_sum"], 0) << name;
    std::vector<std::pair<double, double>> buckets;  // (upper bound, observations at or below it)
    const std::string prefix = name + "_bucket{le=\"";
    for (const auto& [key, value] : m)
      if (key.rfind(prefix, 0) == 0) buckets.emplace_back(std::strtod(key.c_str() + prefix.size(), nullptr), value);
    std::sort(buckets.begin(), buckets.end());  // "+Inf" reads as infinity: last
    ASSERT_GE(buckets.size(), 2u) << name;
    for (size_t b = 1; b < buckets.size(); ++b) EXPECT_LE(buckets[b - 1].second, buckets[b].second) << name << " le " << buckets[b].first;
    EXPECT_EQ(m.count(name + "_bucket{le=\"0.0025\"}"), 1u) << name << ": a bound written shortest";
  }
}

TEST(ServeApi, MetricsCountWhatWasServed) { metrics_count_what_was_served({}); }
TEST(ServeApi, MetricsCountWhatWasServedInBatches) { metrics_count_what_was_served({"--sequences", "2"}); }

// OpenAI's stream_options.include_usage: every chunk's "usage" null, then, before [DONE], one chunk of the
// usage alone with no choices, the same usage a whole reply gives; a completion of two choices and a chat.
// Without it the last choice's chunk carries the usage. Refused: stream_options without a stream, a
// non-boolean include_usage, vLLM's continuous_usage_stats, an option of another name.
TEST(ServeApi, StreamOptionsIncludeUsageEndsWithTheUsageAlone) {
  TextModelServer served("serve-stream-usage", {});
  Server& server = served.server;
  ASSERT_NE(server.port(), 0);
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completion");
    json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "hello"}}}}} : json{{"prompt", "hello"}, {"n", 2}};
    body["max_tokens"] = 5;
    body["temperature"] = 0;
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    const HttpReply whole = post(server.port(), path, body.dump());
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const HttpReply streamed = post(server.port(), path, body.dump());
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const std::vector<std::string> data = events(streamed.body);
    ASSERT_GE(data.size(), 3u);
    EXPECT_EQ(data.back(), "[DONE]");
    for (size_t e = 0; e + 2 < data.size(); ++e) {
      const json event = json::parse(data[e]);
      ASSERT_TRUE(event.contains("usage")) << data[e];
      EXPECT_TRUE(event.at("usage").is_null()) << data[e];
      EXPECT_EQ(event.at("choices").size(), 1u) << data[e];
    }
    const json last = json::parse(data[data.size() - 2]);
    EXPECT_TRUE(last.at("choices").empty()) << data[data.size() - 2];
    for (const char* count : {"prompt_tokens", "completion_tokens", "total_tokens"})
      EXPECT_EQ(last.at("usage").at(count), json::parse(whole.body).at("usage").at(count)) << count;
  }
  const HttpReply plain = post(server.port(), "/v1/completions", R"({"prompt": "hello", "max_tokens": 5, "temperature": 0, "stream": true})");
  const std::vector<std::string> data = events(plain.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_TRUE(json::parse(data[data.size() - 2]).at("usage").is_object()) << "without stream_options the last chunk carries it";
  for (size_t e = 0; e + 2 < data.size(); ++e) EXPECT_FALSE(json::parse(data[e]).contains("usage")) << data[e];
  expect_refused(server.port(),
                 {{"/v1/completions", R"({"prompt": "x", "stream_options": {"include_usage": true}})"},
                  {"/v1/completions", R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})"},
                  {"/v1/completions", R"({"prompt": "x", "stream": true, "stream_options": {"continuous_usage_stats": true}})"},
                  {"/v1/completions", R"({"prompt": "x", "stream": true, "stream_options": {"include_cost": true}})"},
                  {"/v1/completions", R"({"prompt": "x", "stream": true, "stream_options": [1]})"}},
                 {"'stream_options' applies to a streamed reply", "'stream_options.include_usage' must be true or false",
                  "usage in every chunk is not built", "'stream_options.include_cost' is not an option", "'stream_options' must be an object"});
  const HttpReply neutral = post(server.port(), "/v1/completions",
                                 R"({"prompt": "x", "max_tokens": 1, "stream": true, "stream_options": {"continuous_usage_stats": false}})");
  EXPECT_EQ(neutral.status, 200) << neutral.body;
}

// usage.prompt_tokens_details.cached_tokens (OpenAI's) and /metrics count the prompt tokens not prefilled:
// a request that begins with the last one's prompt finds it in the cache, requests in turn or batched;
// batched, the second of two choices of one prompt copies it from the first's slot (the usage counts the
// prompt once, as prefilled by one of them).
void cached_tokens_are_the_prompt_not_prefilled(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  Server server(args);
  ASSERT_NE(server.port(), 0);
  auto cached_tokens = [](const HttpReply& reply) {
    EXPECT_EQ(reply.status, 200) << reply.body;
    return json::parse(reply.body).at("usage").at("prompt_tokens_details").at("cached_tokens").get<int>();
  };
  EXPECT_EQ(cached_tokens(post(server.port(), "/v1/completions", R"({"prompt": [5, 6, 7, 8], "max_tokens": 2, "temperature": 0})")), 0);
  EXPECT_EQ(cached_tokens(post(server.port(), "/v1/completions", R"({"prompt": [5, 6, 7, 8, 9], "max_tokens": 2, "temperature": 0})")), 4);
  EXPECT_EQ(scrape(server.port())["tilefire_reused_prompt_tokens_total"], 4);
  const bool batched = !extra.empty();
  if (!batched) return;
  EXPECT_EQ(cached_tokens(post(server.port(), "/v1/completions", R"({"prompt": [20, 21, 22, 23, 24, 25], "max_tokens": 2, "n": 2})")), 0);
  EXPECT_EQ(scrape(server.port())["tilefire_reused_prompt_tokens_total"], 4 + 5) << "the second choice copied all but the last token";
}

TEST(ServeApi, CachedTokensAreThePromptNotPrefilled) { cached_tokens_are_the_prompt_not_prefilled({}); }
TEST(ServeApi, BatchedCachedTokensAreThePromptNotPrefilled) { cached_tokens_are_the_prompt_not_prefilled({"--sequences", "2"}); }

// serve --speculate: every request in turn speculates; the replies are run's without it (whole and
// streamed), and /metrics counts the drafted and accepted tokens. By prompt lookup and by a draft model
// (the built-in sample's own checkpoint, which agrees with its every draft); with --sequences, by prompt
// lookup in the batched steps (a draft model refused there).
void speculating_replies_are_runs_replies(const std::vector<std::string>& speculation) {
  std::vector<std::string> args = {"--threads", "1"};
  args.insert(args.end(), speculation.begin(), speculation.end());
  Server server(args);
  ASSERT_NE(server.port(), 0);
  const json expected = run_json({"--max-new-tokens", "40", "--threads", "1"});  // "Once upon a time"
  for (bool stream : {false, true}) {
    const json request = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stream", stream}};
    const HttpReply reply = post(server.port(), "/v1/completions", request.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    std::string text;
    if (stream) {
      const std::vector<std::string> data = events(reply.body);
      for (size_t i = 0; i + 1 < data.size(); ++i) text += json::parse(data[i]).at("choices")[0].at("text").get<std::string>();
    } else {
      text = json::parse(reply.body).at("choices")[0].at("text").get<std::string>();
    }
    EXPECT_EQ(text, expected.at("text")) << (stream ? "streamed" : "whole");
  }
  std::map<std::string, double> m = scrape(server.port());
  EXPECT_GT(m["tilefire_accepted_draft_tokens_total"], 0);
  EXPECT_LE(m["tilefire_accepted_draft_tokens_total"], m["tilefire_draft_tokens_total"]);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(ServeApi, SpeculatingRepliesAreRunsRepliesAndTheirDraftsAreCounted) {
  speculating_replies_are_runs_replies({"--speculate", "6"});
  TempDir dir("serve-draft-model");
  speculating_replies_are_runs_replies({"--speculate", "3", "--draft-model", gen_tiny_model(dir, "sample").string()});
  speculating_replies_are_runs_replies({"--speculate", "4", "--sequences", "2"});
  const RunResult batched =
      run_cli({"serve", "--speculate", "4", "--draft-model", gen_tiny_model(dir, "sample").string(), "--sequences", "2", "--port", "0"});
  EXPECT_EQ(batched.status, 2) << describe(batched);
  EXPECT_NE(batched.err.find("--draft-model drafts for requests served in turn"), std::string::npos) << batched.err;
}

// A reply's logprobs: one entry per generated token; greedy, so the sampled token is the most probable
// and its log-probability is that of `run --logprobs`'s first alternative (the same model, prompt and
// settings); the alternatives as many as asked, most probable first, the sampled one among a completion's.
// What cannot be given is refused naming the field.
void logprobs_are_runs(const std::vector<std::string>& extra) {
  TextModelServer served("serve-logprobs", extra);
  Server& server = served.server;
  const std::filesystem::path& model = served.model;
  ASSERT_NE(server.port(), 0);
  const json run = run_json({"--model", model.string(), "--prompt", "hello hello", "--max-new-tokens", "6", "--threads", "1",
                             "--logprobs", "2"});
  const std::vector<json> run_positions = run.at("logprobs").get<std::vector<json>>();

  HttpReply reply = post(server.port(), "/v1/completions",
                         R"({"prompt": "hello hello", "max_tokens": 6, "temperature": 0, "logprobs": 2})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json choice = json::parse(reply.body).at("choices")[0];
  EXPECT_EQ(choice.at("text"), run.at("text"));
  const json& logprobs = choice.at("logprobs");
  const size_t tokens = json::parse(reply.body).at("usage").at("completion_tokens").get<size_t>();
  ASSERT_EQ(tokens, run_positions.size());
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) ASSERT_EQ(logprobs.at(key).size(), tokens) << key;
  size_t previous_offset = 0;
  for (size_t i = 0; i < tokens; ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const double logprob = logprobs.at("token_logprobs")[i].get<double>();
    EXPECT_NEAR(logprob, std::log(run_positions[i][0][1].get<double>()), 1e-5);
    const json& top = logprobs.at("top_logprobs")[i];
    EXPECT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 2u) << top.dump();  // greedy: the sampled token is one of the two most probable
    EXPECT_EQ(top.at(logprobs.at("tokens")[i].get<std::string>()), logprobs.at("token_logprobs")[i]);
    for (const auto& [text, value] : top.items()) EXPECT_LE(value.get<double>(), logprob + 1e-6) << text;
    EXPECT_GE(logprobs.at("text_offset")[i].get<size_t>(), previous_offset);
    previous_offset = logprobs.at("text_offset")[i].get<size_t>();
  }
  EXPECT_EQ(logprobs.at("text_offset")[0], 0);

  reply = post(server.port(), "/v1/chat/completions",
               R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0, "logprobs": true, "top_logprobs": 3})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json chat = json::parse(reply.body);
  const json& content = chat.at("choices")[0].at("logprobs").at("content");
  ASSERT_EQ(content.size(), chat.at("usage").at("completion_tokens").get<size_t>());
  for (const json& item : content) {
    const std::string token = item.at("token").get<std::string>();
    EXPECT_EQ(item.at("bytes").size(), token.size()) << item.dump();
    for (size_t b = 0; b < token.size(); ++b) EXPECT_EQ(item.at("bytes")[b].get<int>(), int(static_cast<unsigned char>(token[b])));
    const json& top = item.at("top_logprobs");
    ASSERT_EQ(top.size(), 3u) << item.dump();
    EXPECT_EQ(top[0].at("logprob"), item.at("logprob")) << "greedy: the sampled token is the most probable";
    for (size_t k = 1; k < top.size(); ++k) EXPECT_LE(top[k].at("logprob").get<double>(), top[k - 1].at("logprob").get<double>());
  }

  const std::vector<std::pair<std::string, std::string>> refused = {
      {"/v1/completions", R"({"prompt": "x", "logprobs": 21})"},
      {"/v1/completions", R"({"prompt": "x", "top_logprobs": 2})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})"}};
  const std::vector<std::string> named = {"'logprobs' must be a whole number from 0 to 20",
                                          "'top_logprobs' is a field of /v1/chat/completions", "'top_logprobs' needs \"logprobs\": true",
                                          "'logprobs' must be true or false"};
  expect_refused(server.port(), refused, named);
}

TEST(ServeApi, LogprobsAreRunsLogprobs) { logprobs_are_runs({}); }
TEST(ServeApi, BatchedLogprobsAreRunsLogprobs) { logprobs_are_runs({"--sequences", "2"}); }

// A streamed reply's logprobs, read in order, are the whole reply's (same request, greedy): each chunk's
// entries those of the tokens since the chunk before, a completion's text_offset counting on across
// chunks; a chunk's text never comes before its tokens' entries; with a stop string, the entries of the tokens
// whose text it held back come in the last chunk, as many as usage.completion_tokens in all.
void streamed_logprobs_are_the_whole_replys(const std::vector<std::string>& extra) {
  TextModelServer served("serve-stream-logprobs", extra);
  Server& server = served.server;
  ASSERT_NE(server.port(), 0);
  // A stop string from the middle of the reply: tokens after it are generated but their text never shown.
  const HttpReply plain = post(server.port(), "/v1/completions", R"({"prompt": "hello hello", "max_tokens": 8, "temperature": 0})");
  ASSERT_EQ(plain.status, 200) << plain.body;
  const std::string text = json::parse(plain.body).at("choices")[0].at("text").get<std::string>();
  ASSERT_GE(text.size(), 4u) << text;
  size_t middle = text.size() / 2;  // the whole character that begins there or after
  while (middle < text.size() && (static_cast<unsigned char>(text[middle]) & 0xC0) == 0x80) ++middle;
  size_t end = middle + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  ASSERT_LT(middle, text.size()) << text;
  const json stop = text.substr(middle, end - middle);

  for (const bool chat : {false, true}) {
    for (const bool with_stop : {false, true}) {
      SCOPED_TRACE(std::string(chat ? "chat" : "completion") + (with_stop ? ", with a stop string" : ""));
      json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "hello hello"}}}}, {"logprobs", true}, {"top_logprobs", 2}}
                       : json{{"prompt", "hello hello"}, {"logprobs", 2}};
      body["max_tokens"] = 8;
      body["temperature"] = 0;
      if (with_stop) body["stop"] = stop;
      const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
      const HttpReply whole = post(server.port(), path, body.dump());
      ASSERT_EQ(whole.status, 200) << whole.body;
      const json whole_choice = json::parse(whole.body).at("choices")[0];
      const json& expected = whole_choice.at("logprobs");
      body["stream"] = true;
      const HttpReply streamed = post(server.port(), path, body.dump());
      ASSERT_EQ(streamed.status, 200) << streamed.body;
      const std::vector<std::string> data = events(streamed.body);
      ASSERT_GE(data.size(), 2u);
      ASSERT_EQ(data.back(), "[DONE]");
      json joined = chat ? json{{"content", json::array()}}
                         : json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
      std::string shown, tokens_text;
      size_t completion_tokens = 0;
      for (size_t e = 0; e + 1 < data.size(); ++e) {
        const json event = json::parse(data[e]);
        const json& choice = event.at("choices")[0];
        const std::string piece = chat ? choice.at("delta").value("content", "") : choice.at("text").get<std::string>();
        shown += piece;
        if (event.contains("usage")) completion_tokens = event.at("usage").at("completion_tokens").get<size_t>();
        if (!piece.empty() && choice.at("finish_reason").is_null()) {  // a piece comes with its tokens' entries
          EXPECT_FALSE(choice.at("logprobs").is_null()) << "a chunk's text without its entries: " << data[e];
        }
        if (choice.at("logprobs").is_null()) continue;
        for (const auto& [key, values] : choice.at("logprobs").items())
          for (const json& value : values) {
            joined[key].push_back(value);
            if (key == "tokens" || key == "content") tokens_text += key == "tokens" ? value.get<std::string>() : value.at("token").get<std::string>();
          }
      }
      EXPECT_EQ(joined, expected) << "streamed: " << streamed.body;
      const size_t listed = chat ? joined.at("content").size() : joined.at("tokens").size();
      EXPECT_EQ(listed, completion_tokens);
      EXPECT_EQ(shown, chat ? whole_choice.at("message").at("content").get<std::string>() : whole_choice.at("text").get<std::string>());
      if (with_stop) {
        EXPECT_LT(shown.size(), tokens_text.size()) << "the stop string cut text whose entries are listed";
      }
    }
  }
}

TEST(ServeApi, StreamedLogprobsAreTheWholeReplys) { streamed_logprobs_are_the_whole_replys({}); }
TEST(ServeApi, BatchedStreamedLogprobsAreTheWholeReplys) { streamed_logprobs_are_the_whole_replys({"--sequences", "2"}); }

// --api-key (or TILEFIRE_API_KEY): the /v1/ paths answer 401 without the key, or with another, and as
// usual with it; /health and /metrics stay open for probes and scrapers.
// A request's logit_bias, penalties and min_p choose as `tilefire run`'s flags do (the same engine
// settings reached by another path), greedy; a bias of 100 takes that token every time.
TEST(ServeApi, LogitBiasAndPenaltiesAreRunsFlags) {
  Server server({"--threads", "1"});
  ASSERT_NE(server.port(), 0);
  auto served = [&](const std::string& fields) {
    const HttpReply reply = post(server.port(), "/v1/completions",
                                 R"({"prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0, )" + fields + "}");
    EXPECT_EQ(reply.status, 200) << fields << "\n" << reply.body;
    return reply.status == 200 ? json::parse(reply.body).at("choices")[0].at("text") : json();
  };
  auto run = [](std::vector<std::string> flags) {
    for (const char* flag : {"--prompt-tokens", "1,2,3", "--max-new-tokens", "5", "--threads", "1"}) flags.push_back(flag);
    return run_json(flags).at("text");
  };
  EXPECT_EQ(served(R"("logit_bias": {"77": 100})"), json(std::string(5, char(77))));
  EXPECT_EQ(served(R"("logit_bias": {"77": 4, "80": -100}, "presence_penalty": -1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.4)"),
            run({"--logit-bias", "77=4,80=-100", "--presence-penalty", "-1.5", "--frequency-penalty", "0.5", "--repetition-penalty", "1.4"}));
  EXPECT_EQ(served(R"("temperature": 0.9, "min_p": 1, "seed": 5)"), served("\"seed\": 5")) << "min_p 1 keeps only the most probable";
}

// A completion's "echo" with max_tokens 0 and logprobs, as evaluation harnesses score a text: the reply's
// text is the prompt as the model read it, its logprobs one entry per prompt token, the first null and the others
// `run --prompt-logprobs`'s; with tokens generated, the text and entries go on with the reply's. Echo
// without logprobs, or with max_tokens 0 alone, runs nothing that needs it. Streamed, the prompt's text
// (and entries) come first and the chunks add up to the whole reply. Refused on the chat endpoint.
void echo_scores_the_prompt(const std::vector<std::string>& extra) {
  TextModelServer served("serve-echo", extra);
  Server& server = served.server;
  const std::filesystem::path& model = served.model;
  ASSERT_NE(server.port(), 0);
  const json run = run_json({"--model", model.string(), "--prompt", "hello there", "--max-new-tokens", "0", "--threads", "1",
                             "--prompt-logprobs", "1"});
  const json& expected = run.at("prompt_token_logprobs");
  ASSERT_GE(expected.size(), 3u) << run.dump();

  HttpReply reply = post(server.port(), "/v1/completions",
                         R"({"prompt": "hello there", "max_tokens": 0, "echo": true, "logprobs": 1, "temperature": 0})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  json choice = json::parse(reply.body).at("choices")[0];
  json logprobs = choice.at("logprobs");
  // The echoed text is the prompt's tokens' texts (a start token written out), as text_offset counts them.
  std::string echoed;
  for (size_t i = 0; i < logprobs.at("tokens").size(); ++i) {
    size_t characters = 0;
    for (unsigned char byte : echoed) characters += (byte & 0xC0) != 0x80 ? 1 : 0;
    EXPECT_EQ(logprobs.at("text_offset")[i].get<size_t>(), characters) << "prompt token " << i;
    echoed += logprobs.at("tokens")[i].get<std::string>();
  }
  EXPECT_EQ(choice.at("text"), echoed);
  ASSERT_GE(echoed.size(), 11u);
  EXPECT_EQ(echoed.substr(echoed.size() - 11), "hello there") << echoed;
  ASSERT_EQ(logprobs.at("token_logprobs").size(), expected.size()) << reply.body;
  EXPECT_TRUE(logprobs.at("token_logprobs")[0].is_null());
  EXPECT_TRUE(logprobs.at("top_logprobs")[0].is_null());
  for (size_t i = 1; i < expected.size(); ++i) {
    EXPECT_NEAR(logprobs.at("token_logprobs")[i].get<double>(), expected[i].get<double>(), 1e-5) << "prompt token " << i;
    EXPECT_LE(logprobs.at("top_logprobs")[i].size(), 2u) << "the most probable and the prompt's own";
  }
  for (const char* key : {"tokens", "top_logprobs", "text_offset"}) EXPECT_EQ(logprobs.at(key).size(), expected.size()) << key;

  // With tokens generated: the prompt's entries, then the reply's, as the reply without echo gives them.
  const std::string ask = R"({"prompt": "hello there", "max_tokens": 4, "logprobs": 1, "temperature": 0)";
  const HttpReply plain = post(server.port(), "/v1/completions", ask + "}");
  reply = post(server.port(), "/v1/completions", ask + R"(, "echo": true})");
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json plain_choice = json::parse(plain.body).at("choices")[0];
  choice = json::parse(reply.body).at("choices")[0];
  EXPECT_EQ(choice.at("text"), echoed + plain_choice.at("text").get<std::string>());
  logprobs = choice.at("logprobs");
  const json& generated = plain_choice.at("logprobs").at("token_logprobs");
  ASSERT_EQ(logprobs.at("token_logprobs").size(), expected.size() + generated.size());
  for (size_t i = 0; i < generated.size(); ++i)
    EXPECT_EQ(logprobs.at("token_logprobs")[expected.size() + i], generated[i]) << "generated token " << i;
  for (const char* count : {"prompt_tokens", "completion_tokens", "total_tokens"})
    EXPECT_EQ(json::parse(reply.body).at("usage").at(count), json::parse(plain.body).at("usage").at(count)) << count;

  reply = post(server.port(), "/v1/completions", R"({"prompt": "hello there", "max_tokens": 0, "echo": true})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(json::parse(reply.body).at("choices")[0].at("text"), echoed);
  EXPECT_TRUE(json::parse(reply.body).at("choices")[0].at("logprobs").is_null());
  reply = post(server.port(), "/v1/completions", R"({"prompt": [5, 6], "max_tokens": 0})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(json::parse(reply.body).at("usage").at("completion_tokens"), 0);

  // Streamed: the prompt's text (and entries) first, then the reply's; the chunks add up to the whole reply,
  // text and entries, with logprobs and without, and with nothing generated.
  for (const std::string& body : {ask + R"(, "echo": true})", std::string(R"({"prompt": "hello there", "max_tokens": 4, "temperature": 0, "echo": true})"),
                                  std::string(R"({"prompt": "hello there", "max_tokens": 0, "logprobs": 1, "echo": true})")}) {
    SCOPED_TRACE(body);
    const HttpReply whole = post(server.port(), "/v1/completions", body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    const json whole_choice = json::parse(whole.body).at("choices")[0];
    json streamed_body = json::parse(body);
    streamed_body["stream"] = true;
    const HttpReply streamed = post(server.port(), "/v1/completions", streamed_body.dump());
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const std::vector<std::string> data = events(streamed.body);
    ASSERT_GE(data.size(), 2u);
    EXPECT_EQ(data.back(), "[DONE]");
    std::string text, first_piece;
    json token_logprobs = json::array();
    for (size_t e = 0; e + 1 < data.size(); ++e) {
      const json event = json::parse(data[e]);
      const json& c = event.at("choices")[0];
      if (e == 0) first_piece = c.at("text").get<std::string>();
      text += c.at("text").get<std::string>();
      if (!c.at("logprobs").is_null())
        for (const json& value : c.at("logprobs").at("token_logprobs")) token_logprobs.push_back(value);
    }
    EXPECT_EQ(first_piece, echoed) << "the first chunk is the prompt's text";
    EXPECT_EQ(text, whole_choice.at("text"));
    if (whole_choice.at("logprobs").is_null())
      EXPECT_TRUE(token_logprobs.empty());
    else
      EXPECT_EQ(token_logprobs, whole_choice.at("logprobs").at("token_logprobs"));
  }
  // A prompt without text (ids past the tokenizer's, within the model's vocabulary): its echo sends no empty
  // chunk; its entries go out with the first text. Only the chunk with the finish reason may be empty.
  const HttpReply textless = post(server.port(), "/v1/completions",
                                  R"({"prompt": [300, 301], "max_tokens": 3, "logprobs": 1, "echo": true, "temperature": 0, "stream": true})");
  ASSERT_EQ(textless.status, 200) << textless.body;
  for (const std::string& data : events(textless.body)) {
    if (data == "[DONE]") continue;
    const json event = json::parse(data);
    const json& c = event.at("choices")[0];
    if (c.at("finish_reason").is_null()) {
      EXPECT_FALSE(c.at("text").get<std::string>().empty()) << data;
    }
  }

  const std::vector<std::pair<std::string, std::string>> refused = {
      {"/v1/completions", R"({"prompt": "x", "echo": 1})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "echo": true})"}};
  const std::vector<std::string> named = {"'echo' must be true or false", "'echo' is a field of /v1/completions"};
  expect_refused(server.port(), refused, named);
}

TEST(ServeApi, EchoScoresThePrompt) { echo_scores_the_prompt({}); }
TEST(ServeApi, BatchedEchoScoresThePrompt) { echo_scores_the_prompt({"--sequences", "2", "--prefill-chunk", "4"}); }

// "n" choices: choice i is the reply a request of one choice with seed + i gets (the same sample), each
// with its index; the usage counts the prompt once and every choice's tokens. Streamed, each choice's
// chunks carry its index and add up to that choice's text and logprobs, every choice ends with its own
// finish reason, the last chunk carries the usage.
void choices_are_samples_of_their_own(const std::vector<std::string>& extra) {
  TextModelServer served("serve-choices", extra);
  Server& server = served.server;
  ASSERT_NE(server.port(), 0);
  const std::string ask = R"({"prompt": "hello", "max_tokens": 6, "temperature": 1.3, "logprobs": 1, )";
  std::vector<json> alone;
  for (int seed : {5, 6, 7}) {
    const HttpReply reply = post(server.port(), "/v1/completions", ask + R"("seed": )" + std::to_string(seed) + "}");
    ASSERT_EQ(reply.status, 200) << reply.body;
    alone.push_back(json::parse(reply.body));
  }
  HttpReply reply = post(server.port(), "/v1/completions", ask + R"("seed": 5, "n": 3})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json three = json::parse(reply.body);
  ASSERT_EQ(three.at("choices").size(), 3u) << reply.body;
  size_t completion_tokens = 0;
  for (size_t i = 0; i < 3; ++i) {
    const json& c = three.at("choices")[i];
    EXPECT_EQ(c.at("index"), i);
    EXPECT_EQ(c.at("text"), alone[i].at("choices")[0].at("text")) << "choice " << i;
    EXPECT_EQ(c.at("logprobs"), alone[i].at("choices")[0].at("logprobs")) << "choice " << i;
    completion_tokens += alone[i].at("usage").at("completion_tokens").get<size_t>();
  }
  EXPECT_EQ(three.at("usage").at("prompt_tokens"), alone[0].at("usage").at("prompt_tokens"));
  EXPECT_EQ(three.at("usage").at("completion_tokens"), completion_tokens);
  EXPECT_NE(alone[0].at("choices")[0].at("text"), alone[1].at("choices")[0].at("text")) << "the seeds should differ in a sample";

  reply = post(server.port(), "/v1/completions", ask + R"("seed": 5, "n": 3, "stream": true})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const std::vector<std::string> data = events(reply.body);
  ASSERT_FALSE(data.empty());
  EXPECT_EQ(data.back(), "[DONE]");
  std::vector<std::string> texts(3);
  std::vector<json> token_logprobs(3, json::array());
  std::vector<json> finish(3);
  json streamed_usage;
  for (size_t e = 0; e + 1 < data.size(); ++e) {
    const json event = json::parse(data[e]);
    const json& c = event.at("choices")[0];
    const size_t i = c.at("index").get<size_t>();
    ASSERT_LT(i, 3u);
    EXPECT_TRUE(finish[i].is_null()) << "a chunk of choice " << i << " after its end";
    texts[i] += c.at("text").get<std::string>();
    if (!c.at("logprobs").is_null())
      for (const json& value : c.at("logprobs").at("token_logprobs")) token_logprobs[i].push_back(value);
    finish[i] = c.at("finish_reason");
    if (event.contains("usage")) streamed_usage = event.at("usage");
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(texts[i], three.at("choices")[i].at("text")) << "choice " << i;
    EXPECT_EQ(token_logprobs[i], three.at("choices")[i].at("logprobs").at("token_logprobs")) << "choice " << i;
    EXPECT_EQ(finish[i], three.at("choices")[i].at("finish_reason")) << "choice " << i;
  }
  for (const char* count : {"prompt_tokens", "completion_tokens", "total_tokens"})
    EXPECT_EQ(streamed_usage.at(count), three.at("usage").at(count)) << count;
  expect_refused(server.port(), {{"/v1/completions", R"({"prompt": "x", "n": 65})"}, {"/v1/completions", R"({"prompt": "x", "n": 1.5})"}},
                 {"'n' must be a whole number from 1 to 64", "'n' must be a whole number from 1 to 64"});
}

TEST(ServeApi, ChoicesAreSamplesOfTheirOwn) { choices_are_samples_of_their_own({}); }
TEST(ServeApi, BatchedChoicesAreSamplesOfTheirOwn) { choices_are_samples_of_their_own({"--sequences", "2"}); }

// vLLM's min_tokens: a stop token the reply would take first waits until that many tokens are out; a
// minimum above max_tokens is refused.
TEST(ServeApi, MinTokensHoldsBackTheStopTokens) {
  Server server({"--threads", "1"});
  ASSERT_NE(server.port(), 0);
  const json run = run_json({"--prompt-tokens", "12,40,7,99", "--max-new-tokens", "6", "--threads", "1"});
  const int32_t first = run.at("tokens")[0].get<int32_t>();
  const std::string ask = R"({"prompt": [12, 40, 7, 99], "max_tokens": 6, "temperature": 0, "stop_token_ids": [)" + std::to_string(first) + "]";
  HttpReply reply = post(server.port(), "/v1/completions", ask + "}");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(json::parse(reply.body).at("usage").at("completion_tokens"), 1) << "the stop token comes first";
  reply = post(server.port(), "/v1/completions", ask + R"(, "min_tokens": 3})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_GE(json::parse(reply.body).at("usage").at("completion_tokens").get<int>(), 3) << reply.body;
  expect_refused(server.port(), {{"/v1/completions", R"({"prompt": "x", "max_tokens": 3, "min_tokens": 5})"}},
                 {"'min_tokens' is 5, more than max_tokens (3)"});
}

// vLLM's min_tokens and stop strings: a stop string ends the reply only where it ends in the text of token
// min_tokens or later. The reference: the reply without stop strings, its tokens' texts (its logprobs'
// "tokens"), and the first occurrence of the stop string whose last character lies in a token at least
// min_tokens-th. The sample loops "<374><314><348><463><384>e": "<314>" is token 2's text, "4><3" ends in it.
TEST(ServeApi, MinTokensHoldsBackTheStopStrings) {
  Server server({"--threads", "1"});
  ASSERT_NE(server.port(), 0);
  const json ask = {{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}};
  json plain = ask;
  plain["logprobs"] = 0;
  const HttpReply whole = post(server.port(), "/v1/completions", plain.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json whole_body = json::parse(whole.body);
  const json& choice = whole_body.at("choices")[0];
  const std::string text = choice.at("text").get<std::string>();
  std::vector<size_t> token_end;  // the end of each token's text in `text`
  for (const json& token : choice.at("logprobs").at("tokens")) token_end.push_back((token_end.empty() ? 0 : token_end.back()) + token.get<std::string>().size());
  ASSERT_EQ(token_end.back(), text.size());
  for (const std::string stop : {"<314>", "4><3"})
    for (uint32_t min_tokens : {0u, 2u, 3u}) {
      SCOPED_TRACE("stop \"" + stop + "\", min_tokens " + std::to_string(min_tokens));
      std::string expected = text;
      for (size_t at = text.find(stop); at != std::string::npos; at = text.find(stop, at + 1)) {
        const size_t token = size_t(std::upper_bound(token_end.begin(), token_end.end(), at + stop.size() - 1) - token_end.begin()) + 1;
        if (token >= min_tokens) {
          expected = text.substr(0, at);
          break;
        }
      }
      ASSERT_NE(expected, text) << "the stop string never counts: the test checks nothing";
      for (bool stream : {false, true}) {
        json body = ask;
        body["stop"] = stop;
        body["min_tokens"] = min_tokens;
        body["stream"] = stream;
        const HttpReply reply = post(server.port(), "/v1/completions", body.dump());
        ASSERT_EQ(reply.status, 200) << reply.body;
        std::string got, finish;
        if (stream) {
          const std::vector<std::string> data = events(reply.body);
          for (size_t e = 0; e + 1 < data.size(); ++e) {
            const json event = json::parse(data[e]);
            const json& c = event.at("choices")[0];
            got += c.at("text").get<std::string>();
            if (!c.at("finish_reason").is_null()) finish = c.at("finish_reason").get<std::string>();
          }
        } else {
          const json reply_body = json::parse(reply.body);
          const json& c = reply_body.at("choices")[0];
          got = c.at("text").get<std::string>();
          finish = c.at("finish_reason").get<std::string>();
        }
        EXPECT_EQ(got, expected) << (stream ? "streamed" : "whole");
        EXPECT_EQ(finish, "stop") << (stream ? "streamed" : "whole");
      }
    }
}

// A list of prompts (strings or lists of ids): each prompt's choices in turn, choice prompt * n + j being
// what that prompt alone gets with seed + j, echo and logprobs per prompt; the usage counts each prompt
// once. More than 64 choices in all is refused.
void prompts_each_get_their_choices(const std::vector<std::string>& extra) {
  TextModelServer served("serve-prompts", extra);
  Server& server = served.server;
  ASSERT_NE(server.port(), 0);
  const std::string settings = R"("max_tokens": 5, "temperature": 1.1, "logprobs": 1, "echo": true)";
  std::vector<json> alone;
  for (const char* prompt : {R"("hello")", R"([5, 6, 7])"})
    for (int seed : {3, 4}) {
      const HttpReply reply = post(server.port(), "/v1/completions", std::string(R"({"prompt": )") + prompt + ", " + settings +
                                                                         R"(, "seed": )" + std::to_string(seed) + "}");
      ASSERT_EQ(reply.status, 200) << reply.body;
      alone.push_back(json::parse(reply.body));
    }
  const HttpReply reply = post(server.port(), "/v1/completions", R"({"prompt": ["hello", [5, 6, 7]], "n": 2, "seed": 3, )" + settings + "}");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json both = json::parse(reply.body);
  ASSERT_EQ(both.at("choices").size(), 4u) << reply.body;
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_EQ(both.at("choices")[c].at("index"), c);
    EXPECT_EQ(both.at("choices")[c].at("text"), alone[c].at("choices")[0].at("text")) << "choice " << c;
    EXPECT_EQ(both.at("choices")[c].at("logprobs"), alone[c].at("choices")[0].at("logprobs")) << "choice " << c;
  }
  const json& usage = both.at("usage");
  EXPECT_EQ(usage.at("prompt_tokens").get<size_t>(),
            alone[0].at("usage").at("prompt_tokens").get<size_t>() + alone[2].at("usage").at("prompt_tokens").get<size_t>());
  size_t completion = 0;
  for (const json& a : alone) completion += a.at("usage").at("completion_tokens").get<size_t>();
  EXPECT_EQ(usage.at("completion_tokens").get<size_t>(), completion);
  std::string many = "[";
  for (int i = 0; i < 33; ++i) many += std::string(i ? ", " : "") + "\"x\"";
  expect_refused(server.port(), {{"/v1/completions", R"({"prompt": )" + many + R"(], "n": 2})"}, {"/v1/completions", R"({"prompt": [[]]})"}},
                 {"holds 33 prompts of 2 choices each: at most 64 choices in all", "'prompt' must be a string, a list of token ids, or a list"});
}

TEST(ServeApi, PromptsEachGetTheirChoices) { prompts_each_get_their_choices({}); }
TEST(ServeApi, BatchedPromptsEachGetTheirChoices) { prompts_each_get_their_choices({"--sequences", "3"}); }

}  // namespace
}  // namespace tilefire::testing
