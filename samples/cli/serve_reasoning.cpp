#include "serve_reasoning.h"

#include <algorithm>

#include "tilefire/errors.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

const std::string kOpen = "<think>";
const std::string kClose = "</think>";

bool starts_with(const std::string& text, const std::string& prefix) { return text.compare(0, prefix.size(), prefix) == 0; }

// How many bytes at the end of `text` are a proper beginning of `tag` (the longest such tail).
size_t tail_beginning(const std::string& text, const std::string& tag) {
  for (size_t k = std::min(tag.size() - 1, text.size()); k > 0; --k)
    if (text.compare(text.size() - k, k, tag, 0, k) == 0) return k;
  return 0;
}

}  // namespace

ReasoningParser reasoning_parser_named(const std::string& name) {
  if (name == "qwen3") return ReasoningParser::qwen3;
  if (name == "deepseek_r1") return ReasoningParser::deepseek_r1;
  throw InputError("--reasoning-parser must be qwen3 (<think> opened by the reply: Qwen3) or deepseek_r1 (opened by the template: "
                   "DeepSeek-R1 and its distillations), got '" + name + "'");
}

ReasonedReply split_reasoning(ReasoningParser parser, const std::string& text) {
  ReasonedReply reply;
  if (parser == ReasoningParser::none || (parser == ReasoningParser::qwen3 && !starts_with(text, kOpen))) {
    reply.content = text;
    return reply;
  }
  const std::string thinking = starts_with(text, kOpen) ? text.substr(kOpen.size()) : text;
  const size_t close = thinking.find(kClose);
  reply.reasoning = thinking.substr(0, close);
  const std::string answer = close == std::string::npos ? "" : thinking.substr(close + kClose.size());
  if (!answer.empty()) reply.content = answer;
  return reply;
}

size_t reasoning_token_count(ReasoningParser parser, const std::vector<std::string>& token_texts) {
  std::string text;
  for (const std::string& piece : token_texts) text += piece;
  const ReasonedReply split = split_reasoning(parser, text);
  if (split.reasoning.is_null()) return 0;
  // Where the thinking ends in the text: past its </think>, or nowhere when the reply ends inside it.
  const size_t opened = starts_with(text, kOpen) ? kOpen.size() : 0;
  const size_t closed = opened + split.reasoning.get_ref<const std::string&>().size();
  if (text.compare(closed, kClose.size(), kClose) != 0) return token_texts.size();
  const size_t end = closed + kClose.size();
  size_t before = 0;  // the text's bytes before token k
  for (size_t k = 0; k < token_texts.size(); ++k) {
    before += token_texts[k].size();
    if (before >= end) return k + 1;
  }
  return token_texts.size();
}

ReasoningStream::ReasoningStream(ReasoningParser parser)
    : parser_(parser), part_(parser == ReasoningParser::none ? Part::answer : Part::opening) {}

ReasoningStream::Pieces ReasoningStream::add(const std::string& piece) {
  held_ += piece;
  return take(false);
}

ReasoningStream::Pieces ReasoningStream::finish() { return take(true); }

ReasoningStream::Pieces ReasoningStream::take(bool at_end) {
  Pieces out;
  if (part_ == Part::opening) {
    if (starts_with(held_, kOpen)) {
      held_.erase(0, kOpen.size());
      part_ = Part::thinking;
    } else if (!at_end && kOpen.compare(0, held_.size(), held_) == 0) {
      return out;  // may still be <think>
    } else {
      part_ = parser_ == ReasoningParser::qwen3 ? Part::answer : Part::thinking;
    }
  }
  if (part_ == Part::thinking) {
    const size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      const size_t keep = at_end ? 0 : tail_beginning(held_, kClose);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning = held_.substr(0, close);
    held_.erase(0, close + kClose.size());
    part_ = Part::answer;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace tilefire::cli
