// tilefire serve's POST /v1/responses (samples/cli/serve_responses.cpp) against its own chat path: the
// same conversation asked both ways (a string input, and a list of items with instructions, parts,
// earlier calls and their outputs) gives the same prompt (its token count, through a template that writes
// every message's role, content, calls and call ids) and the same greedy reply; the reply's shapes
// (message, function_call and reasoning items, status and usage); tools and formats read as the chat reads
// them; a stream's typed events, which add up to the whole response; and what it cannot do refused by
// name. The official SDK's responses.create is in cli_serve_test.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "samples/cli/serve_responses.h"
#include "tests/common/cli_runner.h"
#include "tests/common/serve_client.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

// A template that writes all a message holds that the items carry: role, content, thinking, each call's
// id, name and arguments, and a tool message's call id.
constexpr const char* kEveryFieldTemplate =
    "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{% for c in m.tool_calls %}[{{ c.id }} {{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}"
    "{% if m.tool_call_id %}({{ m.tool_call_id }}){% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

json weather_tools_flat() {
  return json::parse(R"([{"type": "function", "name": "get_weather", "description": "The weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}])");
}

// The output items of `type`.
std::vector<json> items_of(const json& response, const std::string& type) {
  std::vector<json> items;
  for (const json& item : response.value("output", json::array()))
    if (item.at("type") == type) items.push_back(item);
  return items;
}

// A response against the chat reply to the same conversation: the same prompt, the same greedy text, the
// same usage, and the status the chat's finish reason says.
void expect_response_matches_chat(const json& response, const json& chat) {
  ASSERT_FALSE(chat.empty());
  ASSERT_FALSE(response.empty());
  EXPECT_EQ(response.at("object"), "response");
  EXPECT_EQ(response.at("id").get<std::string>().rfind("resp_", 0), 0u) << response.dump();
  const json& choice = chat.at("choices")[0];
  const json messages = items_of(response, "message");
  ASSERT_EQ(messages.size(), choice.at("message").at("content").is_string() ? 1u : 0u) << response.dump();
  if (!messages.empty()) {
    EXPECT_EQ(messages[0].at("role"), "assistant");
    EXPECT_EQ(messages[0].at("content")[0].at("type"), "output_text");
    EXPECT_EQ(messages[0].at("content")[0].at("text"), choice.at("message").at("content"));
  }
  const bool cut = choice.at("finish_reason") == "length";
  EXPECT_EQ(response.at("status"), cut ? "incomplete" : "completed");
  EXPECT_EQ(response.at("incomplete_details"), (cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)));
  EXPECT_EQ(response.at("usage").at("input_tokens"), chat.at("usage").at("prompt_tokens"));
  EXPECT_EQ(response.at("usage").at("output_tokens"), chat.at("usage").at("completion_tokens"));
  EXPECT_EQ(response.at("usage").at("total_tokens"), chat.at("usage").at("total_tokens"));
}

