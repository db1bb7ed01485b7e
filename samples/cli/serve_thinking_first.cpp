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
  return ids.size() == 1 && tokenizer.decode(ids) == tag ? ids[0] : -1;
}

// Where a reply's answer begins: the index after its </think>, none while it is still thinking (or, with
// qwen3, before its first token). It follows whichever reply it is asked about, as the formats' own
// constraints do: the tokens it has looked at are kept, and only those past the part a reply shares
// with them are looked at again (a reply's next step looks at its new token alone).
class AnswerStart {
 public:
  explicit AnswerStart(const ThinkingTokens& thinking) : thinking_(thinking) {}

  std::optional<size_t> of(const std::vector<int32_t>& generated) {
    size_t same = 0;
    while (same < looked_.size() && same < generated.size() && looked_[same] == generated[same]) ++same;
    looked_.resize(same);
    if (began_ && began_->by >= same) began_.reset();  // the token that began it is no longer the reply's
    for (size_t i = same; i < generated.size(); ++i) {
      looked_.push_back(generated[i]);
      if (began_) continue;
      const bool first_of_qwen3 = i == 0 && !thinking_.opened_in_prompt;
      if (first_of_qwen3 && generated[i] != thinking_.open) began_ = Began{i, 0};  // no thinking: all of it is the answer
      if (!first_of_qwen3 && generated[i] == thinking_.close) began_ = Began{i, i + 1};
    }
    if (!began_) return std::nullopt;
    return began_->at;
  }

 private:
  struct Began {
    size_t by;  // the token that began the answer: </think>, or qwen3's first when it is not <think>
    size_t at;  // the answer's first token
  };
  ThinkingTokens thinking_;
  std::vector<int32_t> looked_;  // the tokens of the reply last asked about
  std::optional<Began> began_;
};

}  // namespace

std::optional<ThinkingTokens> thinking_tokens(const Tokenizer& tokenizer, ReasoningParser parser) {
  if (parser == ReasoningParser::none) return std::nullopt;
  ThinkingTokens thinking{token_of(tokenizer, "<think>"), token_of(tokenizer, "</think>"), parser == ReasoningParser::deepseek_r1};
  if (thinking.open < 0 || thinking.close < 0) return std::nullopt;
  return thinking;
}

void hold_after_thinking(GenerateRequest& request, const ThinkingTokens& thinking, const std::function<void(GenerateRequest&)>& constrain) {
  GenerateRequest held;  // the format alone, asked about the answer's tokens
  held.stop_tokens = request.stop_tokens;
  constrain(held);
  auto answer_start = std::make_shared<AnswerStart>(thinking);
  auto answer_of = [](const std::vector<int32_t>& generated, size_t start) {
    return std::vector<int32_t>(generated.begin() + static_cast<std::ptrdiff_t>(start), generated.end());
  };
  request.allowed_tokens = [thinking, answer_start, answer_of, format = held.allowed_tokens, stops = request.stop_tokens](
                               const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
    if (const std::optional<size_t> start = answer_start->of(generated)) return format(answer_of(generated, *start), allowed);
    if (generated.empty() && !thinking.opened_in_prompt) {  // qwen3's first token: the format's, or <think>
      format(generated, allowed);
      if (static_cast<size_t>(thinking.open) < allowed.size()) allowed[static_cast<size_t>(thinking.open)] = 1;
      return;
    }
    std::fill(allowed.begin(), allowed.end(), uint8_t{1});  // thinking: anything but an end
    for (int32_t token : stops)
      if (token >= 0 && static_cast<size_t>(token) < allowed.size()) allowed[static_cast<size_t>(token)] = 0;
  };
  request.stop_when = [answer_start, answer_of, ended = held.stop_when, before = request.stop_when](const std::vector<int32_t>& generated) {
    const bool stopped = before && before(generated);  // asked first: it may watch every token (a stop string)
    const std::optional<size_t> start = answer_start->of(generated);
    return (start && ended(answer_of(generated, *start))) || stopped;
  };
}

}  // namespace tilefire::cli
