#pragma once
// A reply's log-probabilities in the forms of OpenAI's API: one entry per generated token (as many as
// usage.completion_tokens), each with the sampled token's own and the most probable alternatives, from the
// engine's TokenProbability entries (the model's distribution, temperature 1). Built a token at a time, so
// a streamed reply carries in each event the entries of the tokens generated since the event before.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tilefire/engine.h"

namespace tilefire::cli {

// The text `token` adds after `context` (the prompt and the tokens generated before it).
using TokenText = std::function<std::string(const std::vector<int32_t>& context, int32_t token)>;

class ReplyLogprobs {
 public:
  // chat: /v1/chat/completions' form, {"content": [{"token", "logprob", "bytes", "top_logprobs": [the
  // `top` most probable, each {"token", "logprob", "bytes"}]}]}. Otherwise /v1/completions': {"tokens",
  // "token_logprobs", "top_logprobs" (per token a {text: logprob} object of the `top` most probable and
  // the sampled one), "text_offset" (characters into the reply)}.
  ReplyLogprobs(bool chat, uint32_t top, std::vector<int32_t> prompt, TokenText text_of);

  // The next generated token: its own probability and the most probable ones (GenerateRequest::
  // on_probabilities' arguments), of which the first `top` are listed.
  void add(const TokenProbability& chosen, const std::vector<TokenProbability>& most_probable);
  // Every token of a finished generation (its token_probabilities and logprobs), in order.
  void add_all(const GenerateResult& result);
  // An echoed prompt's tokens (a completion's "echo"), before any generated one: the first with a null
  // log-probability (nothing comes before it), the others from the result's prompt_token_probabilities
  // and prompt_logprobs.
  void add_prompt(const GenerateResult& result);
  bool has_pending() const { return !pending_.empty(); }
  // The entries added since the last take, in the endpoint's form; a completion's text_offset counts on
  // from the entries taken before.
  nlohmann::json take();

 private:
  struct Entry {
    std::string text;
    bool scored = true;  // false: the first prompt token, whose log-probability is null
    float logprob = 0;
    std::vector<std::pair<std::string, float>> alternatives;  // the `top` most probable, most probable first
  };
  bool chat_;
  uint32_t top_;
  std::vector<int32_t> context_;  // the prompt and the tokens added
  TokenText text_of_;
  std::vector<Entry> pending_;
  size_t text_offset_ = 0;  // characters of the entries taken so far
};

}  // namespace tilefire::cli