TEST(ServeResponses, AConversationAskedBothWaysGivesTheSameReply) {
  TempDir dir("serve-responses");
  const std::filesystem::path model = text_model(dir), template_path = dir.path() / "every_field.jinja";
  write_file_text(template_path, kEveryFieldTemplate);
  Server server({"--model", model.string(), "--threads", "1", "--chat-template", template_path.string()});
  ASSERT_NE(server.port(), 0);
  // A string is one user message.
  const json response = post_json(server.port(), "/v1/responses", {{"input", "hello"}, {"max_output_tokens", 6}, {"temperature", 0}});
  const json chat = post_json(server.port(), "/v1/chat/completions",
                              {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 6}, {"temperature", 0}});
  expect_response_matches_chat(response, chat);
  EXPECT_EQ(response.at("max_output_tokens"), 6);
  EXPECT_EQ(response.at("tools"), json::array());
  // Items: instructions, a developer message, parts, an earlier reply with its calls (joined into one
  // assistant message), their outputs, and earlier thinking (left out).
  const json items = json::parse(R"([
      {"role": "developer", "content": "be brief"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather"}, {"type": "input_text", "text": "in Oslo?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "plan"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking.", "annotations": []},
                                                           {"type": "refusal", "refusal": "No more."}]},
      {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
      {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": "{\"city\": \"Bergen\"}"},
      {"type": "function_call_output", "call_id": "call_a", "output": "rain"},
      {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "sun"}]},
      {"role": "user", "content": "and?"}])");
  const json messages = json::parse(R"([
      {"role": "system", "content": "answer"}, {"role": "system", "content": "be brief"}, {"role": "user", "content": "weather\nin Oslo?"},
      {"role": "assistant", "content": "Looking.\nNo more.", "reasoning_content": "plan", "tool_calls": [
          {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
          {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Bergen\"}"}}]},
      {"role": "tool", "tool_call_id": "call_a", "content": "rain"}, {"role": "tool", "tool_call_id": "call_b", "content": "sun"},
      {"role": "user", "content": "and?"}])");
  const json asked = {{"instructions", "answer"}, {"input", items}, {"tools", weather_tools_flat()}, {"tool_choice", "none"},
                      {"max_output_tokens", 5}, {"temperature", 0}};
  const json chat_tools = {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"description", "The weather"},
                                                                {"parameters", weather_tools_flat()[0].at("parameters")}}}}};
  const json listed = post_json(server.port(), "/v1/responses", asked);
  expect_response_matches_chat(listed, post_json(server.port(), "/v1/chat/completions",
                                                 {{"messages", messages}, {"tools", chat_tools}, {"tool_choice", "none"}, {"max_tokens", 5}, {"temperature", 0}}));
  EXPECT_EQ(listed.at("instructions"), "answer");
  EXPECT_EQ(listed.at("usage").at("output_tokens_details"), json({{"reasoning_tokens", 0}}));
  EXPECT_EQ(listed.at("tool_choice"), "none");
  // A different call id makes a different prompt: the ids reach the template.
  json other = asked;
  other["input"][4]["call_id"] = "call_zzzzzz";
  other["input"][6]["call_id"] = "call_zzzzzz";
  const json changed = post_json(server.port(), "/v1/responses", other);
  ASSERT_FALSE(changed.empty());
  EXPECT_NE(changed.at("usage").at("input_tokens"), listed.at("usage").at("input_tokens"));
}

