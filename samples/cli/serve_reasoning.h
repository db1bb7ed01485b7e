#pragma once
// A reasoning model's thinking, apart from its answer, in `tilefire serve`'s chat replies: with
// --reasoning-parser, the text a model writes between <think> and </think> goes to the message's
// "reasoning_content" (the field DeepSeek's API and vLLM give), and the rest is its "content" (then read
// for tool calls, serve_tools.h). Two formats:
// - qwen3: the reply may open with <think>; what follows it up to </think> is the reasoning. A reply that
//   does not open with it (Qwen3 with enable_thinking false: the template wrote an empty block into the
//   prompt) is all content.
// - deepseek_r1: the template opens the block in the prompt, so the reply begins inside it (a <think> it
//   writes again is left out); everything up to </think> is the reasoning.
// A block that max_tokens cuts before </think> is reasoning alone, the content null.
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tilefire::cli {

enum class ReasoningParser { none, qwen3, deepseek_r1 };

// --reasoning-parser NAME; InputError naming the flag and the names it takes.
ReasoningParser reasoning_parser_named(const std::string& name);

struct ReasonedReply {
  nlohmann::json reasoning;  // the thinking's text; null: the reply has none
  nlohmann::json content;    // the answer's text; null when the reply ended in its thinking
};

// The whole reply's text split by `parser` (none: all content).
ReasonedReply split_reasoning(ReasoningParser parser, const std::string& text);

// How many of a reply's tokens are its thinking, for the usage's reasoning_tokens: the tokens up to the
// one whose text closes the block (all of them when the reply ends inside it, none when it has none).
// `token_texts`: what each token added to the reply's text, in order.
size_t reasoning_token_count(ReasoningParser parser, const std::vector<std::string>& token_texts);

// A reply's text as it streams: add() splits each piece into what goes out now as reasoning and as
// content, holding back a tail that may begin a tag not yet whole (<think> at the start, </think> in
// the thinking); finish() gives what was held. Joined, the pieces are split_reasoning's.
class ReasoningStream {
 public:
  struct Pieces {
    std::string reasoning, content;
  };
  explicit ReasoningStream(ReasoningParser parser);
  Pieces add(const std::string& piece);
  Pieces finish();

 private:
  enum class Part { opening, thinking, answer };
  Pieces take(bool at_end);

  ReasoningParser parser_;
  Part part_;
  std::string held_;  // text not yet given out: a tag's beginning, or the reply's start
};

}  // namespace tilefire::cli
