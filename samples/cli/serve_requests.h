#pragma once
// The JSON bodies of the OpenAI completions and chat completions requests that `tilefire serve` takes, read
// into a GenerateRequest. What the engine cannot do as asked (best_of above n, echo of a chat, ...) is refused naming the field, never ignored: a reply that silently skipped what the client
// asked for would be wrong output. Fields no reply depends on ("user", ...) are ignored.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "json_text.h"
#include "reply_format.h"
#include "serve_tools.h"
#include "tilefire/chat.h"
#include "tilefire/engine.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

// Alternatives per token a request may ask for ("logprobs" of a completion, "top_logprobs" of a chat).
constexpr uint32_t kMostTopLogprobs = 20;
// Choices a request may ask for ("n"): each runs as a generation of its own, at once with --sequences.
constexpr uint32_t kMostChoices = 64;

struct ParsedRequest {
  GenerateRequest request;         // prompt (the first's), max_new_tokens, sampling, stop tokens
  // A completion's prompts (a list of them asks for each's choices, prompt by prompt); a chat's one.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> stops;  // "stop": strings that end the reply, left out of it
  bool stream = false;             // "stream": the reply as server-sent events
  // "stream_options": {"include_usage": true}: a last chunk before [DONE] of the usage alone (its choices
  // empty), the other chunks' "usage" null (OpenAI's). Without it the last choice's chunk carries it.
  bool include_usage = false;
  uint32_t choices = 1;            // "n": samples of each prompt, its choice j drawn with seed + j
  bool logprobs = false;           // the reply carries each token's log-probability
  uint32_t top_logprobs = 0;       // and that many most probable alternatives per token
  // A completion's "echo": its text begins with the prompt's as the model read it (its tokens' texts,
  // special tokens written out, as its logprobs entries name them), and with logprobs, so do its logprobs
  // (the first prompt token's null): a text's likelihood, as evaluation harnesses ask for it with
  // max_tokens 0. Not streamed.
  bool echo = false;
  // "response_format": {"type": "json_object"}: a JSON object; {"type": "json_schema", "json_schema":
  // {"schema": S, ...}}: a JSON text S accepts. vLLM's "structured_outputs": {"json": S} likewise;
  // {"regex": R}: a text R matches whole, {"choice": [T, ...]}: one of the texts, {"grammar": G}: a text the
  // GBNF grammar G derives. A reply that ends by it finishes "stop", one max_tokens cuts "length".
  ReplyFormat reply_format;
  // A chat's "tools", "tool_choice" and "parallel_tool_calls" (serve_tools.h): a named or required
  // choice also sets reply_format.
  ToolCalling tool_calling;
  // vLLM's "include_reasoning": false leaves the thinking (split off by --reasoning-parser) out of a chat's reply.
  bool include_reasoning = true;
  // vLLM's "skip_special_tokens": false writes the special tokens a reply holds into its text (the token
  // that ends it excepted, as vLLM leaves it out).
  bool skip_special_tokens = true;
  // vLLM's "request_id": the reply's id after its prefix ("chatcmpl-ID"); empty: the server numbers it.
  std::string request_id;
};

// A request's true-or-false field: `fallback` when not given, an InputError naming it when not a boolean.
bool boolean_field(const nlohmann::json& body, const char* field, bool fallback);

// A request's body as a JSON object; InputError for one that is not, or nests past 400 levels.
nlohmann::json parse_body(const std::string& body);

// InputError naming the field for a body (parse_body's) that holds a field the engine cannot honour. A
// text prompt is encoded by `tokenizer`, or taken as bytes without one.
ParsedRequest parse_completion_request(const nlohmann::json& body, const Tokenizer* tokenizer, const ModelInfo& model);
// The messages go through the chat template (a null one, or a null tokenizer, is refused), with the
// request's tools; the reply stops at the template's end of reply too. tool_choice "auto" reads calls in
// `tool_call_parser`'s format (none: refused).
// A chat request's "messages" through `chat_template` as /v1/chat/completions and /tokenize render them:
// with `tools` (as the request gives them; null: none) and the request's "documents" (a retrieval
// template's), "chat_template_kwargs" (more of the template's variables: {"enable_thinking": false}),
// "add_generation_prompt" (default true) and "continue_final_message" (default false: with it the prompt
// ends with the last message's text, for the reply to go on with it, as transformers cuts it). A request's
// own "chat_template" is refused. InputError naming the field.
std::string render_chat_prompt(const nlohmann::json& body, const ChatTemplate& chat_template, const nlohmann::json& tools,
                               ToolCallParser tool_call_parser);
// A chat request's "add_special_tokens": whether the tokenizer adds its start token to the rendered
// prompt (default false: the template writes it).
bool chat_add_special_tokens(const nlohmann::json& body);

ParsedRequest parse_chat_request(const nlohmann::json& body, const Tokenizer* tokenizer, const ChatTemplate* chat_template,
                                 const std::vector<int32_t>& end_of_reply, const ModelInfo& model, ToolCallParser tool_call_parser);

}  // namespace tilefire::cli
