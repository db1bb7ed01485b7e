// tilefire serve's tool calling, end to end: a named function's call and a "required" list of calls are
// held to the tools' schemas, so every call of a reply that ends has arguments Ajv (the oracle) finds
// valid under its function's parameters, whole or streamed (the streamed deltas joined are the whole
// reply's calls), in turn or batched; the template sees the tools and the earlier calls; "auto" reads the
// model's calls with the server's parser (a tokenizer whose tokens are whole calls) and streams a reply
// without calls as the whole reply's text; a reasoning parser splits the thinking off, before the calls
// are read; a Mistral call goes back through Mistral Nemo's own template; what cannot be honoured is
// refused by name.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/schema_oracle.h"
#include "tests/common/serve_client.h"
#include "tests/common/tokenizer_files.h"
#include "tilefire/chat.h"
#include "tilefire/tokenizer.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

const json kWeatherParameters = json::parse(R"({"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]})");
const json kTimeParameters = json::parse(R"({"type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}}})");

// DeepSeek's tokens around its calls, and a call of get_time in V3's form.
const std::string kDeepSeekCalls = "<\uff5ctool\u2581calls\u2581begin\uff5c>", kDeepSeekCallsEnd = "<\uff5ctool\u2581calls\u2581end\uff5c>";
const std::string kDeepSeekTime = "<\uff5ctool\u2581call\u2581begin\uff5c>function<\uff5ctool\u2581sep\uff5c>get_time\n```json\n"
                                  "{\"zone\": \"UTC\"}\n```<\uff5ctool\u2581call\u2581end\uff5c>";

json tools() {
  return {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"description", "The weather"}, {"parameters", kWeatherParameters}}}},
          {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", kTimeParameters}}}}};
}

// A choice's calls, whole or streamed (deltas joined by index), and its content and finish reason.
struct ChoiceCalls {
  std::vector<std::string> ids, names, arguments;
  json content;
  json reasoning;  // "reasoning_content"; null: none
  std::string finish_reason;
};

std::vector<ChoiceCalls> choice_calls(const HttpReply& reply, bool streamed, size_t choices) {
  std::vector<ChoiceCalls> out(choices);
  auto take_calls = [&](ChoiceCalls& choice, const json& calls, bool delta) {
    for (const json& call : calls) {
      const size_t k = delta ? call.at("index").get<size_t>() : choice.names.size();
      if (k >= choice.names.size()) {
        EXPECT_EQ(k, choice.names.size()) << "a call's first delta skips an index";
        choice.ids.resize(k + 1);
        choice.names.resize(k + 1);
        choice.arguments.resize(k + 1);
        EXPECT_TRUE(call.contains("id") && call.contains("function") && call.at("function").contains("name")) << "a call's first delta: " << call.dump();
        EXPECT_EQ(call.value("type", ""), "function");
      }
      if (call.contains("id")) choice.ids[k] = call.at("id").get<std::string>();
      const json& function = call.at("function");
      if (function.contains("name")) choice.names[k] = function.at("name").get<std::string>();
      if (function.contains("arguments")) choice.arguments[k] += function.at("arguments").get<std::string>();
    }
  };
  auto take = [&](const json& choice, bool chunk) {
    ChoiceCalls& into = out.at(choice.at("index").get<size_t>());
    const json& message = choice.at(chunk ? "delta" : "message");
    // A stream's head carries content "" before it is known whether the reply is calls: empty text is no text.
    if (message.contains("content") && message.at("content").is_string() && !message.at("content").get<std::string>().empty())
      into.content = (into.content.is_string() ? into.content.get<std::string>() : "") + message.at("content").get<std::string>();
    if (message.contains("tool_calls")) take_calls(into, message.at("tool_calls"), chunk);
    if (message.contains("reasoning_content") && message.at("reasoning_content").is_string())
      into.reasoning = (into.reasoning.is_string() ? into.reasoning.get<std::string>() : "") + message.at("reasoning_content").get<std::string>();
    if (choice.at("finish_reason").is_string()) into.finish_reason = choice.at("finish_reason").get<std::string>();
  };
  if (!streamed) {
    const json body = json::parse(reply.body);
    for (const json& choice : body.at("choices")) take(choice, false);
  } else {
    for (const std::string& data : events(reply.body))
      if (data != "[DONE]") {
        const json chunk = json::parse(data);  // held: a range-for over a temporary's member would dangle
        for (const json& choice : chunk.at("choices")) take(choice, true);
      }
  }
  return out;
}

