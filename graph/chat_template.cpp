// A model folder's chat template, its special tokens and its reply-ending ids (graph/chat_template.h).
#include "graph/chat_template.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "graph/json_file.h"
#include "tilefire/errors.h"

namespace tilefire {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

bool present(const fs::path& path) {
  std::error_code ignored;
  return fs::exists(fs::symlink_status(path, ignored));  // a dangling link counts: reading it says what is wrong
}

// A template file the user names (--chat-template): a pipe is fine (`<(...)`), a folder is not.
std::string read_text(const fs::path& path) {
  std::error_code ignored;
  if (fs::is_directory(path, ignored)) throw InputError(path.string() + ": is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path.string() + ": cannot read (" + std::strerror(errno) + ")");
  return text.str();
}

// A file of the model folder: a FIFO there is refused rather than waited on (read_json_file_text).
ordered_json read_json(const fs::path& path) {
  ordered_json json;
  try {
    json = ordered_json::parse(read_json_file_text(path, path.string()));
  } catch (const ordered_json::exception& error) {  // parse_error, and out_of_range for a number too large
    throw_invalid_json(error, path.string());
  }
  if (!json.is_object()) throw InputError(path.string() + ": the top level must be a JSON object");
  return json;
}

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object with "content".
std::optional<std::string> token_text(const ordered_json& value, const std::string& origin, const std::string& key) {
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string()) return value.at("content").get<std::string>();
  throw InputError(origin + ": key '" + key + "' must be a string or an object with a string \"content\"");
}

// transformers' special_tokens_map: the special tokens a template sees as variables.
void read_special_tokens(const fs::path& folder, ChatTemplateFiles& files) {
  const fs::path path = folder / "tokenizer_config.json";
  if (!present(path)) return;
  const ordered_json config = read_json(path);
  const std::string origin = path.string();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    if (const auto text = token_text(config.at(key), origin, key)) {
      files.special_tokens[key] = *text;
      if (std::string(key) == "eos_token") files.eos_token = *text;
    }
  }
  if (config.contains("additional_special_tokens") && !config.at("additional_special_tokens").is_null()) {
    const ordered_json& list = config.at("additional_special_tokens");
    if (!list.is_array()) throw InputError(origin + ": key 'additional_special_tokens' must be a list");
    ordered_json texts = ordered_json::array();
    for (const ordered_json& item : list) {
      if (const auto text = token_text(item, origin, "additional_special_tokens")) texts.push_back(*text);
    }
    files.special_tokens["additional_special_tokens"] = texts;
  }
}

}  // namespace

std::vector<int32_t> read_generation_eos_tokens(const std::filesystem::path& folder) {
  const fs::path path = folder / "generation_config.json";
  std::vector<int32_t> ids;
  if (!present(path)) return ids;
  const ordered_json config = read_json(path);
  if (!config.contains("eos_token_id") || config.at("eos_token_id").is_null()) return ids;
  const ordered_json& eos = config.at("eos_token_id");
  const auto id = [&](const ordered_json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      throw InputError(path.string() + ": key 'eos_token_id' must be a token id or a list of them");
    ids.push_back(v.get<int32_t>());
  };
  if (eos.is_array()) {
    for (const ordered_json& v : eos) id(v);
  } else {
    id(eos);
  }
  return ids;
}

std::optional<ChatTemplateFiles> read_chat_template(const fs::path& folder) {
  ChatTemplateFiles files;
  const fs::path jinja_file = folder / "chat_template.jinja", config_file = folder / "tokenizer_config.json";
  // A multimodal model's processor keeps its template in chat_template.json (transformers' processors wrote
  // it there before chat_template.jinja): read when the tokenizer's files hold none. The tokenizer's come
  // first, as transformers' tokenizer.apply_chat_template takes them (vLLM, for a multimodal model and a
  // request without tools, takes the processor's first: docs/CHAT_TEMPLATES.md).
  const fs::path processor_file = folder / "chat_template.json";
  std::optional<ordered_json> config;
  if (!present(jinja_file) && present(config_file)) config = read_json(config_file);
  const bool config_has_one = config && config->contains("chat_template") && !config->at("chat_template").is_null();
  if (present(jinja_file)) {  // transformers' own place for it since 4.50; it comes before tokenizer_config.json's
    files.templates.emplace("default", jinja::Template(read_json_file_text(jinja_file, jinja_file.string()), jinja_file.string()));
  } else if (config_has_one) {
    const ordered_json& value = config->at("chat_template");
    const std::string origin = config_file.string() + " (chat_template)";
    if (value.is_string()) {
      files.templates.emplace("default", jinja::Template(value.get<std::string>(), origin));
    } else if (value.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
      for (const ordered_json& entry : value) {
        if (!entry.is_object() || !entry.contains("name") || !entry.at("name").is_string() || !entry.contains("template") ||
            !entry.at("template").is_string())
          throw InputError(config_file.string() + ": key 'chat_template' must be a string or a list of {\"name\", \"template\"} objects");
        // A name given twice: the last, as transformers' dict of the list keeps it.
        const std::string name = entry.at("name").get<std::string>();
        files.templates.insert_or_assign(name, jinja::Template(entry.at("template").get<std::string>(), origin + " '" + name + "'"));
      }
      if (!files.templates.count("default"))
        throw InputError(config_file.string() + ": key 'chat_template' lists templates but none named 'default'");
    } else {
      throw InputError(config_file.string() + ": key 'chat_template' must be a string or a list of named templates");
    }
  } else if (present(processor_file)) {
    const ordered_json processor = read_json(processor_file);
    if (!processor.contains("chat_template") || !processor.at("chat_template").is_string())
      throw InputError(processor_file.string() + ": key 'chat_template' must be a string (the template a multimodal model's processor keeps)");
    files.templates.emplace("default", jinja::Template(processor.at("chat_template").get<std::string>(), processor_file.string() + " (chat_template)"));
  } else {
    return std::nullopt;
  }
  read_special_tokens(folder, files);
  files.generation_eos = read_generation_eos_tokens(folder);
  return files;
}

ChatTemplateFiles read_chat_template_file(const fs::path& template_path, const fs::path& folder) {
  ChatTemplateFiles files;
  files.templates.emplace("default", jinja::Template(read_text(template_path), template_path.string()));
  if (!folder.empty()) {
    read_special_tokens(folder, files);
    files.generation_eos = read_generation_eos_tokens(folder);
  }
  return files;
}

std::string render_chat(const ChatTemplateFiles& files, const ordered_json& messages, bool add_generation_prompt,
                        const ordered_json& variables, const std::tm* now) {
  if (!messages.is_array()) throw InputError("chat messages must be a JSON list of {\"role\", \"content\"} objects");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object() || !messages[i].contains("role") || !messages[i].at("role").is_string())
      throw InputError("chat message " + std::to_string(i) + " must be an object with a string \"role\"");
  }
  if (!variables.is_object()) throw InputError("chat template variables must be a JSON object");
  for (const char* reserved : {"messages", "add_generation_prompt"}) {
    if (variables.contains(reserved)) throw InputError(std::string("chat template variables may not set '") + reserved + "'");
  }
  ordered_json context = files.special_tokens;
  context["messages"] = messages;
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [key, value] : variables.items()) context[key] = value;
  const bool tools = !context["tools"].is_null();
  const auto it = tools && files.templates.count("tool_use") ? files.templates.find("tool_use") : files.templates.find("default");
  return now ? it->second.render(context, *now) : it->second.render(context);
}

}  // namespace tilefire
