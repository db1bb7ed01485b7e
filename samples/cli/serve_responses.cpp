#include "serve_responses.h"

#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "json_text.h"
#include "tilefire/errors.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::string& field, const std::string& what) { refuse_field(field, what); }


std::string brief(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 120); }

// A message's or a call output's content: a string, or a list of text parts joined by line breaks (as
// the chat joins its parts); an assistant's refusal parts are its text too. `at` names it in a refusal.
std::string content_text(const json& content, const std::string& at, bool assistant) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) refuse(at, "must be a string or a list of input_text parts, got " + brief(content));
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string type = part.is_object() && part.contains("type") && part.at("type").is_string() ? part.at("type").get<std::string>() : "";
    const char* field = assistant && type == "refusal" ? "refusal" : "text";
    if ((type != "input_text" && type != "output_text" && type != "text" && std::string(field) != "refusal") || !part.contains(field) ||
        !part.at(field).is_string())
      refuse(at + "[" + std::to_string(k) + "]", "must be {\"type\": \"input_text\", \"text\": ...}: the model reads text only, got " + brief(part));
    if (k > 0) text += '\n';
    text += part.at(field).get<std::string>();
  }
  return text;
}

std::string string_field(const json& item, const char* field, const std::string& at) {
  if (!item.contains(field) || !item.at(field).is_string()) refuse(at + "." + field, "must be a string, got " + brief(item.value(field, json())));
  return item.at(field).get<std::string>();
}

// A reasoning item's text: its reasoning_text content, else its summary's text, joined.
std::string reasoning_text(const json& item, const std::string& at) {
  std::string text;
  for (const char* field : {"content", "summary"}) {
    if (!given(item, field)) continue;
    if (!item.at(field).is_array()) refuse(at + "." + field, "must be a list of parts, got " + brief(item.at(field)));
    for (const json& part : item.at(field))
      if (part.is_object() && part.contains("text") && part.at("text").is_string()) text += (text.empty() ? "" : "\n") + part.at("text").get<std::string>();
    if (!text.empty()) break;
  }
  return text;
}

// The input items as chat messages: a function_call joins the assistant message before it (a reply's text
// and its calls are one chat message), or opens one; a reasoning item's text is the next assistant
// message's reasoning_content (templates that keep the thinking of the turn in progress show it).
json chat_messages(const json& input) {
  json messages = json::array();
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return messages;
  }
  if (!input.is_array() || input.empty()) refuse("input", "must be a string or a non-empty list of items, got " + brief(input));
  std::set<std::string> call_ids;  // of the function_call items so far
  std::string reasoning;           // of a reasoning item, for the assistant message after it
  auto assistant_message = [&](json message) {
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    reasoning.clear();
    messages.push_back(std::move(message));
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) refuse(at, "must be an object, got " + brief(item));
    const std::string type = item.contains("type") ? (item.at("type").is_string() ? item.at("type").get<std::string>() : "?") : "message";
    if (type == "message") {
      const std::string role = string_field(item, "role", at);
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        refuse(at + ".role", "must be user, assistant, system or developer, got '" + role.substr(0, 40) + "'");
      if (!item.contains("content")) refuse(at + ".content", "is missing");
      // A developer's message is the system's: chat templates know the system role.
      json message = {{"role", role == "developer" ? "system" : role}, {"content", content_text(item.at("content"), at + ".content", role == "assistant")}};
      if (role == "assistant") {
        assistant_message(std::move(message));
      } else {
        reasoning.clear();  // thinking no assistant message followed
        messages.push_back(std::move(message));
      }
    } else if (type == "function_call") {
      const std::string arguments = string_field(item, "arguments", at);
      const std::optional<json> parsed = only_whitespace(arguments) ? json::object() : parse_json(arguments);
      if (!parsed || !parsed->is_object()) refuse(at + ".arguments", "must be a JSON object's text, got " + brief(item.at("arguments")));
      const json call = {{"id", string_field(item, "call_id", at)}, {"type", "function"},
                         {"function", {{"name", string_field(item, "name", at)}, {"arguments", arguments}}}};
      call_ids.insert(call.at("id").get<std::string>());
      if (messages.empty() || messages.back().at("role") != "assistant" || !reasoning.empty())
        assistant_message({{"role", "assistant"}, {"content", nullptr}});
      messages.back()["tool_calls"].push_back(call);
    } else if (type == "function_call_output") {
      if (!item.contains("output")) refuse(at + ".output", "is missing");
      const std::string call_id = string_field(item, "call_id", at);
      if (!call_ids.count(call_id)) refuse(at + ".call_id", "is '" + call_id.substr(0, 64) + "', which no function_call item before it has");
      messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", content_text(item.at("output"), at + ".output", false)}});
    } else if (type == "reasoning") {
      reasoning = reasoning_text(item, at);
    } else {
      refuse(at + ".type", "is '" + type.substr(0, 40) + "': Tilefire reads message, function_call, function_call_output and reasoning items");
    }
  }
  return messages;
}

