#pragma once
// JSON text inside a model's reply or a request's field, read with a bound on its nesting: a parse, copy
// or dump of a value nested 100,000 deep recurses until the stack runs out, so text nested past
// kMostJsonNesting is not parsed (as a request's body is not).
#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tilefire::cli {

constexpr int kMostJsonNesting = 400;

// JSON text read by its brackets outside strings, from `begin`: the deepest nesting, and where the value
// that opens at `begin` closes (one past its bracket; npos: it does not). With `to_close`, stops there.
struct Brackets {
  int deepest = 0;
  size_t closed_at = std::string::npos;
};
Brackets scan_brackets(const std::string& text, size_t begin, bool to_close);

bool nested_past_bound(const std::string& text);

// Whether `object` (a request's body, or an object in it) holds `field` with a value: null counts as not
// given, as OpenAI's and vLLM's servers read it.
inline bool given(const nlohmann::json& object, const char* field) { return object.contains(field) && !object.at(field).is_null(); }
// The InputError of a request's field: "'field' what".
[[noreturn]] void refuse_field(const std::string& field, const std::string& what);
// JSON's whitespace: space, tab, new line, carriage return.
inline bool is_json_whitespace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
// Whether `text` is JSON's whitespace alone (or empty): where a model's reply or a call's arguments say nothing.
bool only_whitespace(const std::string& text);

// The value of a JSON text; none when it is not one, or is nested past the bound.
std::optional<nlohmann::json> parse_json(const std::string& text);

// `value` as compact JSON text, bytes that are not UTF-8 in its strings written as U+FFFD (a value read
// from a model's text, whose strings a reader of Python's literals or of XML takes as they come; a plain
// dump() would throw on them).
std::string dump_json(const nlohmann::json& value);

}  // namespace tilefire::cli
