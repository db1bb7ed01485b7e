#include "tool_call_formats.h"

#include <algorithm>
#include <string>
#include <vector>

#include "json_text.h"
#include "pythonic_calls.h"
#include "xml_calls.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

// A call the model wrote: {"name": N, "arguments" or "parameters": {...}} and nothing else, N one of
// the request's tools; null when it is not one (a JSON answer that has a "name" is an answer).
json call_of_object(const json& object, const ToolCalling& calling) {
  const std::vector<std::string>& names = calling.names;
  if (!object.is_object() || !object.contains("name") || !object.at("name").is_string()) return nullptr;
  const std::string name = object.at("name").get<std::string>();
  if (std::find(names.begin(), names.end(), name) == names.end()) return nullptr;
  const size_t given_arguments = object.count("arguments") + object.count("parameters");
  if (given_arguments > 1 || object.size() != 1 + given_arguments) return nullptr;
  const json& arguments = given_arguments == 0 ? json::object() : object.contains("arguments") ? object.at("arguments") : object.at("parameters");
  if (!arguments.is_object()) return nullptr;
  return tool_call(calling, name, dump_json(arguments));
}

// Each of `objects` as a call, added to the reply's; false when one is not a call.
bool add_calls(const json& objects, const ToolCalling& calling, ToolReply& reply) {
  for (const json& object : objects) {
    const json made = call_of_object(object, calling);
    if (made.is_null()) return false;
    reply.tool_calls.push_back(made);
  }
  return true;
}

// Hermes' calls: <tool_call>{...}</tool_call> blocks anywhere in the text; the text around them is the
// content. Null when a block is not whole or not a call.
std::optional<ToolReply> hermes_calls(const std::string& text, const ToolCalling& calling) {
  ToolReply reply;
  std::string content;
  size_t at = 0;
  for (size_t open; (open = text.find(kHermesOpen, at)) != std::string::npos;) {
    content += text.substr(at, open - at);
    const size_t body = open + marker_length(kHermesOpen);
    const size_t close = text.find(kHermesClose, body);
    if (close == std::string::npos) return std::nullopt;
    const std::optional<json> object = parse_json(text.substr(body, close - body));
    if (!object) return std::nullopt;
    const json made = call_of_object(*object, calling);
    if (made.is_null()) return std::nullopt;
    reply.tool_calls.push_back(made);
    at = close + marker_length(kHermesClose);
  }
  content += text.substr(at);
  reply.content = only_whitespace(content) && reply.called() ? json(nullptr) : json(content);
  return reply;
}

std::string trimmed(const std::string& text) {
  size_t end = text.size();
  while (end > 0 && is_json_whitespace(text[end - 1])) --end;
  const size_t begin = std::min(skip_whitespace(text, 0), end);
  return text.substr(begin, end - begin);
}

// Llama 3's calls: the whole reply, after an optional <|python_tag|>, is {"name": N, "parameters": {...}},
// or several separated by ";". Null when it is not.
std::optional<ToolReply> llama3_calls(const std::string& text, const ToolCalling& calling) {
  size_t at = skip_whitespace(text, 0);
  if (text.compare(at, marker_length(kPythonTag), kPythonTag) == 0)
    at = skip_whitespace(text, at + marker_length(kPythonTag));
  ToolReply reply;
  while (true) {
    if (at >= text.size() || text[at] != '{') return std::nullopt;
    const size_t end = scan_brackets(text, at, true).closed_at;
    if (end == std::string::npos) return std::nullopt;
    const std::optional<json> object = parse_json(text.substr(at, end - at));
    if (!object) return std::nullopt;
    const json made = call_of_object(*object, calling);
    if (made.is_null()) return std::nullopt;
    reply.tool_calls.push_back(made);
    at = skip_whitespace(text, end);
    if (at == text.size()) break;
    if (text[at] != ';') return std::nullopt;
    at = skip_whitespace(text, at + 1);
    if (at == text.size()) break;
  }
  reply.content = nullptr;
  return reply;
}

