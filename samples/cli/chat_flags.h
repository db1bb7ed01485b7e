#pragma once
// What `tilefire run --chat` and `tilefire chat` share: the model folder's chat template (or
// --chat-template's), the conversation a --messages file and --system begin with, and the ids that end a
// reply.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "tilefire/chat.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

struct Conversation {
  std::unique_ptr<ChatTemplate> chat_template;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // --system, then --messages' list
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();  // --messages' other keys
  std::vector<int32_t> end_of_reply;                                    // stop tokens of a reply

  // Appends a message. Its content must be UTF-8 (the template's JSON of the messages holds text only):
  // otherwise InputError "`what` is not valid UTF-8 (...)", and nothing is added.
  void add(const std::string& role, const std::string& content, const std::string& what);
  // The prompt text of the messages so far, with the assistant's header to follow. InputError prefixed
  // with `command` when the template fails (raise_exception).
  std::string render(const std::string& command) const;
};

// The conversation of --system, --messages and --chat-template for `command` ("tilefire run"). InputError
// naming the flag and what is wrong: no tokenizer.json, no template, a --messages file missing or not JSON.
Conversation begin_conversation(const Args& args, const std::string& model_dir, const Tokenizer* tokenizer, const std::string& command);

}  // namespace tilefire::cli
