#pragma once
// tokenizer.json read in one pass, with its two large members kept as flat lists rather than JSON values:
// model.vocab and model.merges are nine tenths of a Llama 3 or Qwen3 file (128k to 151k tokens, 150k to
// 280k merges), and as a JSON tree they cost an allocation or four per entry, a sorted map of 128k
// strings, and as long again to free. graph/tokenizer_load.cpp checks what they hold.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tilefire {

struct TokenizerJson {
  // One of model.merges as the file gives it.
  struct Merge {
    enum class Form { text, pair, other } form = Form::text;
    std::string left;   // text: the whole "left right"; pair: the first string
    std::string right;  // pair: the second string
    nlohmann::json other;  // other: the value itself (not a string, nor a list of two strings)
  };

  // The document, but for the two members below: where model.vocab is an object, it is an empty one
  // here and its entries are in `vocab`; where model.merges is a list, it is an empty one here and its
  // items are in `merges`. So the file's shape is still checked in one place, on the document.
  nlohmann::json document;
  std::vector<std::pair<std::string, nlohmann::json>> vocab;  // token, id: in file order, duplicates too
  std::vector<Merge> merges;                                  // in file order (the order is the rank)
};

// Reads `path`. InputError "<origin>: ..." as read_json_file (graph/json_file.h) gives it: not a regular
// file, cannot open, not valid JSON (with the line and column).
TokenizerJson read_tokenizer_json(const std::filesystem::path& path, const std::string& origin);

}  // namespace tilefire
