#pragma once
// The text formats in which models write their tool calls, read from a whole reply for `tilefire serve
// --tool-call-parser` (serve_tools.h says which models write which), and the markers that begin them,
// which a streamed reply holds back (ToolCallStream).
#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "serve_tools.h"

namespace tilefire::cli {

inline constexpr const char* kHermesOpen = "<tool_call>";
inline constexpr const char* kHermesClose = "</tool_call>";
inline constexpr const char* kPythonTag = "<|python_tag|>";  // Llama 3's token before a call it makes
inline constexpr const char* kMistralCalls = "[TOOL_CALLS]";    // Mistral's token before its calls
inline constexpr const char* kMistralArgs = "[ARGS]";           // and, from its tokenizer version 11, between a call's name and arguments
inline constexpr const char* kPythonStart = "<|python_start|>";  // Llama 4's tokens around the pythonic calls it makes
inline constexpr const char* kPythonEnd = "<|python_end|>";
inline constexpr const char* kGraniteCalls = "<|tool_call|>";  // Granite 3.0's token before its list of calls (3.1 on: <tool_call>)
inline constexpr const char* kPhi4MiniCalls = "functools";  // Phi-4-mini's word before its list of calls
// DeepSeek's tokens around its calls, each call's, and the one between a call's parts
inline constexpr const char* kDeepSeekCalls = "<\uff5ctool\u2581calls\u2581begin\uff5c>";
inline constexpr const char* kDeepSeekCallsEnd = "<\uff5ctool\u2581calls\u2581end\uff5c>";
inline constexpr const char* kDeepSeekCall = "<\uff5ctool\u2581call\u2581begin\uff5c>";
inline constexpr const char* kDeepSeekCallEnd = "<\uff5ctool\u2581call\u2581end\uff5c>";
inline constexpr const char* kDeepSeekSeparator = "<\uff5ctool\u2581sep\uff5c>";

inline size_t marker_length(const char* marker) { return std::char_traits<char>::length(marker); }
// The first byte at or after `at` that is not JSON's whitespace.
size_t skip_whitespace(const std::string& text, size_t at);

// A call as the reply carries it: a new id (new_tool_call_id), "type" function, the name and the
// arguments' JSON text.
nlohmann::json tool_call(const ToolCalling& calling, const std::string& name, const std::string& arguments);
// The calls of a whole reply in `calling.parser`'s format, and its content around them; null when the
// reply holds none that read whole (it is then its text).
std::optional<ToolReply> calls_in_format(const ToolCalling& calling, const std::string& text);
// tool_choice "required": the reply is [{"name": N, "parameters": {...}}, ...]. Null when it does not
// parse (a reply cut short).
std::optional<ToolReply> required_calls(const std::string& text, const ToolCalling& calling);

}  // namespace tilefire::cli
