#include "json_text.h"

#include <algorithm>

#include "tilefire/errors.h"

namespace tilefire::cli {

Brackets scan_brackets(const std::string& text, size_t begin, bool to_close) {
  Brackets scan;
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      scan.deepest = std::max(scan.deepest, ++depth);
    } else if ((c == '}' || c == ']') && --depth == 0 && scan.closed_at == std::string::npos) {
      scan.closed_at = i + 1;
      if (to_close) break;
    }
  }
  return scan;
}

void refuse_field(const std::string& field, const std::string& what) { throw InputError("'" + field + "' " + what); }

bool only_whitespace(const std::string& text) { return text.find_first_not_of(" \t\n\r") == std::string::npos; }

bool nested_past_bound(const std::string& text) { return scan_brackets(text, 0, false).deepest > kMostJsonNesting; }

std::optional<nlohmann::json> parse_json(const std::string& text) {
  if (nested_past_bound(text)) return std::nullopt;
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
  if (parsed.is_discarded()) return std::nullopt;
  return parsed;
}

std::string dump_json(const nlohmann::json& value) { return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace tilefire::cli
