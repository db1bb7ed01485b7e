#include "serve_chat_reply.h"

namespace tilefire::cli {

using nlohmann::json;

ChatReplyReader::ChatReplyReader(const ToolCalling& calling, ReasoningParser reasoning)
    : calling_(calling.for_reading()),
      reasoning_(reasoning),
      call_id_(calling.choice == ToolCalling::Choice::named ? new_tool_call_id(calling.parser) : ""),
      tools_(calling_),
      thinking_(reasoning) {}

json ChatReplyReader::message(const std::string& text, std::string& finish_reason) const {
  const ReasonedReply reasoned = split_reasoning(reasoning_, text);
  json message = {{"role", "assistant"}, {"content", reasoned.content}};
  if (calling_.reads_calls()) {
    const ToolReply read = read_tool_reply(calling_, reasoned.content.is_string() ? reasoned.content.get<std::string>() : "");
    if (read.called() || reasoned.content.is_string()) message = assistant_message(read);
    finish_reason = tool_finish_reason(calling_, read, finish_reason);
  }
  if (reasoning_ != ReasoningParser::none) message["reasoning_content"] = reasoned.reasoning;
  return message;
}

json ChatReplyReader::head() const {
  if (calling_.choice == ToolCalling::Choice::named) return named_call_head(calling_, call_id_);
  return {{"role", "assistant"}, {"content", ""}};
}

json ChatReplyReader::delta(const std::string& piece) { return delta_of(thinking_.add(piece)); }

// A named function's reply is its arguments, after any thinking; another's content is read for calls.
json ChatReplyReader::delta_of(const ReasoningStream::Pieces& pieces) {
  json out = json::object();
  if (calling_.choice == ToolCalling::Choice::named) {
    if (!pieces.content.empty()) out = arguments_delta(pieces.content);
  } else {
    const std::string content = calling_.reads_calls() ? tools_.content(pieces.content) : pieces.content;
    if (!content.empty()) out["content"] = content;
  }
  if (!pieces.reasoning.empty()) out["reasoning_content"] = pieces.reasoning;
  return out;
}

std::vector<json> ChatReplyReader::finish(std::string& finish_reason) {
  std::vector<json> deltas;
  // What the thinking's tags held back, then the content's.
  const json held = delta_of(thinking_.finish());
  if (!held.empty()) deltas.push_back(held);
  if (!calling_.reads_calls() || calling_.choice == ToolCalling::Choice::named) return deltas;  // a named call is its arguments
  const ToolReply read = tools_.finish();
  const std::string unsent = tools_.unsent_content(read);
  if (!unsent.empty()) deltas.push_back({{"content", unsent}});
  if (read.called()) deltas.push_back(tool_calls_delta(read));
  finish_reason = tool_finish_reason(calling_, read, finish_reason);
  return deltas;
}

}  // namespace tilefire::cli
