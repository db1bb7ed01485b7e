// A reply's log-probabilities for `tilefire serve` (serve_logprobs.h).
#include "serve_logprobs.h"

#include <algorithm>
#include <stdexcept>

namespace tilefire::cli {

namespace {

using nlohmann::json;

// Calls `each(i, context, chosen, alternatives)` for every generated token i, its context being the prompt
// and the tokens before it.
template <class Each>
void for_each_token(const GenerateResult& result, uint32_t top, Each&& each) {
  const size_t count = result.tokens.size();
  if (result.token_probabilities.size() != count || result.logprobs.size() != count)
    throw std::logic_error("a reply with logprobs has no probabilities for some of its tokens");
  std::vector<int32_t> context = result.prompt_tokens;
  for (size_t i = 0; i < count; ++i) {
    const std::vector<TokenProbability>& listed = result.logprobs[i];
    const std::vector<TokenProbability> alternatives(listed.begin(), listed.begin() + std::min<size_t>(top, listed.size()));
    each(i, context, result.token_probabilities[i], alternatives);
    context.push_back(result.tokens[i]);
  }
}

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

json completion_logprobs(const GenerateResult& result, uint32_t top, const TokenText& text_of) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
  size_t offset = 0;
  for_each_token(result, top, [&](size_t, const std::vector<int32_t>& context, const TokenProbability& chosen,
                                  const std::vector<TokenProbability>& alternatives) {
    const std::string text = text_of(context, chosen.token);
    tokens.push_back(text);
    token_logprobs.push_back(chosen.logprob);
    json by_text = json::object();
    for (const TokenProbability& alternative : alternatives) by_text[text_of(context, alternative.token)] = alternative.logprob;
    by_text[text] = chosen.logprob;  // always there, as OpenAI's API gives it: up to top + 1 entries
    top_logprobs.push_back(by_text);
    text_offset.push_back(offset);
    offset += characters(text);
  });
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", text_offset}};
}

json chat_logprobs(const GenerateResult& result, uint32_t top, const TokenText& text_of) {
  json content = json::array();
  for_each_token(result, top, [&](size_t, const std::vector<int32_t>& context, const TokenProbability& chosen,
                                  const std::vector<TokenProbability>& alternatives) {
    auto entry = [&](const TokenProbability& p) {
      const std::string text = text_of(context, p.token);
      return json{{"token", text}, {"logprob", p.logprob}, {"bytes", bytes_of(text)}};
    };
    json item = entry(chosen);
    item["top_logprobs"] = json::array();
    for (const TokenProbability& alternative : alternatives) item["top_logprobs"].push_back(entry(alternative));
    content.push_back(item);
  });
  return {{"content", content}};
}

}  // namespace tilefire::cli
