#pragma once
// A reasoning model's held reply, after its thinking. A reply a format holds (a named or "required" tool
// call, response_format, structured_outputs) is held from its first token, which leaves a model that
// thinks first no room to: it must write JSON where it would write <think>. With --reasoning-parser and a
// tokenizer that has each tag as one token (Qwen3's and DeepSeek-R1's do), the format holds the reply from
// the token after </think> instead, and the thinking goes to "reasoning_content" as in any reply:
// - qwen3: the first token is the format's, or <think>; after <think>, any token up to </think>;
// - deepseek_r1: the template opened the block in the prompt, so any token up to </think>.
// While thinking, the stop tokens are never chosen: a reply that ended there would hold no answer. A reply
// that max_tokens cuts in its thinking ends there, as any cut reply does.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "serve_reasoning.h"
#include "tilefire/engine.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

struct ThinkingTokens {
  int32_t open = -1;   // <think>
  int32_t close = -1;  // </think>
  bool opened_in_prompt = false;  // deepseek_r1: the reply begins inside the block
};

// The tags' tokens of `parser`'s thinking in `tokenizer`; none when a tag is not one token of its own, or
// is a special token (whose text a reply leaves out): held replies are then held from their first token,
// with no thinking.
std::optional<ThinkingTokens> thinking_tokens(const Tokenizer& tokenizer, ReasoningParser parser);

// Holds `request`'s reply to a format after its thinking: `constrain` sets the format on the request it is
// given (allowed_tokens and stop_when, as ReplyFormat::constrain does), and here its tokens see only the
// reply's tokens after </think>. While thinking, none of `ending_tokens` (the request's
// ending_tokens(): its stop tokens and the model's end) is chosen. Call it after request.stop_tokens and
// stop_when are set: both are kept. The reply is taken to grow a token a step, as a generation's does.
void hold_after_thinking(GenerateRequest& request, const ThinkingTokens& thinking, const std::vector<int32_t>& ending_tokens,
                         const std::function<void(GenerateRequest&)>& constrain);

}  // namespace tilefire::cli