// Six sampled choices of `body`, whole and streamed with the same seed: the same calls (ids apart), each
// id "call_..." and its own. Returns the whole ones.
std::vector<ChoiceCalls> sampled_calls(uint16_t port, json body, int seed) {
  body["n"] = 6;
  body["max_tokens"] = 80;
  body["temperature"] = 0.9;
  body["seed"] = seed;
  const HttpReply whole = post(port, "/v1/chat/completions", body.dump());
  EXPECT_EQ(whole.status, 200) << whole.body;
  body["stream"] = true;
  const HttpReply streamed = post(port, "/v1/chat/completions", body.dump());
  EXPECT_EQ(streamed.status, 200) << streamed.body;
  if (whole.status != 200 || streamed.status != 200) return {};
  const std::vector<ChoiceCalls> calls = choice_calls(whole, false, 6), pieces = choice_calls(streamed, true, 6);
  std::set<std::string> ids;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(pieces[i].names, calls[i].names) << "choice " << i << ": streamed";
    EXPECT_EQ(pieces[i].arguments, calls[i].arguments) << "choice " << i << ": streamed";
    EXPECT_EQ(pieces[i].content, calls[i].content) << "choice " << i << ": streamed";
    EXPECT_EQ(pieces[i].finish_reason, calls[i].finish_reason) << "choice " << i << ": streamed";
    for (const std::vector<std::string>* list : {&calls[i].ids, &pieces[i].ids})
      for (const std::string& id : *list) {
        EXPECT_EQ(id.rfind("call_", 0), 0u) << id;
        EXPECT_TRUE(ids.insert(id).second) << "the id " << id << " twice";
      }
  }
  return calls;
}

// Named and required calls; a call ends valid under its function's parameters (Ajv).
void held_calls(const std::vector<std::string>& extra) {
  REQUIRE_SCHEMA_ORACLE();
  std::vector<std::string> flags = {"--json-whitespace", "0"};  // compact: a random model pads JSON with whitespace
  flags.insert(flags.end(), extra.begin(), extra.end());
  TextModelServer served("serve-tool-calls", flags);
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  const json messages = {{{"role", "user"}, {"content", "Weather in Oslo?"}}};
  std::map<std::string, SchemaCase> by_function = {{"get_weather", {kWeatherParameters, {}}}, {"get_time", {kTimeParameters, {}}}};
  size_t named_ended = 0, required_ended = 0;
  // A named function: one call of it, its arguments streamed as they come; "stop" as OpenAI's.
  const json named_choice = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const ChoiceCalls& choice : sampled_calls(port, {{"messages", messages}, {"tools", tools()}, {"tool_choice", named_choice}}, 3)) {
    EXPECT_TRUE(choice.content.is_null()) << choice.content.dump();
    ASSERT_EQ(choice.names, std::vector<std::string>{"get_weather"});
    EXPECT_TRUE(choice.finish_reason == "stop" || choice.finish_reason == "length") << choice.finish_reason;
    if (choice.finish_reason != "stop") continue;  // cut: a prefix of the arguments
    by_function["get_weather"].documents.push_back(choice.arguments[0]);
    ++named_ended;
  }
  // "required": one call or more of the tools, "tool_calls" when the list ends; one with parallel_tool_calls false.
  for (const bool parallel : {true, false})
    for (const ChoiceCalls& choice : sampled_calls(port, {{"messages", messages}, {"tools", tools()}, {"tool_choice", "required"}, {"parallel_tool_calls", parallel}}, 7)) {
      EXPECT_TRUE(choice.finish_reason == "tool_calls" || choice.finish_reason == "length") << choice.finish_reason;
      if (choice.finish_reason != "tool_calls") {
        EXPECT_TRUE(choice.names.empty());  // a list cut short is the reply's text
        EXPECT_TRUE(choice.content.is_string());
        continue;
      }
      EXPECT_TRUE(choice.content.is_null()) << choice.content.dump();
      ASSERT_GE(choice.names.size(), 1u);
      if (!parallel) {
        EXPECT_EQ(choice.names.size(), 1u);
      }
      for (size_t k = 0; k < choice.names.size(); ++k) {
        ASSERT_TRUE(by_function.count(choice.names[k])) << choice.names[k];
        by_function[choice.names[k]].documents.push_back(choice.arguments[k]);
      }
      ++required_ended;
    }
  EXPECT_GE(named_ended, 3u) << "too few named calls ended for the check to say much";
  EXPECT_GE(required_ended, 3u) << "too few required lists ended for the check to say much";
  const std::vector<SchemaCase> cases = {by_function["get_weather"], by_function["get_time"]};
  const auto verdicts = validate_with_ajv(cases);
  for (size_t c = 0; c < cases.size(); ++c)
    for (size_t i = 0; i < cases[c].documents.size(); ++i)
      EXPECT_EQ(verdicts[c][i], std::optional<bool>(true)) << cases[c].documents[i];
}

TEST(ServeToolCalls, NamedAndRequiredCallsAreValidUnderTheirSchemas) { held_calls({}); }
TEST(ServeToolCalls, BatchedNamedAndRequiredCallsAreValidUnderTheirSchemas) { held_calls({"--sequences", "3", "--prefill-chunk", "4"}); }