// The Responses' function tools ({"type": "function", "name", ...}) as the chat's ({"type": "function",
// "function": {"name", ...}}).
json chat_tools(const json& tools) {
  if (!tools.is_array()) refuse("tools", "must be a list of tools, got " + brief(tools));
  json converted = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& tool = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object() || tool.value("type", json()) != "function")
      refuse(at, "must be {\"type\": \"function\", \"name\": ..., \"parameters\": {...}}: Tilefire's tools are functions, got " + brief(tool));
    json function = json::object();
    for (const auto& [key, value] : tool.items()) {
      if (key == "type") continue;
      if (key != "name" && key != "description" && key != "parameters" && key != "strict")
        refuse(at, "has \"" + key + "\": a function tool's fields are type, name, description, parameters and strict");
      function[key] = value;
    }
    converted.push_back({{"type", "function"}, {"function", function}});
  }
  return converted;
}

json chat_tool_choice(const json& choice) {
  if (choice.is_string()) return choice;
  if (choice.is_object() && choice.value("type", json()) == "function" && choice.contains("name"))
    return {{"type", "function"}, {"function", {{"name", choice.at("name")}}}};
  refuse("tool_choice", "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}, got " + brief(choice));
}

// "text": {"format": ...} as the chat's response_format; null for plain text.
json chat_response_format(const json& text) {
  if (!text.is_object()) refuse("text", "must be an object such as {\"format\": {\"type\": \"json_schema\", ...}}, got " + brief(text));
  for (const auto& [key, value] : text.items())
    if (key != "format" && !value.is_null()) refuse("text." + key, "is not built: a reply's text is held by its format alone");
  if (!given(text, "format")) return nullptr;
  const json& format = text.at("format");
  const std::string type = format.is_object() && format.contains("type") && format.at("type").is_string() ? format.at("type").get<std::string>() : "";
  if (type == "text") return nullptr;
  if (type == "json_object") return {{"type", "json_object"}};
  if (type == "json_schema") {
    json schema = json::object();
    for (const auto& [key, value] : format.items())
      if (key != "type") schema[key] = value;
    return {{"type", "json_schema"}, {"json_schema", schema}};
  }
  refuse("text.format", "must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}}, got " +
                            brief(format));
}

}  // namespace

std::string responses_field_names(const std::string& message) {
  // A refusal begins with the field it names, quoted.
  static const std::vector<std::pair<std::string, std::string>> kRenamed = {
      {"'max_tokens'", "'max_output_tokens'"}, {"'messages'", "'input'"}, {"'response_format'", "'text.format'"},
      {"'reasoning_effort'", "'reasoning.effort'"}};
  for (const auto& [chat, responses] : kRenamed)
    if (message.rfind(chat, 0) == 0) return responses + message.substr(chat.size());
  // 'tools[i].function.X' is 'tools[i].X' (the same list, the tool's fields one level up).
  const size_t function = message.find("].function");
  if (message.rfind("'tools[", 0) == 0 && function != std::string::npos && function < message.find('\'', 1))
    return message.substr(0, function + 1) + message.substr(function + 10);
  return message;
}

