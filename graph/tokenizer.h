#pragma once
// A Hugging Face tokenizer read from a model folder's tokenizer.json: text to token ids and back, as the
// `tokenizers` library does with that file alone (tokenizer_config.json is not read: its chat template and
// its add_bos_token, which transformers folds into the post-processor, are not applied here).
//
// What it runs (docs/TOKENIZER.md): a BPE model (byte-level as Llama 3, Qwen2/3 and GPT-2 use it, or over
// characters with byte fallback as Llama 2 and Mistral do), the normalizers, pre-tokenizers, post-processors
// and decoders those tokenizers use. Anything else in the file (a WordPiece or Unigram model, a pre-tokenizer
// regex it does not know, an added token with single_word) is an InputError naming the key and the value: a
// tokenizer that split text differently from the model's training would give a plausible but wrong prompt.
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/token_index.h"

namespace tilefire {

// The regexes of the Split and ByteLevel pre-tokenizers that Tilefire knows, by what they match. Each is a
// hand-written scanner (graph/pretokenize.cpp) over Unicode categories, not a regex engine.
enum class SplitPattern {
  gpt2,      // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+   (ByteLevel's use_regex)
  llama3,    // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen2,     // the same with \p{N} (one digit per piece) in place of \p{N}{1,3}
  o200k,     // GPT-4o's (tiktoken's o200k_base; Phi-4-mini's): words split by case, \p{N}{1,3}, [\r\n/]* after
             // punctuation (graph/pretokenize.cpp)
  tekken,    // Mistral's Tekken (Mistral Nemo, Mistral Small 3, Pixtral): GPT-4o's without the contractions,
             // \p{N} (one number character per piece)
};

// Splits `text` (UTF-8, valid) into the pieces the pattern matches, in order; with the Isolated behaviour
// every byte of `text` is in exactly one piece (text the pattern does not match becomes a piece of its own).
std::vector<std::string_view> split_by_pattern(SplitPattern pattern, std::string_view text);

// One step of a normalizer, pre-tokenizer or decoder chain as tokenizer.json describes it.
struct NormalizerStep {
  enum class Kind { nfc, prepend, replace } kind;
  std::string prepended;    // prepend
  std::string pattern;      // replace: a plain string
  std::string replacement;  // replace
};

struct PreTokenizerStep {
  enum class Kind { split, split_literal, byte_level, metaspace, digits } kind;
  SplitPattern pattern = SplitPattern::gpt2;  // split, and byte_level with use_regex
  // split_literal: a Split on a {"String": ...} pattern (Gemma's, on " "), and where each match goes: the
  // tokenizers library's SplitDelimiterBehavior.
  std::string literal;
  enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous } behavior = Behavior::isolated;
  bool use_regex = false;                     // byte_level
  bool add_prefix_space = false;              // byte_level
  std::string replacement;                    // metaspace: "▁"
  enum class Prepend { always, first, never } prepend = Prepend::always;  // metaspace
  bool split_on_replacement = false;          // metaspace
  bool individual_digits = false;             // digits: each number character alone, or runs of them
};

struct DecoderStep {
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind;
  std::string pattern, replacement;  // replace
  std::string strip_content;         // strip: one character
  uint32_t strip_start = 0, strip_stop = 0;
  std::string metaspace_replacement;  // metaspace: one character ("▁")
  bool metaspace_drop_in_first = true;  // metaspace: prepend_scheme other than never drops it from the first token
};

// A token the tokenizer matches before the BPE model sees the text (special tokens such as <|eot_id|>):
// in the raw text, or with `normalized` in the text after the normalizer.
struct AddedToken {
  std::string content;  // its text (decoding gives it)
  std::string pattern;  // what is matched: the content, or for a `normalized` token the content normalized
  int32_t id = 0;
  bool special = false;  // skipped by decode(..., skip_special_tokens = true)
  // The white space (Unicode White_Space, the Rust library's \s) right before it (lstrip) or right after it
  // (rstrip) goes with the token: Phi-3's <|user|>, <|end|> and <|assistant|> take the newline after them.
  bool lstrip = false, rstrip = false;
};

// The added tokens matched in one text (raw or normalized), longest pattern first, and for each byte the
// indices of those whose pattern starts with it (longest first too): a text position looks only at the tokens that
// can match there, not at all of them (Gemma 3 has 6,415).
struct AddedTokenSet {
  std::vector<AddedToken> tokens;
  std::array<std::vector<uint32_t>, 256> by_first_byte;
  // Sorts `tokens` longest first (stable: equal lengths keep the file's order) and builds the index.
  void index();
};

class HfTokenizer {
 public:
  // Reads `path` (a tokenizer.json). InputError naming the file and the key for a file that is missing,
  // not JSON, or describes a tokenizer Tilefire does not run.
  static HfTokenizer load(const std::filesystem::path& path);

  // The ids of `text` (valid UTF-8, else InputError naming the byte offset). With add_special_tokens the
  // post-processor's template adds its tokens (Llama 2's <s>, Llama 3's <|begin_of_text|>).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The text of `ids` through the decoder chain; bytes that do not form UTF-8 become U+FFFD. An id no
  // token has decodes to nothing (as in the tokenizers library); a negative one is an InputError.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The bytes `id` adds to a text it is generated into, past its start (decoded within a text: a
  // SentencePiece token's leading space kept; a byte-level token's bytes as they are, which can be part of
  // a UTF-8 character): "" for a special token and an id no token has. Tokens whose bytes together are
  // valid UTF-8 decode, after a context, to these bytes joined.
  std::string token_bytes(int32_t id) const;

  // One past the largest id (the vocabulary and the added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(token_of_id_.size()); }
  // The token string of `id` as the vocabulary spells it ("" for an id no token has).
  const std::string& token(int32_t id) const;
  bool is_special(int32_t id) const { return id >= 0 && id < vocab_size() && is_special_[id]; }
  const std::string& path() const { return path_; }

 private:
  void append_word_ids(std::string_view word, std::vector<int32_t>& ids) const;
  void append_segment_ids(std::string_view segment, bool at_text_start, std::vector<int32_t>& ids) const;
  void append_pre_tokenized_ids(std::string_view normalized, bool at_text_start, std::vector<int32_t>& ids) const;
  std::string normalize(std::string_view segment) const;

  std::string path_;
  TokenIndex model_vocab_;  // the BPE model's own tokens (not the added ones), their texts in token_of_id_
  std::vector<std::string> token_of_id_;  // [vocab_size], "" where no token has the id
  std::vector<bool> is_special_;          // [vocab_size]
  MergeTable merges_;  // key: MergeTable::pair(left id, right id)
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_fallback_ids_;  // [256]: the id of <0xXX>, -1 when the vocabulary lacks it

  // Longest content first, so the first that matches is the longest. The Rust library matches the ones
  // without `normalized` in the raw text, then the others in each normalized piece between those.
  AddedTokenSet raw_added_tokens_, normalized_added_tokens_;
  std::vector<NormalizerStep> normalizer_;
  std::vector<PreTokenizerStep> pre_tokenizer_;
  std::vector<DecoderStep> decoder_;
  std::vector<int32_t> template_prefix_, template_suffix_;  // post-processor: ids around the sequence
};

// The 256 code points the byte-level alphabet spells bytes with (GPT-2's printable mapping): byte b is
// written as byte_level_char(b) in a byte-level vocabulary.
char32_t byte_level_char(uint8_t byte);

}  // namespace tilefire