// Mistral's calls: the text before the first [TOOL_CALLS] is the content, and after it come calls alone
// (whitespace between them), in either of the forms Mistral's tokenizers teach: a JSON list of
// {"name", "arguments"} objects (tokenizer versions up to 7), or name[ARGS]{...} (version 11 on), each
// call after a [TOOL_CALLS] of its own. Null when they do not read whole.
std::optional<ToolReply> mistral_calls(const std::string& text, const ToolCalling& calling) {
  const size_t first = text.find(kMistralCalls);
  if (first == std::string::npos) return std::nullopt;
  ToolReply reply;
  // The JSON value that begins at `at`: null when it does not read whole (`at` then of no use).
  auto value_at = [&](size_t& at) -> std::optional<json> {
    if (at >= text.size() || (text[at] != '{' && text[at] != '[')) return std::nullopt;
    const size_t end = scan_brackets(text, at, true).closed_at;
    if (end == std::string::npos) return std::nullopt;
    std::optional<json> value = parse_json(text.substr(at, end - at));
    at = end;
    return value;
  };
  for (size_t at = first; at < text.size(); at = skip_whitespace(text, at)) {
    if (text.compare(at, marker_length(kMistralCalls), kMistralCalls) != 0) return std::nullopt;
    at = skip_whitespace(text, at + marker_length(kMistralCalls));
    json objects = json::array();
    if (at < text.size() && (text[at] == '[' || text[at] == '{')) {  // [{"name": N, "arguments": {...}}, ...]
      const std::optional<json> value = value_at(at);
      if (!value) return std::nullopt;
      if (value->is_array()) {
        objects = *value;
      } else {
        objects.push_back(*value);
      }
      // Mistral's templates write each earlier call with its id, which a model may copy: it is no argument.
      for (json& object : objects)
        if (object.is_object() && object.contains("id") && object.at("id").is_string()) object.erase("id");
    } else {  // N[ARGS]{...}
      const size_t name_begin = at;
      while (at < text.size() && (std::isalnum(static_cast<unsigned char>(text[at])) || text[at] == '_' || text[at] == '-')) ++at;
      const std::string name = text.substr(name_begin, at - name_begin);
      if (text.compare(at, marker_length(kMistralArgs), kMistralArgs) == 0) at += marker_length(kMistralArgs);
      const std::optional<json> arguments = value_at(at);
      if (!arguments) return std::nullopt;
      objects.push_back({{"name", name}, {"arguments", *arguments}});
    }
    if (objects.empty() || !add_calls(objects, calling, reply)) return std::nullopt;
  }
  const std::string content = text.substr(0, first);
  reply.content = only_whitespace(content) ? json(nullptr) : json(content);
  return reply;
}

// One DeepSeek call, what its tokens hold between them: V3's and R1's `function<sep>N` and the arguments
// fenced as JSON on the lines after it (```json ... ```), or V3.1's `N<sep>{...}`. Null when it is neither.
std::optional<json> deepseek_call(const std::string& inside) {
  const size_t separator = inside.find(kDeepSeekSeparator);
  if (separator == std::string::npos) return std::nullopt;
  const std::string head = trimmed(inside.substr(0, separator)), rest = inside.substr(separator + marker_length(kDeepSeekSeparator));
  const size_t line_end = rest.find('\n');
  if (head == "function" && line_end != std::string::npos) {
    size_t begin = skip_whitespace(rest, line_end), end = rest.size();
    while (end > begin && is_json_whitespace(rest[end - 1])) --end;
    const std::string_view fenced = std::string_view(rest).substr(begin, end - begin);
    if (fenced.size() >= 10 && fenced.substr(0, 7) == "```json" && fenced.substr(fenced.size() - 3) == "```") {
      const std::optional<json> arguments = parse_json(std::string(fenced.substr(7, fenced.size() - 10)));
      if (!arguments) return std::nullopt;
      return json{{"name", trimmed(rest.substr(0, line_end))}, {"arguments", *arguments}};  // "\r\n" ends a line too
    }
  }
  const std::optional<json> arguments = parse_json(rest);
  if (!arguments) return std::nullopt;
  return json{{"name", head}, {"arguments", *arguments}};
}