// A template that writes the tools and earlier calls out: the prompt holds them (a byte a token: the tiny
// tokenizer merges only the letters of "hello", and the names are written in capitals).
TEST(ServeToolCalls, TheTemplateSeesTheToolsAndTheEarlierCalls) {
  TempDir dir("serve-tool-template");
  const std::filesystem::path model = text_model(dir), template_path = dir.path() / "tools.jinja";
  write_file_text(template_path,
                  "{% for m in messages %}{{ m.role }}: {% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name | upper }}"
                  "({{ c.function.arguments.city }}){% endfor %}{% else %}{{ m.content }}{% endif %}|{% endfor %}"
                  "{% if tools %}{% for t in tools %}[{{ t.function.name | upper }}]{% endfor %}{% endif %}assistant:");
  Server server({"--model", model.string(), "--threads", "1", "--chat-template", template_path.string()});
  ASSERT_NE(server.port(), 0);
  const json messages = json::parse(R"([{"role": "user", "content": "Rain?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  const std::string rendered = "user: Rain?|assistant: GET_WEATHER(Paris)|tool: sunny|[GET_WEATHER][GET_TIME]assistant:";
  // tool_choice "none": the template sees the tools, and the reply is text. Greedy: a sampled reply of the
  // random model may end within its 2 tokens.
  const HttpReply none = post(server.port(), "/v1/chat/completions",
                              json{{"messages", messages}, {"tools", tools()}, {"tool_choice", "none"}, {"max_tokens", 2}, {"temperature", 0}}.dump());
  ASSERT_EQ(none.status, 200) << none.body;
  const json body = json::parse(none.body);
  EXPECT_EQ(body.at("usage").at("prompt_tokens"), rendered.size());
  EXPECT_TRUE(body.at("choices")[0].at("message").at("content").is_string());
  EXPECT_FALSE(body.at("choices")[0].at("message").contains("tool_calls"));
  EXPECT_EQ(body.at("choices")[0].at("finish_reason"), "length");
  // Without tools the template writes none.
  const HttpReply without = post(server.port(), "/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 1}}.dump());
  ASSERT_EQ(without.status, 200) << without.body;
  EXPECT_EQ(json::parse(without.body).at("usage").at("prompt_tokens"), rendered.size() - std::string("[GET_WEATHER][GET_TIME]").size());
  json broken = messages;
  broken[1]["tool_calls"][0]["function"]["arguments"] = "{\"city\": ";
  const HttpReply refused = post(server.port(), "/v1/chat/completions", json{{"messages", broken}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("'messages[1].tool_calls[0].function.arguments' must be a JSON object's text"), std::string::npos) << refused.body;
}

// "auto" with the hermes parser: a random model makes no call, so its replies are text, streamed as the
// whole reply's (what may begin a call is held back until it cannot); without a parser "auto" is refused.
TEST(ServeToolCalls, AutoReadsTheReplyWithTheServersParser) {
  TextModelServer with_parser("serve-tool-auto", {"--tool-call-parser", "hermes"});
  ASSERT_NE(with_parser.server.port(), 0);
  const json body = {{"messages", {{{"role", "user"}, {"content", "<tool_call>"}}}}, {"tools", tools()}};
  for (const ChoiceCalls& choice : sampled_calls(with_parser.server.port(), body, 5)) {
    EXPECT_TRUE(choice.names.empty());
    EXPECT_TRUE(choice.content.is_string());
    EXPECT_TRUE(choice.finish_reason == "stop" || choice.finish_reason == "length") << choice.finish_reason;
  }
  TextModelServer without("serve-tool-auto-none", {});
  ASSERT_NE(without.server.port(), 0);
  for (const json& choice : {json(nullptr), json("auto")}) {
    json asked = body;
    if (!choice.is_null()) asked["tool_choice"] = choice;
    const HttpReply refused = post(without.server.port(), "/v1/chat/completions", asked.dump());
    EXPECT_EQ(refused.status, 400);
    EXPECT_NE(refused.body.find("start the server with --tool-call-parser hermes, llama3_json, mistral, pythonic, granite, qwen3_coder, deepseek_v3 or phi4_mini_json"), std::string::npos) << refused.body;
  }
}

// The model's own calls, read by each parser: a tokenizer whose added tokens are each a whole call in its
// format (two, for the lists of pythonic, granite and phi4_mini_json, qwen3_coder's blocks and deepseek_v3's calls), and a bias that makes the greedy reply that token, twice where it is
// one call. Whole and streamed, the reply is the two calls (no content: nothing of them streams as text);
// max_tokens cuts it, so "length" stays.
TEST(ServeToolCalls, AutoReadsTheModelsOwnCallsWithEachParser) {
  TempDir dir("serve-tool-auto-calls");
  struct Format {
    std::string parser, token;
    int max_tokens;
  };
  const std::vector<Format> calls = {
      {"hermes", "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>\n", 2},
      {"llama3_json", "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}; ", 2},
      {"mistral", "[TOOL_CALLS]get_time[ARGS]{\"zone\": \"UTC\"}", 2},
      {"pythonic", "[get_time(zone='UTC'), get_time(zone=\"U\" 'TC')]", 1},
      {"granite", "<|tool_call|>[{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}, {\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}]", 1},
      {"qwen3_coder", "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>\n", 2},
      {"deepseek_v3", kDeepSeekCalls + kDeepSeekTime + "\n" + kDeepSeekTime + kDeepSeekCallsEnd, 1},
      {"phi4_mini_json", "functools[{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}, {\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}]", 1}};
  std::vector<AddedToken> tokens;
  for (const Format& format : calls) tokens.push_back({format.token});
  const std::filesystem::path model = text_model_with_tokens(dir, tokens);
  for (size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE(calls[i].parser);
    Server server({"--model", model.string(), "--threads", "1", "--tool-call-parser", calls[i].parser});
    ASSERT_NE(server.port(), 0);
    json body = {{"messages", {{{"role", "user"}, {"content", "time?"}}}}, {"tools", tools()}, {"max_tokens", calls[i].max_tokens}, {"temperature", 0},
                 {"logit_bias", {{std::to_string(263 + i), 100}}}};
    for (const bool stream : {false, true}) {
      body["stream"] = stream;
      const HttpReply reply = post(server.port(), "/v1/chat/completions", body.dump());
      ASSERT_EQ(reply.status, 200) << reply.body;
      const ChoiceCalls choice = choice_calls(reply, stream, 1)[0];
      EXPECT_TRUE(choice.content.is_null()) << (stream ? "streamed: " : "") << choice.content.dump();
      EXPECT_EQ(choice.names, std::vector<std::string>({"get_time", "get_time"})) << reply.body;
      for (const std::string& arguments : choice.arguments) EXPECT_EQ(json::parse(arguments), json({{"zone", "UTC"}}));
      EXPECT_EQ(choice.finish_reason, "length");
      EXPECT_EQ(choice.ids.size(), 2u);
      if (choice.ids.size() == 2) {
        EXPECT_NE(choice.ids[0], choice.ids[1]);
      }
      for (const std::string& id : choice.ids) EXPECT_EQ(id.size(), calls[i].parser == "mistral" ? 9u : 29u) << id;  // Mistral's templates take 9
    }
    // parallel_tool_calls false: the first call alone.
    body["stream"] = false;
    body["parallel_tool_calls"] = false;
    const HttpReply one = post(server.port(), "/v1/chat/completions", body.dump());
    ASSERT_EQ(one.status, 200) << one.body;
    EXPECT_EQ(choice_calls(one, false, 1)[0].names, std::vector<std::string>({"get_time"}));
  }
}

// Where the parser's marker is a special token (Mistral's [TOOL_CALLS] is), a reply's text, which leaves
// special tokens out, keeps it when the reply is read for calls: the call is found. Elsewhere (tool_choice
// none, a completion) the marker stays out. A bias and a repetition penalty make the greedy reply the
// marker, then a token with the call's name and arguments.
TEST(ServeToolCalls, ASpecialMarkerIsKeptWhereTheReplyIsReadForCalls) {
  TempDir dir("serve-tool-special-marker");
  const std::filesystem::path model = text_model_with_tokens(dir, {{"[TOOL_CALLS]", true}, {"get_time[ARGS]{\"zone\": \"UTC\"}"}});
  Server server({"--model", model.string(), "--threads", "1", "--tool-call-parser", "mistral"});
  ASSERT_NE(server.port(), 0);
  json body = {{"messages", {{{"role", "user"}, {"content", "time?"}}}}, {"tools", tools()}, {"max_tokens", 2}, {"temperature", 0},
               {"logit_bias", {{"263", 100}, {"264", 90}}}, {"repetition_penalty", 2}};
  for (const bool stream : {false, true}) {
    body["stream"] = stream;
    const HttpReply reply = post(server.port(), "/v1/chat/completions", body.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const ChoiceCalls choice = choice_calls(reply, stream, 1)[0];
    EXPECT_TRUE(choice.content.is_null()) << reply.body;
    EXPECT_EQ(choice.names, std::vector<std::string>{"get_time"}) << reply.body;
    if (choice.arguments.size() == 1) {
      EXPECT_EQ(json::parse(choice.arguments[0]), json({{"zone", "UTC"}}));
    }
  }
  body["stream"] = false;
  body["tool_choice"] = "none";
  const HttpReply text = post(server.port(), "/v1/chat/completions", body.dump());
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(json::parse(text.body).at("choices")[0].at("message").at("content"), "get_time[ARGS]{\"zone\": \"UTC\"}") << text.body;
  const HttpReply completion = post(server.port(), "/v1/completions",
                                    json{{"prompt", "time?"}, {"max_tokens", 2}, {"temperature", 0}, {"logit_bias", body.at("logit_bias")},
                                         {"repetition_penalty", 2}}.dump());
  ASSERT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(json::parse(completion.body).at("choices")[0].at("text"), "get_time[ARGS]{\"zone\": \"UTC\"}") << completion.body;
}

// A fetched model's own chat template (its tokenizer_config.json's), written to a file for --chat-template.
std::filesystem::path fetched_chat_template(const TempDir& dir, const std::string& fetched) {
  const std::filesystem::path path = dir.path() / (fetched + ".jinja");
  const json config = json::parse(read_file_text(model_tokenizer(fetched).parent_path() / "tokenizer_config.json"));
  write_file_text(path, config.at("chat_template").get<std::string>());
  return path;
}

// The assistant's message of a chat reply, which must hold one call.
json message_with_a_call(uint16_t port, const json& asked) {
  const HttpReply reply = post(port, "/v1/chat/completions", asked.dump());
  EXPECT_EQ(reply.status, 200) << reply.body;
  const json message = reply.status == 200 ? json::parse(reply.body).at("choices")[0].at("message") : json::object();
  EXPECT_EQ(message.value("tool_calls", json::array()).size(), 1u) << reply.body;
  return message;
}

// A DeepSeek model's call goes back through DeepSeek-V3's own chat template (from its tokenizer_config.json)
// with its result. That template joins a call's arguments to text ('...' + arguments), which fails on the
// objects transformers' form gives: the server renders it again with the arguments as the client sent
// them. The prompt is that rendering's (its token count, against the template rendered here), and a
// template that fails either way gives the first failure's message.
TEST(ServeToolCalls, ADeepSeekCallGoesBackThroughDeepSeeksOwnTemplate) {
  REQUIRE_TOKENIZER_FILES();
  TempDir dir("serve-tool-deepseek");
  const std::filesystem::path model = text_model_with_tokens(dir, {{kDeepSeekCalls + kDeepSeekTime + kDeepSeekCallsEnd}});
  const std::filesystem::path template_path = fetched_chat_template(dir, "deepseek_v3");
  Server server({"--model", model.string(), "--threads", "1", "--chat-template", template_path.string(), "--tool-call-parser", "deepseek_v3"});
  ASSERT_NE(server.port(), 0);
  json messages = json::array({{{"role", "user"}, {"content", "time?"}}});
  const json asked = {{"messages", messages}, {"tools", tools()}, {"max_tokens", 1}, {"temperature", 0}, {"logit_bias", {{"263", 100}}}};
  const json message = message_with_a_call(server.port(), asked);
  ASSERT_EQ(message.value("tool_calls", json::array()).size(), 1u);
  EXPECT_EQ(message.at("tool_calls")[0].at("function"), json({{"name", "get_time"}, {"arguments", "{\"zone\":\"UTC\"}"}}));
  messages.push_back(message);
  messages.push_back({{"role", "tool"}, {"tool_call_id", message.at("tool_calls")[0].at("id")}, {"content", "12:00"}});
  json next = asked;
  next["messages"] = messages;
  const HttpReply second = post(server.port(), "/v1/chat/completions", next.dump());
  ASSERT_EQ(second.status, 200) << second.body;
  const std::unique_ptr<ChatTemplate> deepseek = ChatTemplate::of_file(template_path.string(), model.string());
  const Tokenizer tokenizer((model / "tokenizer.json").string());
  const std::string prompt = deepseek->render_json(messages.dump(), true, json{{"tools", tools()}}.dump());
  EXPECT_NE(prompt.find("get_time\n```json\n{\"zone\":\"UTC\"}\n```"), std::string::npos) << prompt;
  EXPECT_EQ(json::parse(second.body).at("usage").at("prompt_tokens"), tokenizer.encode(prompt, false).size());
  // A template that fails both ways: the message is the first rendering's (arguments as objects).
  const std::filesystem::path failing = dir.path() / "failing.jinja";
  write_file_text(failing, "{% for m in messages %}{% if m.tool_calls %}{{ raise_exception('objects: ' ~ (m.tool_calls[0].function.arguments is mapping)) }}"
                           "{% endif %}{% endfor %}");
  Server failing_server({"--model", model.string(), "--threads", "1", "--chat-template", failing.string(), "--tool-call-parser", "deepseek_v3"});
  ASSERT_NE(failing_server.port(), 0);
  const HttpReply refused = post(failing_server.port(), "/v1/chat/completions", next.dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("objects: True"), std::string::npos) << refused.body;
}

// An earlier call's arguments a template may not see as objects (an integer past 64 bits, nesting past
// the bound) are refused, never given to the template as text instead: a template that writes them with
// tojson would show a string where the call had an object.
TEST(ServeToolCalls, ArgumentsNoTemplateMaySeeAreRefusedNotGivenAsText) {
  TempDir dir("serve-tool-arguments-refused");
  const std::filesystem::path model = text_model(dir), template_path = dir.path() / "tojson.jinja";
  write_file_text(template_path, "{% for m in messages %}{{ m.role }}: {{ m.content }}{% for c in m.tool_calls %}{{ c.function.arguments | tojson }}"
                                 "{% endfor %}<|end|>{% endfor %}assistant:");
  Server server({"--model", model.string(), "--threads", "1", "--chat-template", template_path.string()});
  ASSERT_NE(server.port(), 0);
  const std::string deep = std::string(398, '[') + std::string(398, ']');  // within the bound as text, past it in the messages
  for (const auto& [arguments, named] : std::vector<std::pair<std::string, std::string>>{
           {"{\"n\": 9223372036854775808}", "9223372036854775808"}, {"{\"n\": " + deep + "}", "nest"}}) {
    const json messages = {{{"role", "user"}, {"content", "x"}},
                           {{"role", "assistant"}, {"content", nullptr},
                            {"tool_calls", {{{"id", "call_1"}, {"type", "function"}, {"function", {{"name", "get_time"}, {"arguments", arguments}}}}}}},
                           {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "12:00"}}};
    const HttpReply reply = post(server.port(), "/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 1}}.dump());
    EXPECT_EQ(reply.status, 400) << reply.body;
    EXPECT_NE(reply.body.find(named), std::string::npos) << reply.body;
  }
}

// A Mistral model's call goes back through Mistral's own chat template (Mistral Nemo's, from its
// tokenizer_config.json) in the next request, with its result: the template takes the ids the mistral
// parser makes (9 letters and digits) and refuses others by its own message, which the client gets.
TEST(ServeToolCalls, AMistralCallGoesBackThroughMistralsOwnTemplate) {
  REQUIRE_TOKENIZER_FILES();
  TempDir dir("serve-tool-mistral");
  const std::filesystem::path model = text_model_with_tokens(dir, {{"[TOOL_CALLS]get_time[ARGS]{\"zone\": \"UTC\"}"}});
  const std::filesystem::path template_path = fetched_chat_template(dir, "mistral_nemo");
  Server server({"--model", model.string(), "--threads", "1", "--chat-template", template_path.string(), "--tool-call-parser", "mistral"});
  ASSERT_NE(server.port(), 0);
  json messages = json::array({{{"role", "user"}, {"content", "time?"}}});
  const json asked = {{"messages", messages}, {"tools", tools()}, {"max_tokens", 1}, {"temperature", 0}, {"logit_bias", {{"263", 100}}}};
  const json message = message_with_a_call(server.port(), asked);
  ASSERT_EQ(message.value("tool_calls", json::array()).size(), 1u);
  const std::string id = message.at("tool_calls")[0].at("id").get<std::string>();
  EXPECT_EQ(id.size(), 9u) << id;
  messages.push_back(message);
  messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "\"12:00\""}});
  json next = asked;
  next["messages"] = messages;
  const HttpReply second = post(server.port(), "/v1/chat/completions", next.dump());
  EXPECT_EQ(second.status, 200) << second.body;
  // An id of OpenAI's shape ("call_" and 24) is one the template refuses.
  messages[1]["tool_calls"][0]["id"] = "call_abcdefghijklmnopqrstuvwx";
  messages[2]["tool_call_id"] = "call_abcdefghijklmnopqrstuvwx";
  next["messages"] = messages;
  const HttpReply refused = post(server.port(), "/v1/chat/completions", next.dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("Tool call IDs should be alphanumeric strings with length 9!"), std::string::npos) << refused.body;
}

// --reasoning-parser: a token that is a whole reply of thinking and answer (or thinking and a call),
// made the greedy reply by a bias. Whole and streamed, the thinking is "reasoning_content" and the rest the
// content, read for calls; a reply a format holds has no thinking to split.
TEST(ServeToolCalls, AReasoningParserSplitsTheThinkingFromTheAnswer) {
  TempDir dir("serve-reasoning");
  const std::vector<std::string> replies = {"<think>plan</think>answer",
                                            "<think>hmm</think>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                                            "plan</think>answer"};
  const std::filesystem::path model = text_model_with_tokens(dir, {{replies[0]}, {replies[1]}, {replies[2]}});
  struct Case {
    std::string parser;
    int token;
    bool tools;
    const char* reasoning;
    const char* content;
    std::vector<std::string> calls;
  };
  const std::vector<Case> cases = {{"qwen3", 263, false, "plan", "answer", {}},
                                   {"qwen3", 264, true, "hmm", nullptr, {"get_time"}},
                                   {"deepseek_r1", 265, false, "plan", "answer", {}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.parser + " " + std::to_string(c.token));
    Server server({"--model", model.string(), "--threads", "1", "--reasoning-parser", c.parser, "--tool-call-parser", "hermes"});
    ASSERT_NE(server.port(), 0);
    json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 1}, {"temperature", 0},
                 {"logit_bias", {{std::to_string(c.token), 100}}}};
    if (c.tools) body["tools"] = tools();
    for (const bool stream : {false, true}) {
      body["stream"] = stream;
      const HttpReply reply = post(server.port(), "/v1/chat/completions", body.dump());
      ASSERT_EQ(reply.status, 200) << reply.body;
      const ChoiceCalls choice = choice_calls(reply, stream, 1)[0];
      EXPECT_EQ(choice.reasoning, json(c.reasoning)) << reply.body;
      EXPECT_EQ(choice.content, c.content ? json(c.content) : json(nullptr)) << reply.body;
      EXPECT_EQ(choice.names, c.calls) << reply.body;
    }
    // vLLM's include_reasoning false: the thinking is left out, whole and streamed; the answer stays.
    for (const bool stream : {false, true}) {
      json hidden = body;
      hidden["stream"] = stream;
      hidden["include_reasoning"] = false;
      const HttpReply reply = post(server.port(), "/v1/chat/completions", hidden.dump());
      ASSERT_EQ(reply.status, 200) << reply.body;
      EXPECT_EQ(reply.body.find("reasoning_content"), std::string::npos) << reply.body;
      const ChoiceCalls choice = choice_calls(reply, stream, 1)[0];
      EXPECT_EQ(choice.content, c.content ? json(c.content) : json(nullptr)) << reply.body;
      EXPECT_EQ(choice.names, c.calls) << reply.body;
    }
    // The usage counts the thinking's tokens (OpenAI's completion_tokens_details; the Responses API's
    // output_tokens_details): the first of three closes it, whole or streamed.
    json three = body;
    three["max_tokens"] = 3;
    three["stream"] = false;
    const json counted = {{"reasoning_tokens", 1}};
    const HttpReply whole = post(server.port(), "/v1/chat/completions", three.dump());
    ASSERT_EQ(whole.status, 200) << whole.body;
    EXPECT_EQ(json::parse(whole.body).at("usage").at("completion_tokens"), 3);
    EXPECT_EQ(json::parse(whole.body).at("usage").at("completion_tokens_details"), counted) << whole.body;
    three["stream"] = true;
    three["stream_options"] = {{"include_usage", true}};
    const std::vector<std::string> streamed = events(post(server.port(), "/v1/chat/completions", three.dump()).body);
    ASSERT_GE(streamed.size(), 2u);
    EXPECT_EQ(json::parse(streamed[streamed.size() - 2]).at("usage").at("completion_tokens_details"), counted);
    json response_asked = {{"input", "x"}, {"max_output_tokens", 3}, {"temperature", 0}, {"logit_bias", body.at("logit_bias")}};
    if (c.tools) response_asked["tools"] = json::array({{{"type", "function"}, {"name", "get_time"}, {"parameters", {{"type", "object"}}}}});
    three.erase("stream_options");  // the last choice's chunk carries the usage
    const std::vector<std::string> plain = events(post(server.port(), "/v1/chat/completions", three.dump()).body);
    ASSERT_GE(plain.size(), 2u);
    EXPECT_EQ(json::parse(plain[plain.size() - 2]).at("usage").at("completion_tokens_details"), counted);
    const HttpReply response = post(server.port(), "/v1/responses", response_asked.dump());
    ASSERT_EQ(response.status, 200) << response.body;
    EXPECT_EQ(json::parse(response.body).at("usage").at("output_tokens_details"), counted) << response.body;
    json hidden_response = response_asked;  // include_reasoning false reaches the chat: no reasoning item
    hidden_response["include_reasoning"] = false;
    const HttpReply without = post(server.port(), "/v1/responses", hidden_response.dump());
    ASSERT_EQ(without.status, 200) << without.body;
    const json without_items = json::parse(without.body).at("output");  // held: a loop over a temporary's member would dangle
    for (const json& item : without_items) EXPECT_NE(item.at("type"), "reasoning") << without.body;
    response_asked["stream"] = true;  // response.completed (or incomplete: cut by max_output_tokens) holds it
    const std::string response_events = post(server.port(), "/v1/responses", response_asked.dump()).body;
    const size_t last_data = response_events.rfind("\ndata: ");  // the typed events' last: "event: NAME\ndata: {...}"
    ASSERT_NE(last_data, std::string::npos) << response_events;
    const json last_event = json::parse(response_events.substr(last_data + 7, response_events.find("\n\n", last_data) - last_data - 7));
    EXPECT_EQ(last_event.at("response").at("usage").at("output_tokens_details"), counted) << last_event.dump();
    // Two choices: their counts summed.
    json two = body;
    two["max_tokens"] = 3;
    two["n"] = 2;
    two["stream"] = false;
    const HttpReply both = post(server.port(), "/v1/chat/completions", two.dump());
    ASSERT_EQ(both.status, 200) << both.body;
    EXPECT_EQ(json::parse(both.body).at("usage").at("completion_tokens_details"), json({{"reasoning_tokens", 2}}));
    // Held by a format from its first token (a JSON object, a required call), whole or streamed, where the
    // tags are not tokens of their own (as in this tokenizer): no thinking is split off (with deepseek_r1 a
    // reply without </think> would be all thinking), and there is no reasoning_content.
    const json message_x = {{{"role", "user"}, {"content", "x"}}};
    for (const json& held : {json{{"messages", message_x}, {"max_tokens", 4}, {"response_format", {{"type", "json_object"}}}},
                             json{{"messages", message_x}, {"max_tokens", 60}, {"tools", tools()}, {"tool_choice", "required"}}})
      for (const bool stream : {false, true}) {
        json asked = held;
        asked["stream"] = stream;
        const HttpReply reply = post(server.port(), "/v1/chat/completions", asked.dump());
        ASSERT_EQ(reply.status, 200) << reply.body;
        EXPECT_EQ(reply.body.find("reasoning_content"), std::string::npos) << reply.body;
        if (!stream) {
          EXPECT_EQ(json::parse(reply.body).at("usage").at("completion_tokens_details"), json({{"reasoning_tokens", 0}}));
        }
        const ChoiceCalls choice = choice_calls(reply, stream, 1)[0];
        if (held.contains("response_format")) {
          EXPECT_TRUE(choice.content.is_string()) << reply.body;  // split, it would be all thinking
        }
      }
  }
  const RunResult bad = run_cli({"serve", "--port", "0", "--reasoning-parser", "granite"});
  EXPECT_EQ(bad.status, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--reasoning-parser must be qwen3"), std::string::npos) << bad.err;
}

// Where <think> and </think> are tokens of their own, a reply a format holds is held after the thinking
// (a named call's arguments, a JSON object). A bias and a repetition penalty make the greedy reply think
// "q" (a letter the prompt lacks) and close: deepseek_r1 begins inside the thinking ("q</think>..."), qwen3
// opens it ("<think>q</think>..."); the model's end, biased above all, is never chosen while thinking.
// qwen3 with <think> banned begins with the format's tokens: no thinking. Whole and streamed.
TEST(ServeToolCalls, AReasoningModelsHeldReplyComesAfterItsThinking) {
  TempDir dir("serve-thinking-first");
  const std::filesystem::path model = text_model_with_tokens(dir, {{"<think>"}, {"</think>"}});
  const json messages = {{{"role", "user"}, {"content", "x"}}};
  const json named = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  struct Case {
    std::string parser;
    json bias;
    json reasoning;  // whole; a stream sends no delta of ""
  };
  const std::vector<Case> cases = {{"deepseek_r1", {{"2", 100}, {"113", 90}, {"264", 80}}, "q"},
                                   {"qwen3", {{"2", 100}, {"263", 95}, {"113", 90}, {"264", 80}}, "q"},
                                   {"qwen3", {{"263", -100}}, nullptr}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.parser + " " + c.bias.dump());
    const std::string& parser = c.parser;
    Server server({"--model", model.string(), "--threads", "1", "--reasoning-parser", parser, "--json-whitespace", "0"});
    ASSERT_NE(server.port(), 0);
    const json& bias = c.bias;
    for (const json& format : {json{{"tools", tools()}, {"tool_choice", named}}, json{{"response_format", {{"type", "json_object"}}}}})
      for (const bool stream : {false, true}) {
        json body = format;
        body.update({{"messages", messages}, {"max_tokens", 40}, {"temperature", 0}, {"logit_bias", bias}, {"repetition_penalty", 2}, {"stream", stream}});
        const HttpReply reply = post(server.port(), "/v1/chat/completions", body.dump());
        ASSERT_EQ(reply.status, 200) << reply.body;
        const ChoiceCalls choice = choice_calls(reply, stream, 1)[0];
        EXPECT_EQ(choice.reasoning, c.reasoning) << reply.body;
        const std::string answer = format.contains("tools") ? (choice.arguments.empty() ? "" : choice.arguments[0]) : choice.content.dump();
        EXPECT_EQ(answer.find("think>"), std::string::npos) << reply.body;
        if (format.contains("tools")) {
          EXPECT_EQ(choice.names, std::vector<std::string>{"get_time"}) << reply.body;
          EXPECT_TRUE(choice.content.is_null()) << reply.body;
          if (choice.finish_reason == "stop") {
            EXPECT_TRUE(json::parse(answer, nullptr, false).is_object()) << answer;
          }
        } else if (choice.finish_reason == "stop") {
          EXPECT_TRUE(json::parse(choice.content.get<std::string>(), nullptr, false).is_object()) << reply.body;
        }
      }
  }
}

