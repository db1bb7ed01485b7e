// The public ChatTemplate (tilefire/chat.h) over graph/'s chat template files and Jinja renderer.
#include "tilefire/chat.h"

#include <algorithm>

#include "graph/chat_template.h"
#include "tilefire/errors.h"
#include "tilefire/tokenizer.h"

namespace tilefire {

ChatTemplate::ChatTemplate(std::unique_ptr<ChatTemplateFiles> files) : files_(std::move(files)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::unique_ptr<ChatTemplate> ChatTemplate::of_model_folder(const std::string& folder) {
  if (folder.empty()) return nullptr;
  std::optional<ChatTemplateFiles> files = read_chat_template(folder);
  if (!files) return nullptr;
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::make_unique<ChatTemplateFiles>(std::move(*files))));
}

std::unique_ptr<ChatTemplate> ChatTemplate::of_file(const std::string& jinja_path, const std::string& model_folder) {
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::make_unique<ChatTemplateFiles>(read_chat_template_file(jinja_path, model_folder))));
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& message : messages) list.push_back({{"role", message.role}, {"content", message.content}});
  return render_chat(*files_, list, add_generation_prompt, nlohmann::ordered_json::object());
}

std::string ChatTemplate::render_json(std::string_view messages_json, bool add_generation_prompt, std::string_view variables_json) const {
  return render_chat(*files_, jinja::parse_variables_json(messages_json, "chat messages"), add_generation_prompt,
                     jinja::parse_variables_json(variables_json, "chat template variables"));
}

void check_chat_json(std::string_view text, const std::string& what) { jinja::parse_variables_json(text, what); }

std::vector<int32_t> ChatTemplate::end_of_reply_tokens(const Tokenizer& tokenizer) const {
  std::vector<int32_t> ids = files_->generation_eos;
  if (!files_->eos_token.empty()) {
    const std::vector<int32_t> eos = tokenizer.encode(files_->eos_token, false);
    if (eos.size() == 1 && std::find(ids.begin(), ids.end(), eos[0]) == ids.end()) ids.push_back(eos[0]);
  }
  return ids;
}

const std::string& ChatTemplate::origin() const { return files_->templates.at("default").origin(); }

}  // namespace tilefire
