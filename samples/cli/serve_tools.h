#pragma once
// OpenAI's tool calling in `tilefire serve`'s /v1/chat/completions. A request's "tools" (functions, each
// with a JSON Schema of its parameters) go into the chat template's `tools` variable, as transformers'
// apply_chat_template takes them, and its "tool_choice" says how the reply is read:
// - "none": as text (the template still shows the tools);
// - {"type": "function", "function": {"name": N}}: the reply is N's arguments, held to its parameters'
//   schema by constrained decoding, so any model gives a call that parses;
// - "required": the reply is a JSON list of one call or more, [{"name": N, "parameters": {...}}], each
//   held to its function's schema the same way;
// - "auto" (the default when tools are given): the model decides, and its calls are read from its text in
//   the format its chat template taught it, named by the server's --tool-call-parser (vLLM's names):
//   - `hermes` (Qwen 2.5 and 3, Hermes): <tool_call>{"name": N, "arguments": {...}}</tool_call> blocks;
//   - `llama3_json` (Llama 3.1-3.3): the reply is {"name": N, "parameters": {...}}, calls separated by ";";
//   - `mistral`: [TOOL_CALLS] and a JSON list of {"name": N, "arguments": {...}}, or (tokenizer versions
//     11 on) [TOOL_CALLS]N[ARGS]{...} for each call, after the reply's text;
//   - `pythonic` (Llama 3.2 and 4): the reply is [N(key=value, ...), ...] (pythonic_calls.h);
//   - `granite` (Granite 3): the reply is <|tool_call|> (3.0) or <tool_call> (3.1 on) and a JSON list of
//     {"name": N, "arguments": {...}};
//   - `qwen3_coder` (Qwen3-Coder; vLLM's qwen3_xml too): <tool_call><function=N><parameter=K>value
//     </parameter>...</function></tool_call> blocks anywhere in the text, each value read by the type the
//     function's schema gives it (xml_calls.h);
//   - `deepseek_v3` (DeepSeek-V3, R1 and V3.1; vLLM's deepseek_v31 too): <|tool calls begin|>, then each
//     call between <|tool call begin|> and <|tool call end|>, either `function<|tool sep|>N` and ```json
//     {...}``` on the next lines (V3, R1) or `N<|tool sep|>{...}` (V3.1), then <|tool calls end|>, after
//     the reply's text (the tokens are written with DeepSeek's fullwidth bar and U+2581 for the space);
//   - `phi4_mini_json` (Phi-4-mini): functools[{"name": N, "arguments": {...}}, ...] after the reply's text.
//   A reply whose calls do not parse is answered as text, never dropped.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reply_format.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

enum class ToolCallParser { none, hermes, llama3_json, mistral, pythonic, granite, qwen3_coder, deepseek_v3, phi4_mini_json };

// --tool-call-parser NAME; InputError naming the flag and the names it takes.
ToolCallParser tool_call_parser_named(const std::string& name);

// The tokens of `parser`'s markers that are special in `tokenizer` (Mistral's [TOOL_CALLS] and [ARGS],
// Llama's <|python_tag|>, <|python_start|> and <|python_end|>), by id, with their text. A reply's text
// leaves special tokens out; a reply read for calls writes these, or its calls could not be found.
std::map<int32_t, std::string> special_call_markers(const Tokenizer& tokenizer, ToolCallParser parser);

struct ToolCalling {
  enum class Choice { none, automatic, required, named };
  Choice choice = Choice::none;
  nlohmann::json tools;    // the request's "tools" as given, for the template (null: none)
  std::string function;    // named: the function the reply calls
  std::vector<std::string> names;  // the tools' functions: a call the model writes names one
  bool parallel = true;    // "parallel_tool_calls": false allows one call at most
  ToolCallParser parser = ToolCallParser::none;  // automatic: the format of the model's calls
  // qwen3_coder: the JSON Schema types of each function's parameters, {"f": {"city": "string", ...}}, by
  // which a value written as text is read (xml_argument_value)
  nlohmann::json parameter_types = nlohmann::json::object();

  // Whether the reply is read for calls.
  bool reads_calls() const { return choice != Choice::none; }
  // The same, without the tools' JSON, which reading a reply does not need: what each choice's reader keeps.
  ToolCalling for_reading() const {
    ToolCalling reading = *this;
    reading.tools = nullptr;
    return reading;
  }
};

