// Reading tokenizer.json into an HfTokenizer (graph/tokenizer.h): every key Tilefire acts on is checked,
// and every component it does not run is refused by name, so a tokenizer is either run as the
// `tokenizers` library runs it or not at all.
#include <algorithm>
#include <cstdio>

#include "graph/tokenizer.h"
#include "graph/tokenizer_json.h"
#include "graph/unicode.h"
#include "tilefire/errors.h"

namespace tilefire {
namespace {

using nlohmann::json;

// The regexes of Split pre-tokenizers Tilefire has scanners for, spelled as tokenizer.json spells them.
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's Tekken (the tokenizer.json of Mistral Nemo, Mistral Small 3 and Pixtral): GPT-4o's without the
// contractions, one number character per piece.
constexpr std::string_view kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A JSON value as text for a message. A string read from the file is valid UTF-8 (the parser checks), but
// one cut from it may not be, and the JSON library throws on such a string unless told to replace.
std::string shown(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InputError(origin_ + ": " + where + ": " + what);
  }

  const json& member(const json& object, const std::string& key, const std::string& where) const {
    if (!object.is_object()) fail(where, "expected an object");
    const auto found = object.find(key);
    if (found == object.end()) fail(where, "the key '" + key + "' is missing");
    return *found;
  }
  std::string string_member(const json& object, const std::string& key, const std::string& where) const {
    const json& value = member(object, key, where);
    if (!value.is_string()) fail(where + "." + key, "expected a string");
    return value.get<std::string>();
  }
  // A boolean that may be absent (then `fallback`) but not of another type.
  bool bool_member(const json& object, const std::string& key, const std::string& where, bool fallback) const {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null()) return fallback;
    if (!found->is_boolean()) fail(where + "." + key, "expected true or false");
    return found->get<bool>();
  }
  // A string that must be null, absent or "" (a feature Tilefire does not run when set).
  void require_unset(const json& object, const std::string& key, const std::string& where) const {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null() || (found->is_string() && found->get<std::string>().empty())) return;
    fail(where + "." + key, "is " + shown(*found) + "; Tilefire's tokenizer runs only tokenizers without it");
  }
  std::string type_of(const json& component, const std::string& where) const { return string_member(component, "type", where); }
  std::string valid_utf8(const json& value, const std::string& where) const {
    if (!value.is_string()) fail(where, "expected a string");
    std::string text = value.get<std::string>();
    check_utf8(text, [&] { return where; });
    return text;
  }
  // Fails unless `text` is valid UTF-8 (`where` is made only then: it runs for every token of a vocabulary).
  template <typename Where>
  void check_utf8(std::string_view text, const Where& where) const {
    scratch_.clear();
    if (const auto bad = unicode::decode_utf8(text, scratch_)) fail(where(), "not valid UTF-8 at byte " + std::to_string(*bad));
  }
  // A string of exactly one character (Metaspace's replacement, Strip's content).
  std::string one_character(const json& object, const std::string& key, const std::string& where) const {
    std::string text = valid_utf8(member(object, key, where), where + "." + key);
    std::u32string characters;
    unicode::decode_utf8(text, characters);
    if (characters.size() != 1) fail(where + "." + key, "expected one character, not " + shown(text));
    return text;
  }

 private:
  std::string origin_;
  mutable std::u32string scratch_;  // check_utf8's code points, kept to spare an allocation per call
};

// A Sequence component's list under `key`, each item read by `read_item` with its place in the file.
// Sequences nest no deeper than kMaxSequenceDepth (each level adds one "[i]" to `where`): real files nest
// one or two, and a file nesting thousands would take memory by the square of its depth in those paths.
constexpr size_t kMaxSequenceDepth = 16;

template <typename ReadItem>
void read_sequence(const Reader& reader, const json& node, const char* key, const std::string& where, ReadItem read_item) {
  if (static_cast<size_t>(std::count(where.begin(), where.end(), '[')) >= kMaxSequenceDepth)
    reader.fail(where, "Sequences nest deeper than " + std::to_string(kMaxSequenceDepth));
  const json& list = reader.member(node, key, where);
  if (!list.is_array()) reader.fail(where + "." + key, "expected a list");
  for (size_t i = 0; i < list.size(); ++i) read_item(list[i], where + "." + key + "[" + std::to_string(i) + "]");
}