// A named function's call (held by its schema) is a function_call item; a model's own calls read by the
// server's parser are too (no message item: the reply was calls alone); a json_schema format holds the text.
TEST(ServeResponses, CallsAndFormatsAreReadAsTheChatReadsThem) {
  TempDir dir("serve-responses-tools");
  const std::filesystem::path model =
      text_model_with_tokens(dir, {{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"}});
  Server server({"--model", model.string(), "--threads", "1", "--tool-call-parser", "hermes"});
  ASSERT_NE(server.port(), 0);
  const json named = post_json(server.port(), "/v1/responses",
                               {{"input", "weather?"}, {"tools", weather_tools_flat()}, {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
                                {"max_output_tokens", 60}, {"temperature", 0}});
  const std::vector<json> calls = items_of(named, "function_call");
  ASSERT_EQ(calls.size(), 1u) << named.dump();
  EXPECT_EQ(calls[0].at("name"), "get_weather");
  EXPECT_EQ(calls[0].at("call_id").get<std::string>().rfind("call_", 0), 0u);
  EXPECT_TRUE(items_of(named, "message").empty());
  EXPECT_EQ(calls[0].at("status"), named.at("status"));
  if (named.at("status") == "completed") {
    const json arguments = json::parse(calls[0].at("arguments").get<std::string>());
    EXPECT_TRUE(arguments.at("city").is_string()) << arguments.dump();
  }
  // A call cut short is as incomplete as its response.
  const json cut = post_json(server.port(), "/v1/responses",
                             {{"input", "weather?"}, {"tools", weather_tools_flat()}, {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
                              {"max_output_tokens", 2}, {"temperature", 0}});
  ASSERT_EQ(items_of(cut, "function_call").size(), 1u) << cut.dump();
  EXPECT_EQ(cut.at("status"), "incomplete");
  EXPECT_EQ(items_of(cut, "function_call")[0].at("status"), "incomplete");
  const json automatic = post_json(server.port(), "/v1/responses",
                                   {{"input", "weather?"}, {"tools", weather_tools_flat()}, {"max_output_tokens", 1}, {"temperature", 0},
                                    {"logit_bias", {{"263", 100}}}});
  const std::vector<json> own = items_of(automatic, "function_call");
  ASSERT_EQ(own.size(), 1u) << automatic.dump();
  EXPECT_EQ(json::parse(own[0].at("arguments").get<std::string>()), json({{"city", "Oslo"}}));
  EXPECT_TRUE(items_of(automatic, "message").empty());
  EXPECT_EQ(automatic.at("tool_choice"), "auto");
  const json schema = json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false})");
  const json formatted = post_json(server.port(), "/v1/responses",
                                   {{"input", "a number"}, {"text", {{"format", {{"type", "json_schema"}, {"name", "n"}, {"schema", schema}}}}},
                                    {"max_output_tokens", 40}, {"temperature", 0}});
  const std::vector<json> texts = items_of(formatted, "message");
  ASSERT_EQ(texts.size(), 1u) << formatted.dump();
  if (formatted.at("status") == "completed") {
    const json value = json::parse(texts[0].at("content")[0].at("text").get<std::string>());
    EXPECT_TRUE(value.at("n").is_number_integer()) << value.dump();
  }
}

// A server-sent event: its "event:" name and its data.
struct Event {
  std::string name;
  json data;
};
std::vector<Event> sse_events(const std::string& body) {
  std::vector<Event> events;
  size_t at = body.find("\r\n\r\n");
  at = at == std::string::npos ? 0 : at + 4;
  for (size_t end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string block = body.substr(at, end - at);
    const size_t data = block.find("\ndata: ");
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    if (data == std::string::npos || block.rfind("event: ", 0) != 0) continue;
    events.push_back({block.substr(7, data - 7), json::parse(block.substr(data + 7))});
  }
  return events;
}

// Items without their ids (a request's number is in them) and call ids (random).
json without_ids(json items) {
  for (json& item : items) {
    item.erase("id");
    item.erase("call_id");
  }
  return items;
}

// Streamed, each request's events are numbered in order, named by their type, open with
// response.created and response.in_progress and end with the whole response, whose output is the
// unstreamed reply's; each item is added before its deltas and done with what its deltas add up to.
TEST(ServeResponses, AStreamsEventsAddUpToTheWholeResponse) {
  TempDir dir("serve-responses-stream");
  const std::filesystem::path model = text_model_with_tokens(
      dir, {{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"}, {"Sure, "}});
  Server server({"--model", model.string(), "--threads", "1", "--tool-call-parser", "hermes"});
  ASSERT_NE(server.port(), 0);
  const json schema = json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  // Text and calls in turn (a bias and a repetition penalty), cut: the text's item is incomplete both ways.
  const json text_and_calls = {{"input", "weather?"}, {"tools", weather_tools_flat()}, {"max_output_tokens", 4}, {"temperature", 0},
                               {"logit_bias", {{"264", 100}, {"263", 90}}}, {"repetition_penalty", 2}};
  const std::vector<json> asked = {
      {{"input", "hello"}, {"max_output_tokens", 6}, {"temperature", 0}},
      {{"input", "weather?"}, {"tools", weather_tools_flat()}, {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}}, {"max_output_tokens", 30},
       {"temperature", 0}},
      {{"input", "weather?"}, {"tools", weather_tools_flat()}, {"max_output_tokens", 2}, {"temperature", 0}, {"logit_bias", {{"263", 100}}}},
      {{"input", "n"}, {"text", {{"format", {{"type", "json_schema"}, {"name", "n"}, {"schema", schema}}}}}, {"max_output_tokens", 20}, {"temperature", 0}},
      text_and_calls};
  for (const json& body : asked) {
    SCOPED_TRACE(body.dump());
    const json whole = post_json(server.port(), "/v1/responses", body);
    json streaming = body;
    streaming["stream"] = true;
    const HttpReply reply = post(server.port(), "/v1/responses", streaming.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const std::vector<Event> events = sse_events(reply.body);
    ASSERT_GE(events.size(), 3u) << reply.body;
    std::map<size_t, json> added;            // by output_index
    std::optional<size_t> open;              // the item added and not yet done: items come one after another
    std::map<size_t, std::string> deltas;    // each item's deltas joined
    for (size_t k = 0; k < events.size(); ++k) {
      const json& data = events[k].data;
      EXPECT_EQ(data.at("type"), events[k].name);
      EXPECT_EQ(data.at("sequence_number"), k);
      const std::string& name = events[k].name;
      if (name == "response.output_item.added") {
        EXPECT_FALSE(open.has_value()) << "an item added while item " << *open << " is open: " << data.dump();
        open = data.at("output_index").get<size_t>();
        EXPECT_TRUE(added.emplace(data.at("output_index").get<size_t>(), data.at("item")).second) << data.dump();
      } else if (name == "response.output_item.done") {
        EXPECT_EQ(open, std::optional<size_t>(data.at("output_index").get<size_t>())) << data.dump();
        open.reset();
      } else if (name == "response.output_text.delta" || name == "response.reasoning_text.delta" || name == "response.function_call_arguments.delta") {
        EXPECT_TRUE(added.count(data.at("output_index").get<size_t>())) << "a delta before its item: " << data.dump();
        deltas[data.at("output_index").get<size_t>()] += data.at("delta").get<std::string>();
      } else if (name == "response.output_text.done") {
        EXPECT_EQ(data.at("text"), deltas[data.at("output_index").get<size_t>()]);
      } else if (name == "response.function_call_arguments.done") {
        EXPECT_EQ(data.at("arguments"), deltas[data.at("output_index").get<size_t>()]);
      }
    }
    EXPECT_EQ(events[0].name, "response.created");
    EXPECT_EQ(events[0].data.at("response").at("status"), "in_progress");
    EXPECT_EQ(events[1].name, "response.in_progress");
    const json& last = events.back().data;
    EXPECT_EQ(events.back().name, whole.at("status") == "completed" ? "response.completed" : "response.incomplete");
    const json& streamed = last.at("response");
    EXPECT_EQ(streamed.at("status"), whole.at("status"));
    EXPECT_EQ(without_ids(streamed.at("output")), without_ids(whole.at("output"))) << streamed.dump() << "\n" << whole.dump();
    EXPECT_EQ(streamed.at("usage").at("output_tokens"), whole.at("usage").at("output_tokens"));
    EXPECT_EQ(added.size(), whole.at("output").size());
    if (body == text_and_calls) {
      EXPECT_EQ(items_of(whole, "message").size(), 1u) << whole.dump();
      EXPECT_GE(items_of(whole, "function_call").size(), 1u) << whole.dump();
    }
    if (body == asked[2]) {
      EXPECT_EQ(items_of(whole, "function_call").size(), 2u) << whole.dump();  // two calls, one after the other
    }
  }
}

// The stream's state machine alone: a failure after the first text ends with an "error" event, the open
// item done as incomplete, and response.failed carrying the error.
TEST(ServeResponses, AStreamThatFailsEndsWithResponseFailed) {
  cli::ResponsesStream stream(json{{"input", "x"}});
  auto chunk = [](const json& delta) {
    return json{{"id", "chatcmpl-7"}, {"created", 1}, {"model", "m"}, {"choices", {{{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}}}}};
  };
  std::string text = stream.events(chunk({{"role", "assistant"}, {"content", ""}}));
  text += stream.events(chunk({{"content", "Hel"}}));
  text += stream.events({{"error", {{"message", "the device failed"}, {"type", "server_error"}, {"code", nullptr}}}});
  std::vector<std::string> names;
  json last;
  for (const Event& event : sse_events("\r\n\r\n" + text)) {
    EXPECT_EQ(event.data.at("sequence_number"), names.size());
    names.push_back(event.name);
    last = event.data;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
                                             "response.output_text.delta", "error", "response.output_text.done", "response.content_part.done",
                                             "response.output_item.done", "response.failed"}));
  EXPECT_EQ(last.at("response").at("status"), "failed");
  EXPECT_EQ(last.at("response").at("error"), json({{"code", "server_error"}, {"message", "the device failed"}}));
  EXPECT_EQ(last.at("response").at("output")[0].at("status"), "incomplete");
  EXPECT_EQ(last.at("response").at("output")[0].at("content")[0].at("text"), "Hel");
}

// The server keeps only the fields a Response repeats while it generates: the Response built from them is
// the one built from the whole request, every repeated field given or left to its default.
TEST(ServeResponses, TheFieldsKeptAreAllTheResponseRepeats) {
  const json chat_reply = {{"id", "chatcmpl-3"}, {"created", 5}, {"model", "m"},
                           {"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", "hi"}}}, {"finish_reason", "stop"}}}},
                           {"usage", {{"prompt_tokens", 4}, {"completion_tokens", 1}, {"total_tokens", 5}, {"prompt_tokens_details", {{"cached_tokens", 0}}}}}};
  const json full = {{"model", "m"}, {"input", {{{"role", "user"}, {"content", std::string(1000, 'x')}}}}, {"instructions", "be brief"},
                     {"max_output_tokens", 9}, {"parallel_tool_calls", false}, {"temperature", 0.5}, {"top_p", 0.9},
                     {"tool_choice", "none"}, {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", json::object()}}}},
                     {"text", {{"format", {{"type", "json_object"}}}}}, {"metadata", {{"k", "v"}}}, {"seed", 3}, {"store", false}};
  for (const json& request : {full, json{{"input", "x"}}}) {
    const json echoed = cli::responses_echoed_fields(request);
    EXPECT_FALSE(echoed.contains("input"));
    EXPECT_EQ(cli::response_of_chat_completion(chat_reply, echoed), cli::response_of_chat_completion(chat_reply, request)) << request.dump();
  }
}

