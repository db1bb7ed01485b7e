// The chat template and conversation flags shared by `tilefire run --chat` and `tilefire chat`.
#include "chat_flags.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace tilefire::cli {

namespace {

// InputError unless `text` is UTF-8; what the JSON writer finds wrong (a byte and where) says why,
// without the JSON library's exception name.
void require_utf8(const std::string& text, const std::string& what) {
  try {
    (void)nlohmann::ordered_json(text).dump();
  } catch (const nlohmann::ordered_json::type_error& error) {
    const std::string detail = error.what();
    const size_t tag_end = detail.rfind("] ");
    throw InputError(what + " is not valid UTF-8 (" + (tag_end == std::string::npos ? detail : detail.substr(tag_end + 2)) + ")");
  }
}

}  // namespace

void Conversation::add(const std::string& role, const std::string& content, const std::string& what) {
  require_utf8(content, what);
  messages.push_back(nlohmann::ordered_json{{"role", role}, {"content", content}});
}

std::string Conversation::render(const std::string& command) const {
  try {
    return chat_template->render_json(messages.dump(), true, variables.dump());
  } catch (const InputError& error) {
    throw InputError(command + ": the chat template: " + error.what());
  }
}

Conversation begin_conversation(const Args& args, const std::string& model_dir, const Tokenizer* tokenizer, const std::string& command) {
  std::error_code ignored;
  if (!tokenizer && !model_dir.empty() && !std::filesystem::is_directory(model_dir, ignored))  // not the tokenizer's fault
    throw InputError(model_dir + ": " + (std::filesystem::exists(model_dir, ignored) ? "not a folder" : "no such folder") +
                     " (a model is a folder holding config.json and model.safetensors)");
  if (!tokenizer)
    throw InputError(command + ": a chat needs the model's tokenizer.json" +
                     std::string(model_dir.empty() ? " (the built-in sample has none: give --model DIR)" : ", which " + model_dir + " lacks"));
  Conversation conversation;
  if (const auto file = args.text("--chat-template")) {
    try {
      conversation.chat_template = ChatTemplate::of_file(*file, model_dir);
    } catch (const InputError& error) {
      // The template file's own errors start with its path: they get the flag it came from. The model
      // folder's files (tokenizer_config.json, generation_config.json) name themselves.
      const std::string message = error.what();
      if (message.rfind(*file + ": ", 0) == 0) throw InputError(command + ": --chat-template: " + message);
      throw;
    }
  } else {
    conversation.chat_template = ChatTemplate::of_model_folder(model_dir);
  }
  if (!conversation.chat_template)
    throw InputError(command + ": " + model_dir + " has no chat template (no chat_template.jinja, no \"chat_template\" in tokenizer_config.json "
                     "or chat_template.json): give one with --chat-template FILE" + (command == "tilefire run" ? ", or a plain --prompt" : ""));
  if (const auto file = args.text("--messages")) {
    const std::string text = *args.file_text("--messages");
    check_chat_json(text, command + ": --messages: " + *file);
    const nlohmann::ordered_json loaded = nlohmann::ordered_json::parse(text);
    if (loaded.is_object()) {
      if (!loaded.contains("messages")) throw InputError(command + ": --messages: " + *file + " is an object without \"messages\"");
      conversation.messages = loaded.at("messages");
      conversation.variables = loaded;
      conversation.variables.erase("messages");
    } else {
      conversation.messages = loaded;
    }
    if (!conversation.messages.is_array()) throw InputError(command + ": --messages: " + *file + ": \"messages\" must be a list");
  }
  if (const auto system = args.text("--system")) {
    require_utf8(*system, command + ": --system");
    conversation.messages.insert(conversation.messages.begin(), nlohmann::ordered_json{{"role", "system"}, {"content", *system}});
  }
  conversation.end_of_reply = conversation.chat_template->end_of_reply_tokens(*tokenizer);
  return conversation;
}

}  // namespace tilefire::cli