// A Replace normalizer's or decoder's pattern: only the plain-string form ({"String": "..."}).
std::string string_pattern(const Reader& reader, const json& step, const std::string& where) {
  const json& pattern = reader.member(step, "pattern", where);
  if (!pattern.is_object() || !pattern.contains("String"))
    reader.fail(where + ".pattern", "only a plain {\"String\": ...} pattern is supported, not " + shown(pattern));
  const std::string text = reader.valid_utf8(pattern["String"], where + ".pattern.String");
  if (text.empty()) reader.fail(where + ".pattern.String", "is empty");
  return text;
}

void read_normalizer(const Reader& reader, const json& node, const std::string& where, std::vector<NormalizerStep>& steps) {
  if (node.is_null()) return;
  const std::string type = reader.type_of(node, where);
  if (type == "Sequence") {
    read_sequence(reader, node, "normalizers", where, [&](const json& item, const std::string& at) { read_normalizer(reader, item, at, steps); });
  } else if (type == "NFC") {
    steps.push_back({NormalizerStep::Kind::nfc, "", "", ""});
  } else if (type == "Prepend") {
    steps.push_back({NormalizerStep::Kind::prepend, reader.valid_utf8(reader.member(node, "prepend", where), where + ".prepend"), "", ""});
  } else if (type == "Replace") {
    const std::string pattern = string_pattern(reader, node, where);
    steps.push_back({NormalizerStep::Kind::replace, "", pattern, reader.valid_utf8(reader.member(node, "content", where), where + ".content")});
  } else {
    reader.fail(where, "the normalizer '" + type + "' is not supported (Tilefire runs NFC, Prepend, Replace and Sequence)");
  }
}

// Metaspace's prepend_scheme, or in older files add_prefix_space (true: always). The Rust library refuses
// a file that gives add_prefix_space false with a scheme other than never, and so does Tilefire.
PreTokenizerStep::Prepend metaspace_prepend_scheme(const Reader& reader, const json& node, const std::string& where) {
  const bool add_prefix_space = reader.bool_member(node, "add_prefix_space", where, true);
  const auto scheme = node.find("prepend_scheme");
  if (scheme == node.end() || scheme->is_null())
    return add_prefix_space ? PreTokenizerStep::Prepend::always : PreTokenizerStep::Prepend::never;
  if (!scheme->is_string()) reader.fail(where + ".prepend_scheme", "expected a string");
  const std::string name = scheme->get<std::string>();
  PreTokenizerStep::Prepend prepend{};
  if (name == "always") prepend = PreTokenizerStep::Prepend::always;
  else if (name == "first") prepend = PreTokenizerStep::Prepend::first;
  else if (name == "never") prepend = PreTokenizerStep::Prepend::never;
  else reader.fail(where + ".prepend_scheme", "expected always, first or never, not " + shown(name));
  if (!add_prefix_space && prepend != PreTokenizerStep::Prepend::never)
    reader.fail(where + ".add_prefix_space", "is false while prepend_scheme is " + shown(name) + " (the tokenizers library refuses this too)");
  return prepend;
}

SplitPattern known_pattern(const Reader& reader, const json& node, const std::string& where) {
  const json& pattern = reader.member(node, "pattern", where);
  if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
    reader.fail(where + ".pattern", "only the regexes of Llama 3, Qwen2, GPT-2, GPT-4o and Mistral's Tekken are supported, not " + shown(pattern));
  const std::string regex = pattern["Regex"].get<std::string>();
  if (regex == kLlama3Pattern) return SplitPattern::llama3;
  if (regex == kQwen2Pattern) return SplitPattern::qwen2;
  if (regex == kGpt2Pattern) return SplitPattern::gpt2;
  if (regex == kO200kPattern) return SplitPattern::o200k;
  if (regex == kTekkenPattern) return SplitPattern::tekken;
  reader.fail(where + ".pattern.Regex", "the regex " + shown(regex) + " is not one Tilefire knows (it has scanners for "
              "the regexes of Llama 3, Qwen2, GPT-2, GPT-4o and Mistral's Tekken)");
}

