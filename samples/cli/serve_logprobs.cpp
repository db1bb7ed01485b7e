// A reply's log-probabilities for `tilefire serve` (serve_logprobs.h).
#include "serve_logprobs.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace tilefire::cli {

namespace {

using nlohmann::json;

json bytes_of(const std::string& text) {
  json bytes = json::array();
  for (unsigned char byte : text) bytes.push_back(int(byte));
  return bytes;
}

// Characters of UTF-8 text: its bytes that do not continue a character.
size_t characters(const std::string& text) {
  size_t n = 0;
  for (unsigned char byte : text) n += (byte & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace

ReplyLogprobs::ReplyLogprobs(bool chat, uint32_t top, std::vector<int32_t> prompt, TokenText text_of)
    : chat_(chat), top_(top), context_(std::move(prompt)), text_of_(std::move(text_of)) {}

void ReplyLogprobs::add(const TokenProbability& chosen, const std::vector<TokenProbability>& most_probable) {
  Entry entry;
  entry.text = text_of_(context_, chosen.token);
  entry.logprob = chosen.logprob;
  const size_t listed = std::min<size_t>(top_, most_probable.size());
  for (size_t k = 0; k < listed; ++k) entry.alternatives.emplace_back(text_of_(context_, most_probable[k].token), most_probable[k].logprob);
  pending_.push_back(std::move(entry));
  context_.push_back(chosen.token);
}

void ReplyLogprobs::add_all(const GenerateResult& result) {
  const size_t count = result.tokens.size();
  if (result.token_probabilities.size() != count || result.logprobs.size() != count)
    throw std::logic_error("a reply with logprobs has no probabilities for some of its tokens");
  for (size_t i = 0; i < count; ++i) add(result.token_probabilities[i], result.logprobs[i]);
}

void ReplyLogprobs::add_prompt(const GenerateResult& result) {
  const std::vector<int32_t>& prompt = result.prompt_tokens;
  if (prompt.empty() || result.prompt_token_probabilities.size() + 1 != prompt.size() ||
      result.prompt_logprobs.size() + 1 != prompt.size())
    throw std::logic_error("an echoed prompt has no probabilities for some of its tokens");
  std::vector<int32_t> context;
  Entry first;
  first.text = text_of_(context, prompt[0]);
  first.scored = false;
  pending_.push_back(std::move(first));
  for (size_t i = 1; i < prompt.size(); ++i) {
    context.push_back(prompt[i - 1]);
    Entry entry;
    entry.text = text_of_(context, prompt[i]);
    entry.logprob = result.prompt_token_probabilities[i - 1].logprob;
    const std::vector<TokenProbability>& listed = result.prompt_logprobs[i - 1];
    for (size_t k = 0; k < std::min<size_t>(top_, listed.size()); ++k)
      entry.alternatives.emplace_back(text_of_(context, listed[k].token), listed[k].logprob);
    pending_.push_back(std::move(entry));
  }
}

json ReplyLogprobs::take() {
  json taken;
  if (chat_) {
    json content = json::array();
    for (const Entry& entry : pending_) {
      json item = {{"token", entry.text}, {"logprob", entry.logprob}, {"bytes", bytes_of(entry.text)}, {"top_logprobs", json::array()}};
      for (const auto& [text, logprob] : entry.alternatives)
        item["top_logprobs"].push_back({{"token", text}, {"logprob", logprob}, {"bytes", bytes_of(text)}});
      content.push_back(std::move(item));
    }
    taken = {{"content", std::move(content)}};
  } else {
    json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
    for (const Entry& entry : pending_) {
      tokens.push_back(entry.text);
      token_logprobs.push_back(entry.scored ? json(entry.logprob) : json());
      json by_text = json::object();
      for (const auto& [text, logprob] : entry.alternatives) by_text[text] = logprob;
      by_text[entry.text] = entry.logprob;  // always there, as OpenAI's API gives it: up to top + 1 entries
      top_logprobs.push_back(entry.scored ? std::move(by_text) : json());
      text_offset.push_back(text_offset_);
      text_offset_ += characters(entry.text);
    }
    taken = {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", text_offset}};
  }
  pending_.clear();
  return taken;
}

}  // namespace tilefire::cli