TEST(ServeToolCalls, WhatCannotBeHonouredIsRefusedByName) {
  TextModelServer served("serve-tool-refused", {"--tool-call-parser", "llama3_json"});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  const json messages = {{{"role", "user"}, {"content", "x"}}};
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"messages", messages}, {"tools", tools()}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}},
       "'tool_choice' is \"required\", and response_format json_object holds the reply too"},
      {{{"messages", messages}, {"tools", tools()}, {"tool_choice", "required"}, {"min_tokens", 2}},
       "'min_tokens' with tool_choice required: the reply ends where its value closes"},
      {{{"messages", messages}, {"tools", tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}},
       "'tool_choice' names the function 'f', which no tool is"},
      {{{"messages", messages}, {"functions", json::array()}}, "'functions' is OpenAI's older field"},
      {{{"messages", messages}, {"tools", tools()}, {"tool_choice", "required"}, {"stop", "}"}},
       "'stop' with tool_choice required: the reply is a call held to its schema, which a stop string would cut"},
  };
  auto message = [](const HttpReply& reply) {
    return reply.status == 400 ? json::parse(reply.body).at("error").at("message").get<std::string>() : reply.body;
  };
  for (const auto& [body, expected] : refused) {
    const HttpReply reply = post(port, "/v1/chat/completions", body.dump());
    EXPECT_EQ(reply.status, 400) << body.dump();
    EXPECT_NE(message(reply).find(expected), std::string::npos) << reply.body;
  }
  const HttpReply completion = post(port, "/v1/completions", json{{"prompt", "x"}, {"tools", tools()}}.dump());
  EXPECT_EQ(completion.status, 400);
  EXPECT_NE(completion.body.find("'tools' is a field of /v1/chat/completions"), std::string::npos) << completion.body;
  // A parser the server does not know: named at start, exit status 2.
  const RunResult bad = run_cli({"serve", "--port", "0", "--tool-call-parser", "xlam"});
  EXPECT_EQ(bad.status, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--tool-call-parser must be hermes (Qwen 2.5 and 3, Hermes), llama3_json (Llama 3.1-3.3), mistral (Mistral), "
                         "pythonic (Llama 3.2 and 4), granite (Granite 3), qwen3_coder (Qwen3-Coder; also named qwen3_xml), "
                         "deepseek_v3 (DeepSeek-V3, R1 and V3.1; also named deepseek_v31) or phi4_mini_json (Phi-4-mini), got 'xlam'"),
            std::string::npos)
      << bad.err;
}

}  // namespace
}  // namespace tilefire::testing
