#pragma once
// vLLM's POST /tokenize and POST /detokenize in `tilefire serve`: what a serving stack asks of the model's
// tokenizer without generating (a prompt's token count before sending it, a chat rendered as the server
// renders it, the text of ids it holds).
//
// /tokenize takes a "prompt" (a string: encoded as /v1/completions encodes it, "add_special_tokens"
// default true) or "messages" (rendered as /v1/chat/completions renders them: with "tools", "documents",
// "chat_template_kwargs", "add_generation_prompt" and "continue_final_message", then encoded with
// "add_special_tokens" default false), and answers {"count", "max_model_len", "tokens"}, with
// "token_strs" (each token as the vocabulary spells it) when "return_token_strs" is true.
// /detokenize takes "tokens" (ids of the model's vocabulary) and answers {"prompt": their text}, special
// tokens written out; an id past the tokenizer's (a padding row of the model's vocabulary) has no text.
// A model without a tokenizer reads text as bytes, one token each, as its completions do.
#include <string>

#include <nlohmann/json.hpp>

#include "serve_tools.h"
#include "tilefire/chat.h"
#include "tilefire/engine.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

// InputError naming the field for a body that asks for something else or holds a bad value.
nlohmann::json tokenize_reply(const nlohmann::json& body, const Tokenizer* tokenizer, const ChatTemplate* chat_template,
                              const ModelInfo& model, ToolCallParser tool_call_parser);
nlohmann::json detokenize_reply(const nlohmann::json& body, const Tokenizer* tokenizer, const ModelInfo& model);

}  // namespace tilefire::cli
