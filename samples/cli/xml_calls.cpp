#include "xml_calls.h"

#include <algorithm>
#include <set>

#include "json_text.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

constexpr std::string_view kBlockOpen = "<tool_call>";
constexpr std::string_view kBlockClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

size_t skip_space(std::string_view text, size_t at) {
  while (at < text.size() && is_json_whitespace(text[at])) ++at;
  return at;
}

bool starts_at(std::string_view text, size_t at, std::string_view marker) { return text.substr(at, marker.size()) == marker; }

// The name in `<function=NAME>` or `<parameter=NAME>` whose tag begins at `at`: none when the tag does not
// close on its line or names nothing. `at` moves past the tag.
std::optional<std::string> tag_name(std::string_view text, size_t& at, std::string_view opener) {
  const size_t begin = at + opener.size();
  const size_t close = text.find('>', begin);
  if (close == std::string_view::npos || close == begin) return std::nullopt;
  const std::string_view name = text.substr(begin, close - begin);
  if (name.find('\n') != std::string_view::npos || name.find('<') != std::string_view::npos) return std::nullopt;
  at = close + 1;
  return std::string(name);
}

// A value less the template's line break after its tag and before its end.
std::string value_as_written(std::string_view value) {
  if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
  if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
  return std::string(value);
}

// One block's inside (between <tool_call> and </tool_call>) as a call.
std::optional<XmlCall> block_call(std::string_view block) {
  size_t at = skip_space(block, 0);
  if (!starts_at(block, at, kFunctionOpen)) return std::nullopt;
  XmlCall call;
  const std::optional<std::string> name = tag_name(block, at, kFunctionOpen);
  if (!name) return std::nullopt;
  call.name = *name;
  // The function's end is the block's last </function>, with whitespace alone after it.
  const size_t end = block.rfind(kFunctionClose);
  if (end == std::string_view::npos || end < at || skip_space(block, end + kFunctionClose.size()) != block.size()) return std::nullopt;
  const std::string_view body = block.substr(0, end);
  std::set<std::string> keys;
  // The next end tag and the next parameter's tag, each found again only once passed: where the model
  // left the end tags out, a search from each parameter to the body's end would be quadratic.
  size_t close = 0, next = 0;
  for (at = skip_space(body, at); at < body.size(); at = skip_space(body, at)) {
    if (!starts_at(body, at, kParameterOpen)) return std::nullopt;  // text between parameters
    const std::optional<std::string> key = tag_name(body, at, kParameterOpen);
    if (!key || !keys.insert(*key).second) return std::nullopt;
    if (close != std::string_view::npos && close < at) close = body.find(kParameterClose, at);
    if (next != std::string_view::npos && next < at) next = body.find(kParameterOpen, at);
    if (close != std::string_view::npos && close < next) {  // next is npos where none follows
      call.parameters.emplace_back(*key, value_as_written(body.substr(at, close - at)));
      at = close + kParameterClose.size();
    } else {  // the end tag left out: the value runs to the next parameter or the function's end
      const size_t value_end = std::min(next, body.size());
      call.parameters.emplace_back(*key, value_as_written(body.substr(at, value_end - at)));
      at = value_end;
    }
  }
  return call;
}

// A value as one type; none when it does not read as that type.
std::optional<json> value_as(const std::string& value, const std::string& type) {
  if (type == "string") return json(value);
  std::string_view word = value;  // a word, whitespace around it allowed
  while (!word.empty() && is_json_whitespace(word.front())) word.remove_prefix(1);
  while (!word.empty() && is_json_whitespace(word.back())) word.remove_suffix(1);
  if (type == "null") return word == "null" || word == "None" ? std::optional<json>(json(nullptr)) : std::nullopt;
  if (type == "boolean") {
    if (word == "true" || word == "True") return json(true);
    if (word == "false" || word == "False") return json(false);
    return std::nullopt;
  }
  if (type != "integer" && type != "number" && type != "object" && type != "array") return std::nullopt;
  const std::optional<json> parsed = parse_json(value);  // whitespace around it allowed, as JSON allows it
  if (!parsed) return std::nullopt;
  // An integer past 64 bits reads as a float, its digits lost: it stays text, exact.
  if (parsed->is_number_float() && value.find_first_of(".eE") == std::string::npos) return std::nullopt;
  const bool fits = type == "integer"  ? parsed->is_number_integer()
                    : type == "number" ? parsed->is_number()
                    : type == "object" ? parsed->is_object()
                                       : parsed->is_array();
  return fits ? parsed : std::nullopt;
}

}  // namespace

std::optional<XmlCallReply> xml_calls(const std::string& text) {
  XmlCallReply reply;
  size_t at = 0;
  for (size_t open; (open = text.find(kBlockOpen, at)) != std::string::npos;) {
    reply.content += text.substr(at, open - at);
    const size_t inside = open + kBlockOpen.size();
    const size_t close = text.find(kBlockClose, inside);
    if (close == std::string::npos) return std::nullopt;
    std::optional<XmlCall> call = block_call(std::string_view(text).substr(inside, close - inside));
    if (!call) return std::nullopt;
    reply.calls.push_back(std::move(*call));
    at = close + kBlockClose.size();
  }
  if (reply.calls.empty()) return std::nullopt;
  reply.content += text.substr(at);
  return reply;
}

json xml_argument_value(const std::string& value, const json& schema_type) {
  // Each type JSON Schema names at most once (a schema may repeat one thousands of times), in its order,
  // "string" last: it reads every value.
  static const std::vector<std::string> kTypes = {"null", "boolean", "integer", "number", "object", "array", "string"};
  std::set<std::string> named;
  if (schema_type.is_string()) named.insert(schema_type.get<std::string>());
  if (schema_type.is_array())
    for (const json& type : schema_type)
      if (type.is_string()) named.insert(type.get<std::string>());
  for (const std::string& type : kTypes)
    if (named.count(type))
      if (std::optional<json> read = value_as(value, type)) return *read;
  for (const std::string& type : kTypes)
    if (type != "integer" && type != "string" && !named.count(type))  // "number" reads the integers
      if (std::optional<json> read = value_as(value, type)) return *read;
  return value;
}

}  // namespace tilefire::cli
