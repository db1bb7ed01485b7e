// The string formats a reply is held to (json_schema_node.h, asserted_format): each written as a pattern
// that matches a subset of what the format allows, so a reply is valid whether a validator asserts the
// format (Ajv with ajv-formats, OpenAI's structured outputs) or reads it as an annotation (JSON Schema
// 2020-12's default). Where a format allows several spellings the pattern takes one: upper-case T and Z,
// a numeric offset with a colon, lower-case hex, at most 9 digits where the format allows any number.
#include <map>
#include <string>

#include "json_schema_node.h"

namespace tilefire {
namespace {

// RFC 3339's full-date, each month with its own days and 29 February in leap years only (divisible by 4,
// and by 400 when a century).
const char* const kDate =
    R"((?:\d{4}-(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|\d{4}-(?:0[469]|11)-(?:0[1-9]|[12]\d|30))"
    R"(|\d{4}-02-(?:0[1-9]|1\d|2[0-8])|(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29))";
// RFC 3339's full-time: no leap second, an offset always.
const char* const kTime = R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
// ISO 8601's duration as RFC 3339's appendix A has it: weeks alone, or date parts then time parts, each
// in order and at least one of them.
const char* const kDurationTime = R"(T(?:\d{1,9}H(?:\d{1,9}M)?(?:\d{1,9}S)?|\d{1,9}M(?:\d{1,9}S)?|\d{1,9}S))";
const char* const kHostLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const char* const kUriCharacters = "-A-Za-z0-9._~!$&'()*+,;=:@";  // RFC 3986's unreserved, sub-delims, ':' and '@'

std::string ipv6() {  // eight groups of hex, or fewer with "::" standing for the rest
  const std::string group = "[0-9a-f]{1,4}";
  std::string pattern = "^(?:(?:" + group + ":){7}" + group;
  for (int before = 0; before <= 7; ++before)
    for (int after = 0; before + after <= 7; ++after) {
      pattern += "|";
      if (before > 0) pattern += "(?:" + group + ":){" + std::to_string(before - 1) + "}" + group;
      pattern += "::";
      if (after > 0) pattern += group + "(?::" + group + "){" + std::to_string(after - 1) + "}";
    }
  return pattern + ")$";
}

std::map<std::string, StringFormat, std::less<>> compile_formats() {
  const std::string date = kDate, time = kTime, label = kHostLabel, uri = kUriCharacters;
  const std::string duration = std::string("^P(?:\\d{1,9}W|(?:\\d{1,9}Y(?:\\d{1,9}M)?(?:\\d{1,9}D)?|\\d{1,9}M(?:\\d{1,9}D)?|\\d{1,9}D)(?:") +
                               kDurationTime + ")?|" + kDurationTime + ")$";
  const std::vector<std::pair<std::string, std::pair<std::string, uint32_t>>> formats = {
      {"date", {"^" + date + "$", kUnfinishable}},
      {"time", {"^" + time + "$", kUnfinishable}},
      {"date-time", {"^" + date + "T" + time + "$", kUnfinishable}},
      {"duration", {duration, kUnfinishable}},
      {"email", {R"(^[A-Za-z0-9_%+-]+(?:\.[A-Za-z0-9_%+-]+)*@(?:)" + label + R"(\.)+[A-Za-z]{2,63}$)", kUnfinishable}},
      {"hostname", {"^" + label + "(?:\\." + label + ")*$", 253}},
      {"ipv4", {R"(^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$)", kUnfinishable}},
      {"ipv6", {ipv6(), kUnfinishable}},
      {"uuid", {"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", kUnfinishable}},
      {"uri", {"^(?:https?|ftp)://" + label + "(?:\\." + label + ")*(?::\\d{1,5})?(?:/(?:[" + uri + "]|%[0-9A-Fa-f]{2})*)*(?:\\?(?:[" +
                   uri + "/?]|%[0-9A-Fa-f]{2})*)?(?:#(?:[" + uri + "/?]|%[0-9A-Fa-f]{2})*)?$",
               kUnfinishable}},
  };
  std::map<std::string, StringFormat, std::less<>> compiled;
  for (const auto& [name, pattern_and_length] : formats)
    compiled.emplace(name, StringFormat{StringPattern::compile(pattern_and_length.first), pattern_and_length.second});
  return compiled;
}

}  // namespace

const StringFormat* asserted_format(std::string_view name) {
  static const std::map<std::string, StringFormat, std::less<>> formats = compile_formats();  // once, on first use
  const auto found = formats.find(name);
  return found == formats.end() ? nullptr : &found->second;
}

}  // namespace tilefire