// DeepSeek's calls (V3, R1 and V3.1): the text before <|tool calls begin|> is the content; after it come
// calls alone, each between <|tool call begin|> and <|tool call end|> (whitespace between them), then
// <|tool calls end|>, or the reply's end where the model's end came first. Null when they do not read whole.
std::optional<ToolReply> deepseek_calls(const std::string& text, const ToolCalling& calling) {
  const size_t first = text.find(kDeepSeekCalls);
  if (first == std::string::npos) return std::nullopt;
  json objects = json::array();
  size_t at = skip_whitespace(text, first + marker_length(kDeepSeekCalls));
  while (text.compare(at, marker_length(kDeepSeekCall), kDeepSeekCall) == 0) {
    const size_t begin = at + marker_length(kDeepSeekCall);
    const size_t end = text.find(kDeepSeekCallEnd, begin);
    if (end == std::string::npos) return std::nullopt;
    const std::optional<json> object = deepseek_call(text.substr(begin, end - begin));
    if (!object) return std::nullopt;
    objects.push_back(*object);
    at = skip_whitespace(text, end + marker_length(kDeepSeekCallEnd));
  }
  if (text.compare(at, marker_length(kDeepSeekCallsEnd), kDeepSeekCallsEnd) == 0) at = skip_whitespace(text, at + marker_length(kDeepSeekCallsEnd));
  ToolReply reply;
  if (objects.empty() || at != text.size() || !add_calls(objects, calling, reply)) return std::nullopt;
  const std::string content = text.substr(0, first);
  reply.content = only_whitespace(content) ? json(nullptr) : json(content);
  return reply;
}

// Phi-4-mini's calls: the text before `functools[` is the content; after `functools` comes a JSON list of
// {"name": N, "arguments": {...}} and nothing but whitespace. Null when it does not.
std::optional<ToolReply> phi4_mini_calls(const std::string& text, const ToolCalling& calling) {
  const size_t first = text.find(std::string(kPhi4MiniCalls) + "[");
  if (first == std::string::npos) return std::nullopt;
  const size_t at = first + marker_length(kPhi4MiniCalls);
  const size_t end = scan_brackets(text, at, true).closed_at;
  if (end == std::string::npos || skip_whitespace(text, end) != text.size()) return std::nullopt;
  const std::optional<json> list = parse_json(text.substr(at, end - at));
  ToolReply reply;
  if (!list || list->empty() || !add_calls(*list, calling, reply)) return std::nullopt;
  const std::string content = text.substr(0, first);
  reply.content = only_whitespace(content) ? json(nullptr) : json(content);
  return reply;
}

// Pythonic calls (Llama 3.2, and Llama 4 between its python tokens): the whole reply is
// [name(key=value, ...), ...] (pythonic_calls.h). Null when it is not.
std::optional<ToolReply> pythonic_reply(const std::string& text, const ToolCalling& calling) {
  size_t begin = skip_whitespace(text, 0);
  if (text.compare(begin, marker_length(kPythonStart), kPythonStart) == 0) begin += marker_length(kPythonStart);
  size_t end = text.size();
  while (end > begin && is_json_whitespace(text[end - 1])) --end;
  const size_t end_tag = marker_length(kPythonEnd);
  if (end - begin >= end_tag && text.compare(end - end_tag, end_tag, kPythonEnd) == 0) end -= end_tag;
  const std::optional<json> objects = pythonic_calls(std::string_view(text).substr(begin, end - begin), kMostJsonNesting);
  ToolReply reply;
  reply.content = nullptr;
  if (!objects || !add_calls(*objects, calling, reply)) return std::nullopt;
  return reply;
}

