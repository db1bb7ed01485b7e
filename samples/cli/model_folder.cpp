#include "model_folder.h"

#include <filesystem>

namespace tilefire::cli {

std::string unread_tokenizer_file(const std::string& model_dir) {
  if (model_dir.empty()) return "";
  // The tokenizers' own files first: tokenizer_config.json only names a tokenizer (it is named when it is
  // all the folder has, a download missing its tokenizer file).
  for (const char* name : {"tokenizer.model", "tokenizer.model.v3", "tekken.json", "vocab.json", "merges.txt", "vocab.txt",
                           "qwen.tiktoken", "tokenizer_config.json"}) {
    std::error_code ignored;
    const std::filesystem::path path = std::filesystem::path(model_dir) / name;
    if (std::filesystem::exists(std::filesystem::symlink_status(path, ignored))) return path.string();
  }
  return "";
}

}  // namespace tilefire::cli
