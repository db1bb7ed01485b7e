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

json ChatReplyReader::delta(const std::string& piece) {
  if (calling_.choice == ToolCalling::Choice::named) return arguments_delta(piece);
  const ReasoningStream::Pieces pieces = thinking_.add(piece);
  const std::string content = calling_.reads_calls() ? tools_.content(pieces.content) : pieces.content;
  json out = json::object();
  if (!pieces.reasoning.empty()) out["reasoning_content"] = pieces.reasoning;
  if (!content.empty()) out["content"] = content;
  return out;
}

std::vector<json> ChatReplyReader::finish(std::string& finish_reason) {
  if (calling_.choice == ToolCalling::Choice::named) return {};
  std::vector<json> deltas;
  json held = json::object();  // what the thinking's tags held back, then the content's
  const ReasoningStream::Pieces rest = thinking_.finish();
  if (!rest.reasoning.empty()) held["reasoning_content"] = rest.reasoning;
  const std::string content = calling_.reads_calls() ? tools_.content(rest.content) : rest.content;
  if (!content.empty()) held["content"] = content;
  if (!held.empty()) deltas.push_back(held);
  if (!calling_.reads_calls()) return deltas;
  const ToolReply read = tools_.finish();
  const std::string unsent = tools_.unsent_content(read);
  if (!unsent.empty()) deltas.push_back({{"content", unsent}});
  if (read.called()) deltas.push_back(tool_calls_delta(read));
  finish_reason = tool_finish_reason(calling_, read, finish_reason);
  return deltas;
}

}  // namespace tilefire::cli
