#pragma once
// What the commands that print text ask of a model folder beyond what the engine reads.
#include <string>

namespace tilefire::cli {

// A tokenizer file of a Hugging Face folder other than tokenizer.json, or "" when it has none:
// tokenizer_config.json, SentencePiece's tokenizer.model (and Mistral's .v3 and tekken.json), GPT-2's
// vocab.json and merges.txt, BERT's vocab.txt, Qwen's qwen.tiktoken; a link counts even when it dangles
// (a cache snapshot whose blob is missing). Tilefire reads tokenizer.json only. The bytes of a text prompt
// are its tokens only for a model without any tokenizer (the sample, gen-model's folders): for a folder
// with one of these alone they would be arbitrary tokens of its vocabulary, and its output bytes not its text.
std::string unread_tokenizer_file(const std::string& model_dir);

}  // namespace tilefire::cli