void read_pre_tokenizer(const Reader& reader, const json& node, const std::string& where, std::vector<PreTokenizerStep>& steps) {
  if (node.is_null()) return;
  const std::string type = reader.type_of(node, where);
  PreTokenizerStep step{};
  if (type == "Sequence") {
    read_sequence(reader, node, "pretokenizers", where, [&](const json& item, const std::string& at) { read_pre_tokenizer(reader, item, at, steps); });
    return;
  } else if (type == "Split" && reader.member(node, "pattern", where).is_object() && reader.member(node, "pattern", where).contains("String")) {
    // A literal pattern (Gemma's " "): every behavior, the text between matches kept (invert false).
    step.kind = PreTokenizerStep::Kind::split_literal;
    step.literal = string_pattern(reader, node, where);
    const std::string behavior = reader.string_member(node, "behavior", where);
    using Behavior = PreTokenizerStep::Behavior;
    const std::pair<const char*, Behavior> behaviors[] = {{"Removed", Behavior::removed},
                                                          {"Isolated", Behavior::isolated},
                                                          {"MergedWithPrevious", Behavior::merged_with_previous},
                                                          {"MergedWithNext", Behavior::merged_with_next},
                                                          {"Contiguous", Behavior::contiguous}};
    const auto found = std::find_if(std::begin(behaviors), std::end(behaviors), [&](const auto& b) { return behavior == b.first; });
    if (found == std::end(behaviors))
      reader.fail(where + ".behavior", "expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous, not " + shown(behavior));
    step.behavior = found->second;
    if (reader.bool_member(node, "invert", where, false))
      reader.fail(where + ".invert", "is true with a {\"String\": ...} pattern: only invert false is supported there");
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::split;
    step.pattern = known_pattern(reader, node, where);
    // Every regex known matches somewhere at every position, so its matches tile the text: Isolated (each
    // match a piece, the text between none) and Removed with invert (the text between removed, which is
    // none; GPT-4o's files say this) give the same pieces.
    const std::string behavior = reader.string_member(node, "behavior", where);
    const bool invert = reader.bool_member(node, "invert", where, false);
    if (behavior == "Isolated") {
      if (invert) reader.fail(where + ".invert", "is true with Isolated: only Isolated, or Removed with invert true, is supported");
    } else if (behavior == "Removed") {
      if (!invert) reader.fail(where + ".invert", "is false with Removed (the matches removed): only Isolated, or Removed with invert true, is supported");
    } else {
      reader.fail(where + ".behavior", "only Isolated, or Removed with invert true, is supported, not " + shown(behavior));
    }
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::byte_level;
    step.use_regex = reader.bool_member(node, "use_regex", where, true);
    step.add_prefix_space = reader.bool_member(node, "add_prefix_space", where, true);
    step.pattern = SplitPattern::gpt2;
  } else if (type == "Digits") {
    step.kind = PreTokenizerStep::Kind::digits;
    step.individual_digits = reader.bool_member(node, "individual_digits", where, false);
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::metaspace;
    step.replacement = reader.one_character(node, "replacement", where);
    step.split_on_replacement = reader.bool_member(node, "split", where, true);
    step.prepend = metaspace_prepend_scheme(reader, node, where);
  } else {
    reader.fail(where, "the pre-tokenizer '" + type + "' is not supported (Tilefire runs Split, ByteLevel, Metaspace, Digits and Sequence)");
  }
  steps.push_back(step);
}