TEST(ServeResponses, WhatItCannotDoIsRefusedByName) {
  TextModelServer served("serve-responses-refused", {});
  ASSERT_NE(served.server.port(), 0);
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"input", "x"}, {"stream", 1}}, "'stream' must be true or false"},
      {{{"input", "x"}, {"previous_response_id", "resp_1"}}, "'previous_response_id' names what the server would have stored"},
      {{{"input", "x"}, {"background", true}}, "'background' is not built"},
      {{{"input", "x"}, {"truncation", "auto"}}, "'truncation' must be \"disabled\""},
      {{{"input", "x"}, {"top_logprobs", 2}}, "'top_logprobs' is not built for /v1/responses"},
      {{{"input", "x"}, {"include", {"message.output_text.logprobs"}}}, "'include' asks for message.output_text.logprobs"},
      {{{"input", "x"}, {"reasoning", {{"summary", "auto"}}}}, "'reasoning.summary' is not built"},
      {{{"input", "x"}, {"reasoning", {{"effort", 3}}}}, "'reasoning.effort' must be a string"},
      {{{"input", "x"}, {"text", {{"verbosity", "low"}}}}, "'text.verbosity' is not built"},
      {{{"input", "x"}, {"max_tool_calls", 1}}, "'max_tool_calls' is not built"},
      {{{"input", {{{"role", "user"}, {"content", {{{"type", 3}, {"text", "x"}}}}}}}}, "'input[0].content[0]' must be"},
      {{{"input", {{{"type", "function_call_output"}, {"call_id", "a"}, {"output", "r"}}}}}, "'input[0].call_id' is 'a', which no function_call item"},
      {{{"input", {{{"type", "function_call"}, {"call_id", "a"}, {"name", "f"}, {"arguments", "[1]"}}}}}, "'input[0].arguments' must be a JSON object's text"},
      {{{"input", {{{"role", "user"}, {"content", {{{"type", "refusal"}, {"refusal", "x"}}}}}}}}, "'input[0].content[0]' must be"},
      // The chat's refusals, named as the Responses API names the fields.
      {{{"input", "x"}, {"max_output_tokens", -1}}, "'max_output_tokens'"},
      {{{"input", "x"}, {"tools", {{{"type", "function"}, {"name", "a b"}}}}, {"tool_choice", "none"}}, "'tools[0].name' must be"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}, {"schema", {{"pattern", "(?=a)"}}}}}}}}, "'text.format'"},
      {json::object(), "'input' is missing"},
      {{{"input", json::array()}}, "'input' must be a string or a non-empty list of items"},
      {{{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "x"}}}}}}}}, "'input[0].content[0]' must be {\"type\": \"input_text\""},
      {{{"input", {{{"role", "tool"}, {"content", "x"}}}}}, "'input[0].role' must be user, assistant, system or developer"},
      {{{"input", {{{"type", "item_reference"}, {"id", "msg_1"}}}}}, "'input[0].type' is 'item_reference'"},
      {{{"input", {{{"type", "function_call"}, {"name", "f"}, {"arguments", "{}"}}}}}, "'input[0].call_id' must be a string"},
      {{{"input", "x"}, {"instructions", 3}}, "'instructions' must be a string"},
      {{{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}, "'tools[0]' must be {\"type\": \"function\""},
      {{{"input", "x"}, {"tools", {{{"type", "function"}, {"name", "f"}, {"function", "g"}}}}}, "'tools[0]' has \"function\""},
      {{{"input", "x"}, {"tool_choice", {{"type", "web_search"}}}}, "'tool_choice' must be \"none\", \"auto\""},
      {{{"input", "x"}, {"text", {{"format", {{"type", "grammar"}}}}}}, "'text.format' must be"},
      // What the chat refuses is refused the same way.
      {{{"input", "x"}, {"temperature", -1}}, "'temperature'"},
      {{{"input", "x"}, {"tools", weather_tools_flat()}}, "'tool_choice' is \"auto\""}};
  for (const auto& [body, named] : refused) {
    const HttpReply reply = post(served.server.port(), "/v1/responses", body.dump());
    EXPECT_EQ(reply.status, 400) << body.dump() << "\n" << reply.body;
    const std::string message = reply.status == 400 ? json::parse(reply.body).at("error").at("message").get<std::string>() : reply.body;
    EXPECT_NE(message.find(named), std::string::npos) << body.dump() << "\n" << message;
  }
  // Not JSON, and the wrong method.
  EXPECT_EQ(post(served.server.port(), "/v1/responses", "{").status, 400);
  EXPECT_EQ(http_exchange(served.server.port(), "GET /v1/responses HTTP/1.1\r\n\r\n").status, 405);
}

}  // namespace
}  // namespace tilefire::testing
