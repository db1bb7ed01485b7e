#include "model_folder.h"

#include <filesystem>

namespace tilefire::cli {

std::string unread_tokenizer_file(const std::string& model_dir) {
  if (model_dir.empty()) return "";
  for (const char* name : {"tokenizer_config.json", "tokenizer.model", "tokenizer.model.v3", "tekken.json", "vocab.json",
                           "merges.txt", "vocab.txt", "qwen.tiktoken"}) {
    std::error_code ignored;
    const std::filesystem::path path = std::filesystem::path(model_dir) / name;
    if (std::filesystem::exists(std::filesystem::symlink_status(path, ignored))) return path.string();
  }
  return "";
}

}  // namespace tilefire::cli