void read_decoder(const Reader& reader, const json& node, const std::string& where, std::vector<DecoderStep>& steps) {
  if (node.is_null()) reader.fail(where, "is missing: without a decoder the text of the tokens is not defined");
  const std::string type = reader.type_of(node, where);
  DecoderStep step{};
  if (type == "Sequence") {
    read_sequence(reader, node, "decoders", where, [&](const json& item, const std::string& at) { read_decoder(reader, item, at, steps); });
    return;
  } else if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::byte_level;
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::replace;
    step.pattern = string_pattern(reader, node, where);
    step.replacement = reader.valid_utf8(reader.member(node, "content", where), where + ".content");
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::fuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::strip;
    step.strip_content = reader.one_character(node, "content", where);
    for (auto [key, field] : {std::pair{"start", &step.strip_start}, std::pair{"stop", &step.strip_stop}}) {
      const json& count = reader.member(node, key, where);
      if (!count.is_number_unsigned() || count.get<uint64_t>() > 1'000'000) reader.fail(where + "." + key, "expected a count");
      *field = count.get<uint32_t>();
    }
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::metaspace;
    step.metaspace_replacement = reader.one_character(node, "replacement", where);
    step.metaspace_drop_in_first = metaspace_prepend_scheme(reader, node, where) != PreTokenizerStep::Prepend::never;
  } else {
    reader.fail(where, "the decoder '" + type + "' is not supported (Tilefire runs ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                "Metaspace and Sequence)");
  }
  steps.push_back(step);
}

}  // namespace

