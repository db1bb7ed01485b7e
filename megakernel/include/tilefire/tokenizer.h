#pragma once
// A model's tokenizer: text to token ids and back, read from the tokenizer.json of a Hugging Face folder.
// It runs the file as the Hugging Face `tokenizers` library does (docs/TOKENIZER.md): byte-level BPE
// (Llama 3, Qwen2/3, GPT-2) and BPE with byte fallback (Llama 2, Mistral), their normalizers,
// pre-tokenizers, special tokens and decoders. A file with anything else is refused by name.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tilefire {

class HfTokenizer;

class Tokenizer {
 public:
  // Reads a tokenizer.json. InputError naming the file and the key when it is missing, not JSON, or
  // describes a tokenizer Tilefire does not run.
  explicit Tokenizer(const std::string& tokenizer_json);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;  // a moved-from Tokenizer may only be assigned to or destroyed
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // The tokenizer of a model folder (its tokenizer.json), or nullptr when it has none.
  static std::unique_ptr<Tokenizer> of_model_folder(const std::string& folder);

  // The ids of `text` (UTF-8; InputError naming the byte where it is not). add_special_tokens adds what
  // the file's post-processor adds around a text (Llama 2's <s>, Llama 3's <|begin_of_text|>); special
  // tokens written in the text (<|eot_id|>) are always matched.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The text of `ids`. Bytes that do not form UTF-8 become U+FFFD; an id past every token gives nothing,
  // and a negative id is an InputError.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // The text `generated` adds after `prompt`: decoded together, so that a tokenizer that drops the first
  // token's leading space (SentencePiece) does not drop the space before the first generated word.
  std::string continuation(const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) const;
  // What each id adds to a text it is generated into, as bytes: [vocab_size()]. A byte-level token's can
  // be part of a UTF-8 character; a SentencePiece token's keeps its leading space (decoded within a text,
  // not at its start); "" for special tokens and ids no token has. Generated tokens whose bytes together
  // are valid UTF-8 have for continuation() those bytes joined (after a prompt with text). What
  // constrained decoding (tilefire/json_constraint.h) matches tokens by.
  std::vector<std::string> token_bytes() const;
  // The token `id` as the vocabulary spells it, before any decoder ("Ġhello", "▁the", "<0x0A>",
  // "<|eot_id|>": transformers' convert_ids_to_tokens); "" for an id no token has.
  std::string token_string(int32_t id) const;
  // One past the largest id of the tokenizer (which can be below the model's vocabulary: padding rows).
  int32_t vocab_size() const;
  const std::string& path() const;

 private:
  friend class StreamingText;  // which leaves tokens without text out of its window
  std::unique_ptr<HfTokenizer> tokenizer_;
};

// The text of generated tokens as they come, for showing it while generating: add() returns what each
// token adds, finish() the rest. A trailing U+FFFD waits, since it may be the first bytes of a character
// the next byte-level token completes; and while a ByteFallback decoder reads a run of byte tokens that is
// not yet UTF-8 as U+FFFD, add() returns nothing. Each add() decodes only the tokens not yet settled (at
// most 9) and up to 8 settled ones before them, so streaming costs the same per token however long the
// text grows.
class StreamingText {
 public:
  // A negative id, in the prompt or given to add(), is an InputError; a refused add() leaves the stream
  // as it was. The stream holds the tokenizer's tables, not the Tokenizer object, so moving the Tokenizer
  // is fine; destroying it ends the stream's use.
  StreamingText(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt);

  std::string add(int32_t token);
  // The rest of the text of all the generated tokens, decoded whole. Should it not begin with what add()
  // returned, a new line and the whole text instead: ByteFallback reads a run of byte tokens that is not
  // UTF-8 as U+FFFD throughout, characters add() already returned included (a run the generation left
  // unfinished, or one a stray byte broke).
  std::string finish() const;

 private:
  static constexpr size_t kContextTokens = 8;  // decoded before the unsettled tokens, then dropped from the text
  void settle(const std::vector<int32_t>& tokens);  // into the context, which keeps its last kContextTokens

  const HfTokenizer* tokenizer_;  // the tables, which stay where they are when a Tokenizer is moved
  std::vector<int32_t> prompt_, generated_;
  std::vector<int32_t> context_;  // the last settled tokens (the prompt's at first)
  std::vector<int32_t> pending_;  // tokens whose text add() has not all returned
  std::string pending_returned_;  // what add() returned of the pending tokens' text
  std::string returned_;          // all add() returned
};

}  // namespace tilefire
