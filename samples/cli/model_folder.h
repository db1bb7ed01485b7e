#pragma once
// What the commands that print text ask of a model folder beyond what the engine reads.
#include <string>

#include "tilefire/engine.h"

namespace tilefire::cli {

// The model line's shape: "LlamaForCausalLM, bf16, 16 layers", and ", sliding window 4096" (on N layers
// when not on all) where the window is shorter than the engine's context, so it changes what tokens see.
std::string model_shape(const ModelInfo& model);

// A tokenizer file of a Hugging Face folder other than tokenizer.json, or "" when it has none:
// tokenizer_config.json, SentencePiece's tokenizer.model (and Mistral's .v3 and tekken.json), GPT-2's
// vocab.json and merges.txt, BERT's vocab.txt, Qwen's qwen.tiktoken; a link counts even when it dangles
// (a cache snapshot whose blob is missing). Tilefire reads tokenizer.json only. The bytes of a text prompt
// are its tokens only for a model without any tokenizer (the sample, gen-model's folders): for a folder
// with one of these alone they would be arbitrary tokens of its vocabulary, and its output bytes not its text.
std::string unread_tokenizer_file(const std::string& model_dir);

}  // namespace tilefire::cli