HfTokenizer HfTokenizer::load(const std::filesystem::path& path) {
  const std::string origin = path.string();
  const Reader reader(origin);
  const TokenizerJson file = read_tokenizer_json(path, origin);
  const json& document = file.document;
  if (!document.is_object()) reader.fail("the document", "expected an object");
  HfTokenizer tokenizer;
  tokenizer.path_ = origin;

  // The model: BPE, its vocabulary and merges.
  const json& model = reader.member(document, "model", "the document");
  const std::string model_type = model.is_object() && model.contains("type") ? reader.type_of(model, "model") : "BPE";
  if (model_type != "BPE")
    reader.fail("model.type", "'" + model_type + "' is not supported (Tilefire runs BPE tokenizers: Llama, Mistral, Qwen, GPT-2)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) reader.require_unset(model, key, "model");
  if (const auto dropout = model.find("dropout"); dropout != model.end() && !dropout->is_null() &&
                                                  !(dropout->is_number() && dropout->get<double>() == 0.0))
    reader.fail("model.dropout", "is " + shown(*dropout) + "; BPE dropout is for training, and Tilefire runs only without it");
  tokenizer.byte_fallback_ = reader.bool_member(model, "byte_fallback", "model", false);
  tokenizer.fuse_unk_ = reader.bool_member(model, "fuse_unk", "model", false);
  tokenizer.ignore_merges_ = reader.bool_member(model, "ignore_merges", "model", false);

  // The reader keeps model.vocab's entries and model.merges' items apart (graph/tokenizer_json.h).
  const json& vocab = reader.member(model, "vocab", "model");
  if (!vocab.is_object()) reader.fail("model.vocab", "expected an object of token: id");
  constexpr int64_t kMaxVocab = 1 << 22;  // real vocabularies hold up to about 2^18
  // Every id names one token; the model's vocabulary and the added tokens share the id space.
  const auto give_id = [&](const std::string& token, const json& id_value, const std::string& where) {
    if (!id_value.is_number_integer() || id_value.get<int64_t>() < 0 || id_value.get<int64_t>() >= kMaxVocab)
      reader.fail(where, "the id of " + shown(token) + " is " + shown(id_value) + ", expected 0 to " + std::to_string(kMaxVocab - 1));
    const int32_t id = id_value.get<int32_t>();
    if (static_cast<size_t>(id) >= tokenizer.token_of_id_.size()) {
      tokenizer.token_of_id_.resize(id + 1);
      tokenizer.is_special_.resize(id + 1, false);
    }
    const std::string& existing = tokenizer.token_of_id_[id];
    if (!existing.empty() && existing != token)
      reader.fail(where, "the id " + std::to_string(id) + " is given to both " + shown(existing) + " and " + shown(token));
    tokenizer.token_of_id_[id] = token;
    return id;
  };
  tokenizer.model_vocab_.reserve(file.vocab.size(), tokenizer.token_of_id_);
  for (const auto& [token, id] : file.vocab) {
    if (token.empty()) reader.fail("model.vocab", "has an empty token");
    reader.check_utf8(token, [] { return std::string("model.vocab"); });
    // The JSON library's own tree would keep the last of a token listed twice, and the Rust library's map
    // too, leaving the other id without a token: which was meant?
    if (!tokenizer.model_vocab_.insert(give_id(token, id, "model.vocab"), tokenizer.token_of_id_))
      reader.fail("model.vocab", "the token " + shown(token) + " is listed twice");
  }

  const json& merges = reader.member(model, "merges", "model");
  if (!merges.is_array()) reader.fail("model.merges", "expected a list");
  tokenizer.merges_.reserve(file.merges.size());
  std::string merged;  // left + right, reused
  for (size_t rank = 0; rank < file.merges.size(); ++rank) {
    const TokenizerJson::Merge& merge = file.merges[rank];
    const auto where = [&] { return "model.merges[" + std::to_string(rank) + "]"; };
    std::string_view left, right;
    if (merge.form == TokenizerJson::Merge::Form::text) {  // "left right" (older files); a token holds no space in these vocabularies
      const std::string_view text = merge.left;
      const size_t space = text.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == text.size() || text.find(' ', space + 1) != std::string::npos)
        reader.fail(where(), shown(merge.left) + " is not two tokens separated by one space");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.form == TokenizerJson::Merge::Form::pair) {
      left = merge.left;
      right = merge.right;
    } else {
      reader.fail(where(), "expected \"left right\" or [left, right], not " + shown(merge.other));
    }
    merged.assign(left);
    merged += right;
    const TokenIndex& vocab_ids = tokenizer.model_vocab_;
    const std::vector<std::string>& texts = tokenizer.token_of_id_;
    const int32_t left_id = vocab_ids.find(left, texts), right_id = vocab_ids.find(right, texts), merged_id = vocab_ids.find(merged, texts);
    for (const auto& [found, token] : {std::pair{left_id, left}, std::pair{right_id, right}, std::pair{merged_id, std::string_view(merged)}})
      if (found < 0) reader.fail(where(), shown(std::string(token)) + " is not in model.vocab");
    // A pair listed twice takes its last rank, as in the Rust library (its map keeps the last).
    tokenizer.merges_.insert_or_assign(MergeTable::pair(left_id, right_id), {static_cast<uint32_t>(rank), merged_id});
  }

  if (const auto unk = model.find("unk_token"); unk != model.end() && !unk->is_null()) {
    const std::string name = reader.valid_utf8(*unk, "model.unk_token");
    tokenizer.unk_id_ = tokenizer.model_vocab_.find(name, tokenizer.token_of_id_);
    if (tokenizer.unk_id_ < 0) reader.fail("model.unk_token", shown(name) + " is not in model.vocab");
  }
  tokenizer.byte_fallback_ids_.assign(256, -1);
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", byte);
    tokenizer.byte_fallback_ids_[byte] = tokenizer.model_vocab_.find(name, tokenizer.token_of_id_);  // -1 when absent
  }

  // Added tokens: those without `normalized` are matched in the raw text, the others in the normalized
  // text between those, as they read after the normalizer (the Rust library's refresh_added_tokens puts
  // each through it: under Llama 2's Prepend, a normalized "ab" is matched as "▁ab"). One the model's
  // vocabulary also holds must have its id there.
  read_normalizer(reader, document.value("normalizer", json()), "normalizer", tokenizer.normalizer_);
  if (const auto added = document.find("added_tokens"); added != document.end() && !added->is_null()) {
    if (!added->is_array()) reader.fail("added_tokens", "expected a list");
    for (size_t i = 0; i < added->size(); ++i) {
      const json& entry = (*added)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      AddedToken token;
      token.content = reader.valid_utf8(reader.member(entry, "content", where), where + ".content");
      if (token.content.empty()) reader.fail(where + ".content", "is empty");
      token.special = reader.bool_member(entry, "special", where, false);
      // single_word needs the Rust library's \w (Alphabetic, marks, decimal digits, connector punctuation),
      // which the Unicode tables here do not hold; no decoder model's file sets it.
      if (reader.bool_member(entry, "single_word", where, false))
        reader.fail(where + ".single_word", "is true for " + shown(token.content) +
                                                "; Tilefire matches added tokens inside words too (lstrip and rstrip it runs)");
      token.lstrip = reader.bool_member(entry, "lstrip", where, false);
      token.rstrip = reader.bool_member(entry, "rstrip", where, false);
      token.id = give_id(token.content, reader.member(entry, "id", where), where + ".id");
      if (const int32_t in_vocab = tokenizer.model_vocab_.find(token.content, tokenizer.token_of_id_); in_vocab >= 0 && in_vocab != token.id)
        reader.fail(where + ".id", shown(token.content) + " has the id " + std::to_string(token.id) + " here and " +
                    std::to_string(in_vocab) + " in model.vocab");
      if (token.special) tokenizer.is_special_[token.id] = true;
      const bool normalized = reader.bool_member(entry, "normalized", where, !token.special);
      token.pattern = normalized ? tokenizer.normalize(token.content) : token.content;
      if (token.pattern.empty()) reader.fail(where + ".content", shown(token.content) + " is nothing after the normalizer");
      (normalized ? tokenizer.normalized_added_tokens_ : tokenizer.raw_added_tokens_).tokens.push_back(std::move(token));
    }
    tokenizer.raw_added_tokens_.index();
    tokenizer.normalized_added_tokens_.index();
  }

  read_pre_tokenizer(reader, document.value("pre_tokenizer", json()), "pre_tokenizer", tokenizer.pre_tokenizer_);
  read_decoder(reader, document.value("decoder", json()), "decoder", tokenizer.decoder_);

  // The post-processor: a template around the single sequence (ByteLevel's only changes offsets).
  bool seen_template = false;
  const auto read_post_processor = [&](const auto& self, const json& node, const std::string& where) -> void {
    if (node.is_null()) return;
    const std::string type = reader.type_of(node, where);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      read_sequence(reader, node, "processors", where, [&](const json& item, const std::string& at) { self(self, item, at); });
      return;
    }
    if (type != "TemplateProcessing")
      reader.fail(where, "the post-processor '" + type + "' is not supported (Tilefire runs TemplateProcessing, ByteLevel and Sequence)");
    if (seen_template)
      reader.fail(where, "a second TemplateProcessing: Tilefire runs one template");
    seen_template = true;
    const json& single = reader.member(node, "single", where);
    const json& special_tokens = reader.member(node, "special_tokens", where);
    if (!single.is_array()) reader.fail(where + ".single", "expected a list");
    bool after_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string item_where = where + ".single[" + std::to_string(i) + "]";
      if (single[i].is_object() && single[i].contains("Sequence")) {
        if (after_sequence) reader.fail(item_where, "the sequence appears twice");
        after_sequence = true;
        continue;
      }
      const json& special = reader.member(single[i], "SpecialToken", item_where);
      const std::string name = reader.string_member(special, "id", item_where + ".SpecialToken");
      const json& ids = reader.member(reader.member(special_tokens, name, where + ".special_tokens"), "ids",
                                      where + ".special_tokens." + name);
      if (!ids.is_array()) reader.fail(where + ".special_tokens." + name + ".ids", "expected a list");
      for (const json& id : ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tokenizer.vocab_size() ||
            tokenizer.token_of_id_[id.get<int32_t>()].empty())
          reader.fail(where + ".special_tokens." + name + ".ids", shown(id) + " is not a token id of this tokenizer");
        (after_sequence ? tokenizer.template_suffix_ : tokenizer.template_prefix_).push_back(id.get<int32_t>());
      }
    }
    if (!after_sequence) reader.fail(where + ".single", "has no {\"Sequence\": ...} item");
  };
  read_post_processor(read_post_processor, document.value("post_processor", json()), "post_processor");
  if (tokenizer.token_of_id_.empty()) reader.fail("model.vocab", "is empty");
  return tokenizer;
}

}  // namespace tilefire