// Granite's calls: the whole reply is <|tool_call|> (Granite 3.0) or <tool_call> (3.1 on) and a JSON list
// of {"name": N, "arguments": {...}}. Null when it is not.
std::optional<ToolReply> granite_calls(const std::string& text, const ToolCalling& calling) {
  size_t at = skip_whitespace(text, 0);
  if (text.compare(at, marker_length(kGraniteCalls), kGraniteCalls) == 0) {
    at += marker_length(kGraniteCalls);
  } else if (text.compare(at, marker_length(kHermesOpen), kHermesOpen) == 0) {
    at += marker_length(kHermesOpen);
  } else {
    return std::nullopt;
  }
  at = skip_whitespace(text, at);
  const size_t end = at < text.size() && text[at] == '[' ? scan_brackets(text, at, true).closed_at : std::string::npos;
  if (end == std::string::npos || skip_whitespace(text, end) != text.size()) return std::nullopt;
  const std::optional<json> list = parse_json(text.substr(at, end - at));
  ToolReply reply;
  reply.content = nullptr;
  if (!list || list->empty() || !add_calls(*list, calling, reply)) return std::nullopt;
  return reply;
}

// Qwen3-Coder's calls: <tool_call> blocks of <function=N> and its <parameter=K> values anywhere in the
// text (xml_calls.h), each value read as its function's schema types it; the text around them is the
// content. Null when a block does not read, or names no tool.
std::optional<ToolReply> qwen3_coder_calls(const std::string& text, const ToolCalling& calling) {
  const std::optional<XmlCallReply> read = xml_calls(text);
  if (!read) return std::nullopt;
  ToolReply reply;
  for (const XmlCall& made : read->calls) {
    if (std::find(calling.names.begin(), calling.names.end(), made.name) == calling.names.end()) return std::nullopt;
    const json& types = calling.parameter_types.contains(made.name) ? calling.parameter_types.at(made.name) : json::object();
    json arguments = json::object();
    for (const auto& [key, value] : made.parameters) arguments[key] = xml_argument_value(value, types.value(key, json()));
    reply.tool_calls.push_back(tool_call(calling, made.name, dump_json(arguments)));
  }
  reply.content = only_whitespace(read->content) ? json(nullptr) : json(read->content);
  return reply;
}

}  // namespace

size_t skip_whitespace(const std::string& text, size_t at) {
  while (at < text.size() && is_json_whitespace(text[at])) ++at;
  return at;
}

json tool_call(const ToolCalling& calling, const std::string& name, const std::string& arguments) {
  return {{"id", new_tool_call_id(calling.parser)}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

std::optional<ToolReply> calls_in_format(const ToolCalling& calling, const std::string& text) {
  switch (calling.parser) {
    case ToolCallParser::none: return std::nullopt;
    case ToolCallParser::hermes: return hermes_calls(text, calling);
    case ToolCallParser::llama3_json: return llama3_calls(text, calling);
    case ToolCallParser::mistral: return mistral_calls(text, calling);
    case ToolCallParser::pythonic: return pythonic_reply(text, calling);
    case ToolCallParser::granite: return granite_calls(text, calling);
    case ToolCallParser::qwen3_coder: return qwen3_coder_calls(text, calling);
    case ToolCallParser::deepseek_v3: return deepseek_calls(text, calling);
    case ToolCallParser::phi4_mini_json: return phi4_mini_calls(text, calling);
  }
  return std::nullopt;
}

std::optional<ToolReply> required_calls(const std::string& text, const ToolCalling& calling) {
  const std::optional<json> list = parse_json(text);
  ToolReply reply;
  reply.content = nullptr;
  if (!list || !list->is_array() || list->empty() || !add_calls(*list, calling, reply)) return std::nullopt;
  return reply;
}

}  // namespace tilefire::cli
