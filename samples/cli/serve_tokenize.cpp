#include "serve_tokenize.h"

#include <vector>

#include "json_text.h"
#include "serve_requests.h"

namespace tilefire::cli {

using nlohmann::json;

json tokenize_reply(const json& body, const Tokenizer* tokenizer, const ChatTemplate* chat_template,
                    const ModelInfo& model, ToolCallParser tool_call_parser) {
  const bool prompt = given(body, "prompt"), messages = given(body, "messages");
  if (prompt == messages) refuse_field(prompt ? "prompt" : "messages", prompt ? "and \"messages\": give one of them" : "is missing: give \"prompt\" (a text) or \"messages\" (a chat)");
  std::vector<int32_t> tokens;
  if (prompt) {
    if (!body.at("prompt").is_string()) refuse_field("prompt", "must be a string, got " + body.at("prompt").dump().substr(0, 200));
    const std::string& text = body.at("prompt").get_ref<const std::string&>();
    const bool add_special_tokens = boolean_field(body, "add_special_tokens", true);  // read (and checked) with or without a tokenizer
    tokens = tokenizer ? tokenizer->encode(text, add_special_tokens) : byte_tokens(text);
  } else {
    if (!tokenizer) throw InputError("this model has no tokenizer.json: chat messages cannot be put into tokens");
    if (!chat_template)
      throw InputError("this model has no chat template (chat_template.jinja, tokenizer_config.json or chat_template.json): give tilefire serve --chat-template FILE");
    json tools = nullptr;  // as the chat gives them to the template: a list of objects
    if (given(body, "tools")) {
      tools = body.at("tools");
      if (!tools.is_array()) refuse_field("tools", "must be a list of tools, got " + tools.dump().substr(0, 200));
      for (size_t i = 0; i < tools.size(); ++i)
        if (!tools[i].is_object()) refuse_field("tools[" + std::to_string(i) + "]", "must be an object, got " + tools[i].dump().substr(0, 200));
    }
    tokens = tokenizer->encode(render_chat_prompt(body, *chat_template, tools, tool_call_parser), chat_add_special_tokens(body));
  }
  json reply = {{"count", tokens.size()}, {"max_model_len", model.max_context}, {"tokens", tokens}};
  if (boolean_field(body, "return_token_strs", false)) {
    json strings = json::array();
    for (int32_t token : tokens) strings.push_back(tokenizer ? tokenizer->token_string(token) : bytes_text({token}));
    reply["token_strs"] = std::move(strings);  // a lone byte that is not UTF-8 goes out as U+FFFD
  }
  return reply;
}

json detokenize_reply(const json& body, const Tokenizer* tokenizer, const ModelInfo& model) {
  if (!given(body, "tokens") || !body.at("tokens").is_array())
    refuse_field("tokens", "must be a list of token ids, got " + (given(body, "tokens") ? body.at("tokens").dump().substr(0, 200) : std::string("nothing")));
  std::vector<int32_t> tokens;
  for (const json& token : body.at("tokens")) {
    if (!token.is_number_integer() || (token.is_number_unsigned() ? token.get<uint64_t>() >= model.vocab : token.get<int64_t>() < 0))
      refuse_field("tokens", "holds " + token.dump().substr(0, 200) + ", not a token id of the vocabulary of " + std::to_string(model.vocab));
    tokens.push_back(token.get<int32_t>());
  }
  return {{"prompt", tokenizer ? tokenizer->decode(tokens) : bytes_text(tokens)}};
}

}  // namespace tilefire::cli
