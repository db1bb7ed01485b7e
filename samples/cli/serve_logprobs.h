#pragma once
// A reply's log-probabilities in the forms of OpenAI's API: one entry per generated token (as many as
// usage.completion_tokens), each with the sampled token's own and the most probable alternatives, from
// GenerateResult::token_probabilities and logprobs (the model's distribution, temperature 1).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tilefire/engine.h"

namespace tilefire::cli {

// The text `token` adds after `context` (the prompt and the tokens generated before it).
using TokenText = std::function<std::string(const std::vector<int32_t>& context, int32_t token)>;

// /v1/completions: {"tokens", "token_logprobs", "top_logprobs" (per token a {text: logprob} object of the
// `top` most probable and the sampled one), "text_offset" (characters into the reply)}.
nlohmann::json completion_logprobs(const GenerateResult& result, uint32_t top, const TokenText& text_of);
// /v1/chat/completions: {"content": [{"token", "logprob", "bytes", "top_logprobs": [the `top` most
// probable, each {"token", "logprob", "bytes"}]}]}.
nlohmann::json chat_logprobs(const GenerateResult& result, uint32_t top, const TokenText& text_of);

}  // namespace tilefire::cli
