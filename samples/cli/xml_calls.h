#pragma once
// Tool calls in the XML-like format Qwen3-Coder's chat template teaches (`--tool-call-parser qwen3_coder`):
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   2
//   </parameter>
//   </function>
//   </tool_call>
// The template writes each argument's value as text, a mapping or list as JSON and anything else as
// Python's str() would (a string as it is, True, None, 2.5), between a line break after the parameter's
// tag and one before its end. So the text alone cannot say whether "2" is a number or a string: a value
// is read by the type its function's schema gives the parameter (xml_argument_value).
//
// The reading, block by block:
// - a block runs from <tool_call> to the first </tool_call> after it; the text around the blocks is the
//   reply's content (as Hermes' blocks are read);
// - inside it, whitespace, <function=NAME>, the parameters, the last </function>, whitespace: a value
//   may hold "</function>";
// - a parameter is <parameter=KEY>, its value, </parameter> (one line break at each end of the value is
//   the template's, not the value's). A value runs to the first </parameter> after it; where the next
//   <parameter= comes first, or none follows, the model left the end tag out (Qwen3-Coder does) and the
//   value ends at that next parameter, or at the function's end. So a value cannot hold "</parameter>",
//   "<parameter=" or "</tool_call>".
// - anything else (a block not closed, text between parameters, a parameter given twice, a name with a
//   line break or none) is no call, and the reply is its text.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tilefire::cli {

struct XmlCall {
  std::string name;
  std::vector<std::pair<std::string, std::string>> parameters;  // in the reply's order: key, value as written
};

struct XmlCallReply {
  std::string content;          // the text outside the blocks
  std::vector<XmlCall> calls;   // at least one
};

// The calls of `text`; none when it holds no <tool_call> block, or a block does not read as one call.
std::optional<XmlCallReply> xml_calls(const std::string& text);

// An argument's value as its parameter's schema types it. `schema_type` is the property's JSON Schema
// "type" (a name or a list of them; null when the schema names none, or the function has no such
// property). A value is taken as a named type that reads it whole, "string" last:
// - "null": null or None; "boolean": true, false, True or False (Python's str() writes them capitalised);
// - "integer", "number", "object", "array": a JSON text of that type (the template writes mappings and
//   lists as JSON; Python's str() of an int or a float is JSON, but for inf and nan, which stay text, as
//   does an integer past 64 bits, which would lose its digits);
// - "string": the text as it is.
// Whitespace around a value is allowed for every type but "string", which keeps it.
// None of the named types reading it, or none named, a value is read as each type but "string" would
// read it (a number, a boolean, null, an object or a list), else it is the text (quoted or not: the
// template writes a string as it is, never as JSON): a call is not dropped for a value its schema does not allow, as no parser
// of a model's calls checks them against the schema (the client does). JSON is read as the server reads
// it (json_text.h: nested past its bound, it is text).
nlohmann::json xml_argument_value(const std::string& value, const nlohmann::json& schema_type);

}  // namespace tilefire::cli
