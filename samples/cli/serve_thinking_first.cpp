#include "serve_thinking_first.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace tilefire::cli {
namespace {

// The one token whose text is `tag`, or -1.
int32_t token_of(const Tokenizer& tokenizer, const std::string& tag) {
  const std::vector<int32_t> ids = tokenizer.encode(tag, false);
  // Not a special token: a reply's text leaves those out, and the reader splits the thinking off by its text.
  return ids.size() == 1 && tokenizer.decode(ids, true) == tag ? ids[0] : -1;
}

// A reply's answer: its tokens after </think> (all of them with qwen3 when the first is not <think>),
// none while it is still thinking (or, with qwen3, before its first token). A reply grows a token a step,
// so the tokens are looked at once each and the answer grows with them: a reply that is no longer the
// one looked at (shorter, or another last token where the last one looked at was) is looked at anew.
class ReplyAnswer {
 public:
  explicit ReplyAnswer(const ThinkingTokens& thinking) : thinking_(thinking) {}

  const std::vector<int32_t>* of(const std::vector<int32_t>& generated) {
    if (generated.size() < looked_ || (looked_ > 0 && generated[looked_ - 1] != last_)) {
      looked_ = 0;
      answer_.reset();
    }
    for (size_t i = looked_; i < generated.size(); ++i) {
      if (answer_) {
        answer_->push_back(generated[i]);
      } else if (i == 0 && !thinking_.opened_in_prompt) {
        if (generated[i] != thinking_.open) answer_.emplace(1, generated[i]);  // no thinking: all of it is the answer
      } else if (generated[i] == thinking_.close) {
        answer_.emplace();
      }
    }
    looked_ = generated.size();
    if (looked_ > 0) last_ = generated.back();
    return answer_ ? &*answer_ : nullptr;
  }

 private:
  ThinkingTokens thinking_;
  size_t looked_ = 0;  // tokens of the reply last asked about
  int32_t last_ = -1;  // its last token
  std::optional<std::vector<int32_t>> answer_;
};

}  // namespace

std::optional<ThinkingTokens> thinking_tokens(const Tokenizer& tokenizer, ReasoningParser parser) {
  if (parser == ReasoningParser::none) return std::nullopt;
  ThinkingTokens thinking{token_of(tokenizer, "<think>"), token_of(tokenizer, "</think>"), parser == ReasoningParser::deepseek_r1};
  if (thinking.open < 0 || thinking.close < 0) return std::nullopt;
  return thinking;
}

void hold_after_thinking(GenerateRequest& request, const ThinkingTokens& thinking, const std::vector<int32_t>& ending_tokens,
                         const std::function<void(GenerateRequest&)>& constrain) {
  GenerateRequest held;  // the format alone, asked about the answer's tokens
  held.stop_tokens = request.stop_tokens;
  constrain(held);
  auto answer = std::make_shared<ReplyAnswer>(thinking);
  request.allowed_tokens = [thinking, answer, format = held.allowed_tokens, ending_tokens](const std::vector<int32_t>& generated,
                                                                                          std::vector<uint8_t>& allowed) {
    if (const std::vector<int32_t>* tokens = answer->of(generated)) return format(*tokens, allowed);
    if (generated.empty() && !thinking.opened_in_prompt) {  // qwen3's first token: the format's, or <think>
      format(generated, allowed);
      if (static_cast<size_t>(thinking.open) < allowed.size()) allowed[static_cast<size_t>(thinking.open)] = 1;
      return;
    }
    std::fill(allowed.begin(), allowed.end(), uint8_t{1});  // thinking: anything but an end
    for (int32_t token : ending_tokens)
      if (token >= 0 && static_cast<size_t>(token) < allowed.size()) allowed[static_cast<size_t>(token)] = 0;
  };
  request.stop_when = [answer, ended = held.stop_when, before = request.stop_when](const std::vector<int32_t>& generated) {
    const bool stopped = before && before(generated);  // asked first: it may watch every token (a stop string)
    const std::vector<int32_t>* tokens = answer->of(generated);
    return (tokens && ended(*tokens)) || stopped;
  };
}

}  // namespace tilefire::cli
