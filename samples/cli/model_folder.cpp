#include "model_folder.h"

#include <filesystem>

namespace tilefire::cli {

std::string model_shape(const ModelInfo& model) {
  std::string shape = model.architecture + ", " + model.dtype + ", " + std::to_string(model.layers) + " layers";
  if (model.sliding_window != 0 && model.sliding_window < model.max_context) {
    shape += ", sliding window " + std::to_string(model.sliding_window);
    if (model.sliding_layers != model.layers) shape += " on " + std::to_string(model.sliding_layers) + " layers";
  }
  return shape;
}

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