json chat_body_of_responses_request(const json& body) {
  if (given(body, "stream") && !body.at("stream").is_boolean()) refuse("stream", "must be true or false, got " + brief(body.at("stream")));
  for (const char* stored : {"previous_response_id", "conversation", "prompt"})
    if (given(body, stored)) refuse(stored, "names what the server would have stored, and Tilefire stores nothing: send the whole conversation in \"input\"");
  if (given(body, "background") && body.at("background") != json(false)) refuse("background", "is not built: a response is answered when it is done");
  if (given(body, "truncation") && body.at("truncation") != json("disabled"))
    refuse("truncation", "must be \"disabled\": a conversation past the context is refused, never cut at its start");
  if (given(body, "top_logprobs") && body.at("top_logprobs") != json(0)) refuse("top_logprobs", "is not built for /v1/responses: /v1/chat/completions gives them");
  if (given(body, "include")) {
    if (!body.at("include").is_array()) refuse("include", "must be a list, got " + brief(body.at("include")));
    for (const json& asked : body.at("include"))
      if (asked == "message.output_text.logprobs") refuse("include", "asks for message.output_text.logprobs, not built for /v1/responses: /v1/chat/completions gives them");
  }
  if (given(body, "reasoning")) {
    const json& reasoning = body.at("reasoning");
    if (!reasoning.is_object()) refuse("reasoning", "must be an object, got " + brief(reasoning));
    for (const char* field : {"summary", "generate_summary"})
      if (given(reasoning, field)) refuse(std::string("reasoning.") + field, "is not built: the models Tilefire runs write no summary (leave it out)");
  }
  if (given(body, "max_tool_calls")) refuse("max_tool_calls", "is not built (parallel_tool_calls: false holds a reply to one call)");
  if (given(body, "n") && body.at("n") != json(1)) refuse("n", "must be 1: a response holds one reply");
  if (given(body, "logprobs") && body.at("logprobs") != json(false)) refuse("logprobs", "is not built for /v1/responses: /v1/chat/completions gives them");
  if (given(body, "response_format"))  // (a refusal naming the chat's field would be renamed to this one anyway)
    refuse("text.format", "is where /v1/responses takes a reply's format, not \"response_format\" (the chat's field)");
  json chat = json::object();
  // reasoning.effort is the chat's reasoning_effort: the template's variable of that name.
  if (given(body, "reasoning") && given(body.at("reasoning"), "effort")) chat["reasoning_effort"] = body.at("reasoning").at("effort");
  // Fields the chat reads by the same name and meaning (OpenAI's, then the extensions vLLM's Responses
  // take too, and the rest of the chat's, which it honours or refuses by name: none is dropped unread).
  for (const char* field : {"model", "stream", "temperature", "top_p", "parallel_tool_calls", "seed", "user", "request_id", "include_reasoning",
                            "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "stop",
                            "stop_token_ids", "ignore_eos", "min_tokens", "structured_outputs", "allowed_token_ids", "truncate_prompt_tokens",
                            "skip_special_tokens", "include_stop_str_in_output", "priority", "cache_salt", "vllm_xargs", "bad_words",
                            "logits_processors", "prompt_logprobs", "return_token_ids", "return_tokens_as_token_ids", "guided_whitespace_pattern",
                            "prompt_embeds", "kv_transfer_params", "typical_p", "length_penalty", "use_beam_search", "best_of", "echo", "suffix",
                            "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend", "chat_template",
                            "chat_template_kwargs", "documents", "add_special_tokens", "add_generation_prompt", "continue_final_message",
                            "audio", "modalities", "web_search_options", "verbosity"})
    if (given(body, field)) chat[field] = body.at(field);
  if (given(body, "max_output_tokens")) chat["max_tokens"] = body.at("max_output_tokens");
  if (!given(body, "input")) refuse("input", "is missing");
  json messages = chat_messages(body.at("input"));
  if (given(body, "instructions")) {
    if (!body.at("instructions").is_string()) refuse("instructions", "must be a string, got " + brief(body.at("instructions")));
    messages.insert(messages.begin(), json{{"role", "system"}, {"content", body.at("instructions")}});
  }
  chat["messages"] = messages;
  if (given(body, "tools")) chat["tools"] = chat_tools(body.at("tools"));
  if (given(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(body.at("tool_choice"));
  if (given(body, "text")) {
    const json format = chat_response_format(body.at("text"));
    if (!format.is_null()) chat["response_format"] = format;
  }
  return chat;
}

json response_of_chat_completion(const json& chat_reply, const json& request) {
  const json& choice = chat_reply.at("choices").at(0);
  const json& message = choice.at("message");
  // The chat's id is "chatcmpl-N": the response and its items are numbered by the same N.
  const std::string chat_id = chat_reply.at("id").get<std::string>();
  const std::string number = chat_id.substr(chat_id.find('-') + 1);
  const bool cut = choice.at("finish_reason") == "length";
  json output = json::array();
  if (message.contains("reasoning_content") && message.at("reasoning_content").is_string() && !message.at("reasoning_content").get<std::string>().empty())
    output.push_back({{"type", "reasoning"},
                      {"id", "rs_" + number},
                      {"summary", json::array()},
                      {"content", {{{"type", "reasoning_text"}, {"text", message.at("reasoning_content")}}}}});
  if (message.at("content").is_string() && !message.at("content").get<std::string>().empty())
    output.push_back({{"type", "message"},
                      {"id", "msg_" + number},
                      {"status", cut ? "incomplete" : "completed"},
                      {"role", "assistant"},
                      {"content", {{{"type", "output_text"}, {"text", message.at("content")}, {"annotations", json::array()}, {"logprobs", json::array()}}}}});
  const json calls = message.value("tool_calls", json::array());
  for (size_t k = 0; k < calls.size(); ++k)
    output.push_back({{"type", "function_call"},
                      {"id", "fc_" + number + "_" + std::to_string(k)},
                      {"call_id", calls[k].at("id")},
                      {"name", calls[k].at("function").at("name")},
                      {"arguments", calls[k].at("function").at("arguments")},
                      {"status", cut ? "incomplete" : "completed"}});
  const json& usage = chat_reply.at("usage");
  auto request_or = [&](const char* field, const json& otherwise) { return given(request, field) ? request.at(field) : otherwise; };
  return {{"id", "resp_" + number},
          {"object", "response"},
          {"created_at", chat_reply.at("created")},
          {"status", cut ? "incomplete" : "completed"},
          {"incomplete_details", cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
          {"error", nullptr},
          {"model", chat_reply.at("model")},
          {"output", output},
          {"instructions", request_or("instructions", nullptr)},
          {"max_output_tokens", request_or("max_output_tokens", nullptr)},
          {"parallel_tool_calls", request_or("parallel_tool_calls", true)},
          {"temperature", request_or("temperature", nullptr)},
          {"top_p", request_or("top_p", nullptr)},
          {"tool_choice", request_or("tool_choice", "auto")},
          {"tools", request_or("tools", json::array())},
          {"text", request_or("text", json{{"format", {{"type", "text"}}}})},
          {"metadata", request_or("metadata", json::object())},
          {"store", false},
          {"usage",
           {{"input_tokens", usage.at("prompt_tokens")},
            {"input_tokens_details", {{"cached_tokens", usage.at("prompt_tokens_details").at("cached_tokens")}}},
            {"output_tokens", usage.at("completion_tokens")},
            // The chat's count of thinking tokens (kept with --reasoning-parser; without one, none reasoned).
            {"output_tokens_details",
             {{"reasoning_tokens", usage.contains("completion_tokens_details") ? usage.at("completion_tokens_details").at("reasoning_tokens") : json(0)}}},
            {"total_tokens", usage.at("total_tokens")}}}};
}

json responses_echoed_fields(const json& request) {
  json echoed = json::object();
  for (const char* field : {"instructions", "max_output_tokens", "parallel_tool_calls", "temperature", "top_p", "tool_choice", "tools", "text", "metadata"})
    if (request.contains(field)) echoed[field] = request.at(field);
  return echoed;
}

std::string ResponsesStream::event(const std::string& type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return "event: " + type + "\ndata: " + fields.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json ResponsesStream::response(const std::string& status) const {
  // The Response of what has come so far; its output is the items as the stream gave them.
  json chat = chat_;
  if (!chat.contains("usage")) chat["usage"] = {{"prompt_tokens", 0}, {"completion_tokens", 0}, {"total_tokens", 0}, {"prompt_tokens_details", {{"cached_tokens", 0}}}};
  json built = response_of_chat_completion(chat, request_);
  built["output"] = output_;
  built["status"] = status;
  if (status == "in_progress") {
    built["usage"] = nullptr;
    built["incomplete_details"] = nullptr;
  }
  return built;
}

std::string ResponsesStream::start(const json& chat_chunk) {
  if (started_) return "";
  started_ = true;
  chat_ = {{"id", chat_chunk.at("id")}, {"created", chat_chunk.at("created")}, {"model", chat_chunk.at("model")},
           {"choices", {{{"message", {{"role", "assistant"}, {"content", nullptr}}}, {"finish_reason", nullptr}}}}};
  const std::string chat_id = chat_chunk.at("id").get<std::string>();
  number_ = chat_id.substr(chat_id.find('-') + 1);  // "chatcmpl-N": the items are numbered by N, as unstreamed
  const json shell = response("in_progress");
  std::string out = event("response.created", {{"response", shell}});  // numbered first: its own statement
  return out + event("response.in_progress", {{"response", shell}});
}

std::string ResponsesStream::open_text(const std::string& type, const std::string& id) {
  if (open_text_ >= 0 && output_[open_text_].at("type") == type) return "";
  std::string out = close_text();
  const bool message = type == "message";
  json item = message ? json{{"type", "message"}, {"id", id}, {"status", "in_progress"}, {"role", "assistant"}, {"content", json::array()}}
                      : json{{"type", "reasoning"}, {"id", id}, {"summary", json::array()}, {"content", json::array()}};
  open_text_ = int(output_.size());
  output_.push_back(item);
  const json part = message ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}, {"logprobs", json::array()}}
                            : json{{"type", "reasoning_text"}, {"text", ""}};
  out += event("response.output_item.added", {{"output_index", open_text_}, {"item", item}});
  out += event("response.content_part.added", {{"item_id", id}, {"output_index", open_text_}, {"content_index", 0}, {"part", part}});
  output_[open_text_]["content"].push_back(part);
  return out;
}

std::string ResponsesStream::close_text() {
  if (open_text_ < 0) return "";
  json& item = output_[open_text_];
  const bool message = item.at("type") == "message";
  const std::string id = item.at("id").get<std::string>();
  const json part = item.at("content")[0];
  json done = {{"item_id", id}, {"output_index", open_text_}, {"content_index", 0}, {"text", part.at("text")}};
  if (message) done["logprobs"] = json::array();
  std::string out = event(message ? "response.output_text.done" : "response.reasoning_text.done", done);
  out += event("response.content_part.done", {{"item_id", id}, {"output_index", open_text_}, {"content_index", 0}, {"part", part}});
  if (message) item["status"] = chat_.at("choices")[0].at("finish_reason") == "length" ? "incomplete" : "completed";
  out += event("response.output_item.done", {{"output_index", open_text_}, {"item", item}});
  open_text_ = -1;
  return out;
}

std::string ResponsesStream::close_call() {
  if (open_call_ < 0) return "";
  json& item = output_[open_call_];
  std::string out = event("response.function_call_arguments.done",
                          {{"item_id", item.at("id")}, {"output_index", open_call_}, {"name", item.at("name")}, {"arguments", item.at("arguments")}});
  item["status"] = chat_.at("choices")[0].at("finish_reason") == "length" ? "incomplete" : "completed";
  out += event("response.output_item.done", {{"output_index", open_call_}, {"item", item}});
  open_call_ = -1;
  return out;
}

void ResponsesStream::ending(const std::string& finish_reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_) chat_["choices"][0]["finish_reason"] = finish_reason;
}

std::string ResponsesStream::open_call(size_t index) {
  std::string out = close_text();
  out += close_call();
  const json& pending = pending_calls_.at(index);
  const json item = {{"type", "function_call"}, {"id", "fc_" + number_ + "_" + std::to_string(index)}, {"call_id", pending.at("id")},
                     {"name", pending.at("name")}, {"arguments", ""}, {"status", "in_progress"}};
  calls_[index] = output_.size();
  open_call_ = int(output_.size());
  out += event("response.output_item.added", {{"output_index", output_.size()}, {"item", item}});
  output_.push_back(item);
  return out;
}

std::string ResponsesStream::events(const json& chat_chunk) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (chat_chunk.contains("error")) {  // the reply failed after its head: the error, then the response as it stands, failed
    const json& error = chat_chunk.at("error");
    const json message = error.value("message", json(""));
    std::string out = event("error", {{"code", error.value("code", json())}, {"message", message}, {"param", error.value("param", json())}});
    if (!started_) return out;
    chat_["choices"][0]["finish_reason"] = "length";  // what was written is cut short
    out += close_text();
    out += close_call();
    json failed = response("failed");
    failed["error"] = {{"code", error.value("type", json()) == "invalid_request_error" ? "invalid_prompt" : "server_error"}, {"message", message}};
    failed["incomplete_details"] = nullptr;
    return out + event("response.failed", {{"response", failed}});
  }
  std::string out = start(chat_chunk);
  if (chat_chunk.contains("usage") && !chat_chunk.at("usage").is_null()) chat_["usage"] = chat_chunk.at("usage");
  if (!chat_chunk.contains("choices") || chat_chunk.at("choices").empty()) return out;
  const json& choice = chat_chunk.at("choices")[0];
  json& message = chat_["choices"][0]["message"];
  if (!choice.at("finish_reason").is_null()) chat_["choices"][0]["finish_reason"] = choice.at("finish_reason");
  const json delta = choice.value("delta", json::object());
  const std::string& number = number_;
  // Text, thinking first: the item it belongs to opened (the other closed), its delta.
  for (const auto& [field, type, id, delta_event] :
       {std::tuple{"reasoning_content", "reasoning", "rs_" + number, "response.reasoning_text.delta"},
        std::tuple{"content", "message", "msg_" + number, "response.output_text.delta"}}) {
    if (!delta.contains(field) || !delta.at(field).is_string() || delta.at(field).get<std::string>().empty()) continue;
    const std::string piece = delta.at(field).get<std::string>();
    // Appended where they are: a copy of the text so far per piece would be quadratic in the reply.
    if (!message.contains(field) || !message.at(field).is_string()) message[field] = "";
    message[field].get_ref<std::string&>() += piece;
    out += open_text(type, id);
    output_[open_text_]["content"][0]["text"].get_ref<std::string&>() += piece;
    json fields = {{"item_id", id}, {"output_index", open_text_}, {"content_index", 0}, {"delta", piece}};
    if (std::string(type) == "message") fields["logprobs"] = json::array();
    out += event(delta_event, fields);
  }
  // Calls: an id and a name make a call pending; its first arguments open its item.
  for (const json& call : delta.value("tool_calls", json::array())) {
    const size_t index = call.at("index").get<size_t>();
    const json function = call.value("function", json::object());
    if (call.contains("id")) {
      pending_calls_[index] = {{"id", call.at("id")}, {"name", function.value("name", json(""))}};
      message["tool_calls"].push_back({{"id", call.at("id")}, {"type", "function"}, {"function", {{"name", function.value("name", json(""))}, {"arguments", ""}}}});
    }
    const std::string arguments = function.contains("arguments") && function.at("arguments").is_string() ? function.at("arguments").get<std::string>() : "";
    if (arguments.empty() || !pending_calls_.count(index)) continue;
    if (!calls_.count(index)) out += open_call(index);
    json& item = output_[calls_.at(index)];
    item["arguments"].get_ref<std::string&>() += arguments;
    message["tool_calls"][index]["function"]["arguments"].get_ref<std::string&>() += arguments;
    out += event("response.function_call_arguments.delta", {{"item_id", item.at("id")}, {"output_index", calls_.at(index)}, {"delta", arguments}});
  }
  return out;
}

std::string ResponsesStream::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!started_) return "";  // no chunk came: there is no reply to end
  std::string out = close_text();
  for (const auto& [index, pending] : pending_calls_)
    if (!calls_.count(index)) out += open_call(index);  // a call of no arguments
  out += close_call();
  const bool cut = chat_.at("choices")[0].at("finish_reason") == "length";
  const json whole = response(cut ? "incomplete" : "completed");
  return out + event(cut ? "response.incomplete" : "response.completed", {{"response", whole}});
}

}  // namespace tilefire::cli
