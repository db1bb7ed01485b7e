#pragma once
// A chat model's prompt format: its chat template (a Jinja template in chat_template.jinja,
// tokenizer_config.json or a multimodal processor's chat_template.json) rendered as Hugging Face
// transformers' apply_chat_template renders it (docs/CHAT_TEMPLATES.md). Encode the text with Tokenizer::encode(text, false): the template
// writes the start token itself.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tilefire {

struct ChatTemplateFiles;
class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
};

// Checks JSON text of a conversation or of template variables before it is parsed elsewhere (a
// --messages file): InputError "WHAT: ..." when it is not JSON, or holds an integer past 64 bits (Python
// keeps it exact; a JSON parser would make it a float, and the template would see another value).
void check_chat_json(std::string_view text, const std::string& what);

class ChatTemplate {
 public:
  // The chat template of a model folder, or nullptr when it has none. InputError naming the file and the
  // key when a file is not JSON or the template uses what Tilefire does not run.
  static std::unique_ptr<ChatTemplate> of_model_folder(const std::string& folder);
  // The template of a .jinja file, with the special tokens of `model_folder` (may be "").
  static std::unique_ptr<ChatTemplate> of_file(const std::string& jinja_path, const std::string& model_folder);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The prompt text of a conversation, ending with the assistant's header when add_generation_prompt.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;
  // The same with messages as JSON (a list of objects as transformers takes them: "role", "content" as a
  // string or a list of parts, "tool_calls", ...) and the template's other variables as a JSON object
  // ("tools", "documents", "enable_thinking", "date_string", ...). InputError for text that is not JSON,
  // messages without a string "role", or a template that fails (its raise_exception message included).
  std::string render_json(std::string_view messages_json, bool add_generation_prompt = true,
                          std::string_view variables_json = "{}") const;

  // The ids that end the assistant's reply: the eos_token of tokenizer_config.json (as `tokenizer` reads
  // it: when it is one token) and generation_config.json's eos_token_id.
  std::vector<int32_t> end_of_reply_tokens(const Tokenizer& tokenizer) const;
  // Where the template came from ("DIR/tokenizer_config.json (chat_template)").
  const std::string& origin() const;

 private:
  explicit ChatTemplate(std::unique_ptr<ChatTemplateFiles> files);
  std::unique_ptr<ChatTemplateFiles> files_;
};

}  // namespace tilefire
