#pragma once
// A model folder's chat template and what transformers renders it with: the template of
// chat_template.jinja, tokenizer_config.json's "chat_template" or chat_template.json, the special tokens of
// tokenizer_config.json (bos_token, eos_token, ...: variables of the template) and the ids that end a reply (eos_token, and
// generation_config.json's eos_token_id, which is what transformers' generate() stops at).
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/jinja.h"

namespace tilefire {

struct ChatTemplateFiles {
  // The templates by name: "default", and others of a list-valued "chat_template" ("tool_use", ...).
  std::map<std::string, jinja::Template> templates;
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();  // {"bos_token": "<s>", ...}
  std::string eos_token;                  // "" when the file names none
  std::vector<int32_t> generation_eos;    // generation_config.json's eos_token_id
};

// What the folder holds, or std::nullopt when it has no chat template (chat_template.jinja, else a
// "chat_template" in tokenizer_config.json, else a multimodal processor's chat_template.json). InputError
// naming the file and the key for a file that is not JSON, a key of the wrong type, or a template that
// does not parse.
std::optional<ChatTemplateFiles> read_chat_template(const std::filesystem::path& folder);

// generation_config.json's eos_token_id in `folder` (none when the file or the key is absent): what
// transformers' generate() and vLLM stop at. InputError naming the file for one that is not JSON, or ids
// that are not token ids.
std::vector<int32_t> read_generation_eos_tokens(const std::filesystem::path& folder);

// The special tokens and generation ids of a folder (tokenizer_config.json, generation_config.json when
// present), with the template of `template_path` instead of the folder's own.
ChatTemplateFiles read_chat_template_file(const std::filesystem::path& template_path, const std::filesystem::path& folder);

// transformers' apply_chat_template(messages, tools, documents, add_generation_prompt, **variables) as
// text: the variables are the special tokens, then messages, tools and documents (null unless `variables`
// gives them), add_generation_prompt, then `variables`. The template is "tool_use" when tools are given and
// the folder names one, else "default". InputError for messages that are not a list of objects with a
// string "role", or a template that fails.
std::string render_chat(const ChatTemplateFiles& files, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                        const nlohmann::ordered_json& variables, const std::tm* now = nullptr);

}  // namespace tilefire
