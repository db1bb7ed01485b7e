#pragma once
// How a chat choice's reply text becomes OpenAI's assistant message, whole or as it streams: its thinking
// split off into "reasoning_content" (--reasoning-parser, serve_reasoning.h), then its content read for
// tool calls (the request's tool_choice, serve_tools.h). Without either, the message is the text.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve_reasoning.h"
#include "serve_tools.h"

namespace tilefire::cli {

class ChatReplyReader {
 public:
  // `reasoning` is none for a reply a format holds from its first token (a named or required call,
  // response_format, structured_outputs): it has no thinking to split. One held after its thinking
  // (serve_thinking_first.h) has its parser: the thinking is split off, the rest is the held reply.
  ChatReplyReader(const ToolCalling& calling, ReasoningParser reasoning);

  // The whole reply's message; `finish_reason` ("stop", "length") becomes "tool_calls" where the model's
  // own calls end it.
  nlohmann::json message(const std::string& text, std::string& finish_reason) const;

  // Streamed: the first delta (the role; a named function's call, its id and name); then a delta per
  // piece of text ({} while nothing can go out yet); then, at the end, the deltas of what was held back
  // (thinking and text that began no call, then the calls whole), `finish_reason` as message()'s.
  nlohmann::json head() const;
  nlohmann::json delta(const std::string& piece);
  std::vector<nlohmann::json> finish(std::string& finish_reason);

 private:
  nlohmann::json delta_of(const ReasoningStream::Pieces& pieces);  // a piece split by the thinking's tags

  ToolCalling calling_;  // without its tools: not needed to read a reply
  ReasoningParser reasoning_;
  std::string call_id_;  // a named function's call, streamed
  ToolCallStream tools_;
  ReasoningStream thinking_;
};

}  // namespace tilefire::cli