// The request's "tools", "tool_choice" and "parallel_tool_calls". For a named or required choice, sets
// `format` to hold the reply (InputError naming the field when the request already holds it: a
// response_format, structured_outputs). InputError naming the field for a tool that is not a function
// with a name and parameters Tilefire reads, a choice naming no tool, and "auto" on a server without
// --tool-call-parser. OpenAI's older "functions" and "function_call" are refused, naming "tools".
ToolCalling read_tool_calling(const nlohmann::json& body, ToolCallParser parser, ReplyFormat& format);

// The request's messages as the template takes them: an assistant message's tool calls carry their
// arguments as objects (transformers' form), where the API sends them as JSON text; InputError naming
// messages[i].tool_calls[j] when that text is not a JSON object.
nlohmann::json template_tool_calls(const nlohmann::json& messages);
// The same messages with each call's arguments as JSON text, as the client sent them ("" as "{}", as the
// object form reads it), for a template that joins them to text (DeepSeek's).
nlohmann::json template_tool_calls_as_text(const nlohmann::json& messages);

// A reply read for calls: its text without them (null when nothing but whitespace is left) and the calls,
// as OpenAI's message carries them ([{"id", "type": "function", "function": {"name", "arguments"}}],
// the arguments JSON text); no calls: the whole text is the content.
struct ToolReply {
  nlohmann::json content;
  nlohmann::json tool_calls = nlohmann::json::array();
  bool called() const { return !tool_calls.empty(); }
};

// Reads `text`, the whole reply. A named choice's reply is its call even when cut short (its arguments
// then are a prefix of a JSON text); a required choice's list, or an automatic reply's calls, only when
// they parse whole (else the reply is its text).
ToolReply read_tool_reply(const ToolCalling& calling, const std::string& text);

// A new call id: "call_" and 24 random letters and digits; with the mistral parser (the server's model is
// Mistral's, whatever the choice), 9 random letters and digits, the ids Mistral's chat templates take.
std::string new_tool_call_id(ToolCallParser parser);

// OpenAI's shapes of a reply read for calls:
// - the assistant's message: {"role": "assistant", "content": ..., "tool_calls": [...] when it made any};
nlohmann::json assistant_message(const ToolReply& reply);
// - its finish reason: "tool_calls" where calls the model chose to make ("required", "auto") end it;
//   a named function's call keeps "stop", as OpenAI's does; "length" stays;
std::string tool_finish_reason(const ToolCalling& calling, const ToolReply& reply, const std::string& finish_reason);
// - streamed, a named function's first delta (its call's id and name, no arguments yet), then each piece
//   of the reply as a delta of the arguments;
nlohmann::json named_call_head(const ToolCalling& calling, const std::string& call_id);
nlohmann::json arguments_delta(const std::string& piece);
// - streamed, a reply's calls whole in one delta, each with its index.
nlohmann::json tool_calls_delta(const ToolReply& reply);

// An automatic choice's reply as it streams: content() gives what of each piece can go to the client as
// text now, holding back what may begin a call (a marker not yet whole, and whitespace before it: hermes'
// and qwen3_coder's "<tool_call>", mistral's "[TOOL_CALLS]", DeepSeek's <|tool calls begin|>, Phi-4-mini's
// "functools["; a reply that begins with "{" or <|python_tag|> with llama3_json, with "[" or
// <|python_start|> with pythonic, with <|tool_call|> or <tool_call> with granite); once a call has begun,
// the rest waits for the end. finish() reads the whole reply; its content's part not yet streamed is
// `unsent_content()`. Each piece costs the same however long the reply has grown.
class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolCalling& calling);
  std::string content(const std::string& piece);
  ToolReply finish();
  // After finish(): the reply's content past what content() gave.
  std::string unsent_content(const ToolReply& reply) const;

 private:
  size_t streamable();  // how much of text_ can go out as content: none of it can be part of a call
  size_t streamable_before(const std::string& marker);  // hermes, mistral, qwen3_coder, deepseek_v3, phi4_mini_json: calls begin at a marker
  size_t streamable_unless_opened_by(const std::vector<std::string>& openers);  // llama3_json, pythonic, granite: calls are the whole reply

  ToolCalling calling_;  // how the reply is read (its tools left out: not needed to read it)
  std::string text_;     // the reply so far
  size_t sent_ = 0;      // bytes of text_ given as content
  bool is_text_ = false;  // text that is not whitespace goes out (llama3_json, pythonic, granite: the reply is no call)
  size_t scanned_ = 0;    // bytes of text_ looked at for text that is not whitespace
  size_t marker_ = std::string::npos;  // hermes, mistral, qwen3_coder, deepseek_v3, phi4_mini_json: where the first marker begins
  size_t searched_ = 0;   // hermes, mistral, qwen3_coder, deepseek_v3, phi4_mini_json: where a marker not yet found may begin
};

}  // namespace tilefire::cli
