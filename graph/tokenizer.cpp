// Encoding and decoding with an HfTokenizer (graph/tokenizer.h); reading tokenizer.json is in
// tokenizer_load.cpp, the pre-tokenizer regexes in pretokenize.cpp.
#include "graph/tokenizer.h"

#include <algorithm>
#include <array>
#include <queue>

#include "graph/unicode.h"
#include "tilefire/errors.h"

namespace tilefire {
namespace {

// GPT-2's byte-level alphabet: the printable bytes of Latin-1 stand for themselves, and the others (controls,
// space, the soft hyphen) for 256, 257, ... in byte order, so that every byte is a visible character.
struct ByteLevelAlphabet {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int, 324> byte_of_char{};  // [code points below 324]: the byte, or -1

  ByteLevelAlphabet() {
    byte_of_char.fill(-1);
    char32_t next_unprintable = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
      char_of_byte[byte] = printable ? char32_t(byte) : next_unprintable++;
      byte_of_char[char_of_byte[byte]] = byte;
    }
  }
};

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

std::string byte_level_spelling(std::string_view bytes) {
  std::string spelled;
  spelled.reserve(bytes.size() * 2);
  for (unsigned char byte : bytes) unicode::append_utf8(byte_level_alphabet().char_of_byte[byte], spelled);
  return spelled;
}

// The pieces of a Split on a literal pattern, as byte ranges [begin, end), as the tokenizers library cuts
// them (NormalizedString::split): the text as alternating matches and gaps, the matches dropped
// (Removed), kept alone (Isolated), joined to the piece before them (MergedWithPrevious: a match right
// after another stays alone) or after them (MergedWithNext), or runs of matches joined (Contiguous).
std::vector<std::pair<size_t, size_t>> split_by_literal(std::string_view text, std::string_view literal,
                                                        PreTokenizerStep::Behavior behavior) {
  struct Segment {
    size_t begin, end;
    bool match;
  };
  std::vector<Segment> segments;  // [begin, end) covering the text, none empty
  size_t at = 0;
  for (size_t found = text.find(literal); found != std::string_view::npos; found = text.find(literal, found + literal.size())) {
    if (found != at) segments.push_back({at, found, false});
    segments.push_back({found, found + literal.size(), true});
    at = found + literal.size();
  }
  if (at != text.size()) segments.push_back({at, text.size(), false});

  using Behavior = PreTokenizerStep::Behavior;
  std::vector<std::pair<size_t, size_t>> pieces;
  if (behavior == Behavior::merged_with_next) {  // the mirror of merged_with_previous, folded from the end
    bool previous_match = false;
    for (auto s = segments.rbegin(); s != segments.rend(); ++s) {
      if (s->match && !previous_match && !pieces.empty()) pieces.back().first = s->begin;
      else pieces.push_back({s->begin, s->end});
      previous_match = s->match;
    }
    std::reverse(pieces.begin(), pieces.end());
    return pieces;
  }
  bool previous_match = false;
  for (const Segment& s : segments) {
    const bool joins = behavior == Behavior::merged_with_previous ? s.match && !previous_match
                       : behavior == Behavior::contiguous         ? s.match == previous_match
                                                                  : false;
    if (behavior == Behavior::removed && s.match) {
      // dropped
    } else if (joins && !pieces.empty()) {
      pieces.back().second = s.end;
    } else {
      pieces.push_back({s.begin, s.end});
    }
    previous_match = s.match;
  }
  return pieces;
}

void replace_all(std::string& text, std::string_view pattern, std::string_view replacement) {
  std::string result;
  size_t from = 0;
  for (size_t found; (found = text.find(pattern, from)) != std::string::npos; from = found + pattern.size())
    result.append(text, from, found - from).append(replacement);
  result.append(text, from);
  text = std::move(result);
}

// The length of the longest prefix of bytes[i..] that begins a well-formed UTF-8 sequence but is cut
// short or broken (at least 1): the "maximal subpart" that one U+FFFD replaces, as Rust's
// String::from_utf8_lossy and the WHATWG decoder both do.
size_t invalid_subpart_length(std::string_view bytes, size_t i) {
  const unsigned char lead = bytes[i];
  size_t needed = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) needed = 1;
  else if (lead >= 0xE0 && lead <= 0xEF) needed = 2, low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
  else if (lead >= 0xF0 && lead <= 0xF4) needed = 3, low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
  else return 1;
  size_t length = 1;
  for (size_t k = 0; k < needed && i + length < bytes.size(); ++k) {
    const unsigned char next = bytes[i + length];
    if (next < (k == 0 ? low : 0x80) || next > (k == 0 ? high : 0xBF)) break;
    ++length;
  }
  return length;
}

std::string lossy_utf8(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size());
  std::u32string ignored;
  while (!bytes.empty()) {
    ignored.clear();  // only the offset matters; the code points decoded would pile up over the bad bytes
    const auto bad = unicode::decode_utf8(bytes, ignored);
    if (!bad) {
      text.append(bytes);
      break;
    }
    text.append(bytes.substr(0, *bad)).append("\xEF\xBF\xBD");  // U+FFFD
    bytes.remove_prefix(*bad + invalid_subpart_length(bytes, *bad));
  }
  return text;
}

bool is_valid_utf8(std::string_view bytes) {
  std::u32string ignored;
  return !unicode::decode_utf8(bytes, ignored);
}

// "<0x41>" -> 0x41; -1 for any other token.
int byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  const int high = hex(token[3]), low = hex(token[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

// A byte-level token's bytes (possibly part of a UTF-8 character); one that is not byte-level spelled (an
// added token) stays as it is.
std::string byte_level_bytes(const std::string& token) {
  std::u32string chars;
  unicode::decode_utf8(token, chars);
  std::string bytes;
  for (char32_t c : chars) {
    const int byte = c < 324 ? byte_level_alphabet().byte_of_char[c] : -1;
    if (byte < 0) return token;
    bytes.push_back(static_cast<char>(byte));
  }
  return bytes;
}

void decode_step(const DecoderStep& step, std::vector<std::string>& tokens) {
  switch (step.kind) {
    case DecoderStep::Kind::byte_level: {  // every token back to bytes, joined
      std::string bytes;
      for (const std::string& token : tokens) bytes += byte_level_bytes(token);
      tokens = {lossy_utf8(bytes)};
      return;
    }
    case DecoderStep::Kind::replace:
      for (std::string& token : tokens) replace_all(token, step.pattern, step.replacement);
      return;
    case DecoderStep::Kind::byte_fallback: {  // runs of <0xXX> tokens become their text, or one U+FFFD per byte
      std::vector<std::string> decoded;
      std::string run;
      size_t run_tokens = 0;
      const auto flush = [&] {
        if (run_tokens == 0) return;
        if (is_valid_utf8(run)) decoded.push_back(run);
        else for (size_t k = 0; k < run_tokens; ++k) decoded.push_back("\xEF\xBF\xBD");
        run.clear();
        run_tokens = 0;
      };
      for (std::string& token : tokens) {
        if (const int byte = byte_fallback_value(token); byte >= 0) {
          run.push_back(static_cast<char>(byte));
          ++run_tokens;
        } else {
          flush();
          decoded.push_back(std::move(token));
        }
      }
      flush();
      tokens = std::move(decoded);
      return;
    }
    case DecoderStep::Kind::fuse: {
      std::string joined;
      for (const std::string& token : tokens) joined += token;
      tokens = {joined};
      return;
    }
    case DecoderStep::Kind::strip: {  // up to `start` leading and `stop` trailing copies of the content, per token
      std::u32string content;  // one character (checked at load)
      unicode::decode_utf8(step.strip_content, content);
      for (std::string& token : tokens) {
        std::u32string chars;
        unicode::decode_utf8(token, chars);
        size_t begin = 0, end = chars.size();
        while (begin < chars.size() && begin < step.strip_start && chars[begin] == content[0]) ++begin;
        for (uint32_t k = 0; k < step.strip_stop && end > begin && chars[end - 1] == content[0]; ++k) --end;
        token = unicode::encode_utf8(std::u32string_view(chars).substr(begin, end - begin));
      }
      return;
    }
    case DecoderStep::Kind::metaspace: {  // the replacement is a space, and dropped in the first token
      for (size_t i = 0; i < tokens.size(); ++i)
        replace_all(tokens[i], step.metaspace_replacement, i == 0 && step.metaspace_drop_in_first ? "" : " ");
      return;
    }
  }
}

}  // namespace

char32_t byte_level_char(uint8_t byte) { return byte_level_alphabet().char_of_byte[byte]; }

const std::string& HfTokenizer::token(int32_t id) const {
  static const std::string none;
  return id >= 0 && id < vocab_size() ? token_of_id_[id] : none;
}

namespace {

// Calls on_text(begin, end) for each non-empty stretch of `text` between matches of `added` and
// on_token(token) for each match, in order. Matches are leftmost, then longest (each byte's candidates are
// longest first), searched for in the text as it is: a token's pattern is valid UTF-8, so it can only match
// where a character of valid text begins. As the Rust library's find_matches: a token with lstrip takes
// the white space before it that the match before it did not take already, one with rstrip the white space
// after it; what it takes is in no stretch. (The search goes on right after the token itself, so a token
// that begins with white space an rstrip took is still matched there, and the next stretch begins after it.)
template <typename OnText, typename OnToken>
void split_by_added_tokens(std::string_view text, const AddedTokenSet& added, OnText on_text, OnToken on_token) {
  size_t stretch_start = 0;  // past the last match and what it took
  for (size_t i = 0; i < text.size() && !added.tokens.empty();) {
    const AddedToken* match = nullptr;
    for (uint32_t t : added.by_first_byte[static_cast<uint8_t>(text[i])]) {
      const AddedToken& token = added.tokens[t];
      if (text.compare(i, token.pattern.size(), token.pattern) == 0) {
        match = &token;
        break;
      }
    }
    if (!match) {
      ++i;
      continue;
    }
    // White space the match before took (its rstrip) is past stretch_start: no stretch, nothing taken twice.
    // (The run is looked for no further back than stretch_start: a longer one would change nothing.)
    const size_t taken_from = match->lstrip ? unicode::run_start(text, stretch_start, i, unicode::is_white_space) : i;
    if (stretch_start < taken_from) on_text(stretch_start, taken_from);
    on_token(*match);
    i += match->pattern.size();
    stretch_start = match->rstrip ? unicode::run_end(text, i, unicode::is_white_space) : i;
  }
  if (stretch_start < text.size()) on_text(stretch_start, text.size());
}

}  // namespace

void AddedTokenSet::index() {
  std::stable_sort(tokens.begin(), tokens.end(), [](const AddedToken& a, const AddedToken& b) { return a.pattern.size() > b.pattern.size(); });
  for (auto& list : by_first_byte) list.clear();
  for (uint32_t t = 0; t < tokens.size(); ++t) by_first_byte[static_cast<uint8_t>(tokens[t].pattern[0])].push_back(t);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::u32string ignored;
  if (const auto bad = unicode::decode_utf8(text, ignored))
    throw InputError("the text to tokenize is not valid UTF-8 at byte " + std::to_string(*bad));
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = template_prefix_;
  // The added tokens without `normalized` first, in the raw text; the stretches between them are
  // normalized, pre-tokenized and run through BPE.
  split_by_added_tokens(
      text, raw_added_tokens_,
      [&](size_t begin, size_t end) { append_segment_ids(text.substr(begin, end - begin), begin == 0, ids); },
      [&](const AddedToken& token) { ids.push_back(token.id); });
  if (add_special_tokens) ids.insert(ids.end(), template_suffix_.begin(), template_suffix_.end());
  return ids;
}

void HfTokenizer::append_segment_ids(std::string_view segment, bool at_text_start, std::vector<int32_t>& ids) const {
  if (segment.empty()) return;
  const std::string normalized = normalize(segment);
  // The added tokens with `normalized`, in the normalized text; a stretch is at the text's start when
  // its segment is and nothing of it comes before.
  split_by_added_tokens(
      normalized, normalized_added_tokens_,
      [&](size_t begin, size_t end) {
        append_pre_tokenized_ids(std::string_view(normalized).substr(begin, end - begin), at_text_start && begin == 0, ids);
      },
      [&](const AddedToken& token) { ids.push_back(token.id); });
}

std::string HfTokenizer::normalize(std::string_view segment) const {
  std::string text(segment);
  for (const NormalizerStep& step : normalizer_) {
    switch (step.kind) {
      case NormalizerStep::Kind::nfc: {
        std::u32string chars;
        unicode::decode_utf8(text, chars);
        text = unicode::encode_utf8(unicode::to_nfc(chars));
        break;
      }
      case NormalizerStep::Kind::prepend:
        if (!text.empty()) text.insert(0, step.prepended);
        break;
      case NormalizerStep::Kind::replace:
        replace_all(text, step.pattern, step.replacement);
        break;
    }
  }
  return text;
}

void HfTokenizer::append_pre_tokenized_ids(std::string_view normalized, bool at_text_start, std::vector<int32_t>& ids) const {
  // An empty stretch (a segment the normalizer emptied) is no piece: no prefix space is added to it.
  if (normalized.empty()) return;
  // Each pre-tokenizer step splits every piece further; `first` marks the piece at offset 0 of the text
  // (Metaspace's prepend_scheme "first").
  struct Piece {
    std::string text;
    bool first;
  };
  std::vector<Piece> pieces{{std::string(normalized), at_text_start}};
  for (const PreTokenizerStep& step : pre_tokenizer_) {
    std::vector<Piece> next;
    for (Piece& piece : pieces) {
      switch (step.kind) {
        case PreTokenizerStep::Kind::split:
          for (std::string_view part : split_by_pattern(step.pattern, piece.text))
            next.push_back({std::string(part), piece.first && part.data() == piece.text.data()});
          break;
        case PreTokenizerStep::Kind::split_literal:
          for (const auto& [begin, end] : split_by_literal(piece.text, step.literal, step.behavior))
            next.push_back({piece.text.substr(begin, end - begin), piece.first && begin == 0});
          break;
        case PreTokenizerStep::Kind::byte_level: {
          if (step.add_prefix_space && piece.text.rfind(' ', 0) != 0) piece.text = " " + piece.text;  // (insert(0, " ") trips a false -Wrestrict in GCC 12)
          if (!step.use_regex) {
            next.push_back({byte_level_spelling(piece.text), piece.first});
            break;
          }
          for (std::string_view part : split_by_pattern(SplitPattern::gpt2, piece.text))
            next.push_back({byte_level_spelling(part), piece.first && part.data() == piece.text.data()});
          break;
        }
        case PreTokenizerStep::Kind::digits: {
          // Number characters (\p{N}, Rust's char::is_numeric) apart from the rest: each alone
          // (individual_digits, the Rust library's Isolated) or in runs (Contiguous); the text between
          // them is a piece of its own either way.
          std::u32string chars;
          unicode::decode_utf8(piece.text, chars);
          std::string part;
          bool part_is_number = false;
          size_t part_start = 0, offset = 0;
          const auto flush = [&] {
            if (!part.empty()) next.push_back({part, piece.first && part_start == 0});
            part.clear();
          };
          for (char32_t c : chars) {
            const bool number = unicode::is_number(c);
            if (part.empty() || number != part_is_number || (number && step.individual_digits)) {
              flush();
              part_start = offset;
              part_is_number = number;
            }
            const size_t before = part.size();
            unicode::append_utf8(c, part);
            offset += part.size() - before;
          }
          flush();
          break;
        }
        case PreTokenizerStep::Kind::metaspace: {
          replace_all(piece.text, " ", step.replacement);
          const bool prepend = step.prepend == PreTokenizerStep::Prepend::always ||
                               (step.prepend == PreTokenizerStep::Prepend::first && piece.first);
          if (prepend && piece.text.rfind(step.replacement, 0) != 0) piece.text.insert(0, step.replacement);
          if (!step.split_on_replacement) {
            next.push_back(std::move(piece));
            break;
          }
          // Each replacement begins a piece (the tokenizers library's MergedWithNext).
          size_t begin = 0;
          for (size_t found = piece.text.find(step.replacement, 1); found != std::string::npos;
               found = piece.text.find(step.replacement, found + step.replacement.size())) {
            next.push_back({piece.text.substr(begin, found - begin), piece.first && begin == 0});
            begin = found;
          }
          next.push_back({piece.text.substr(begin), piece.first && begin == 0});
          break;
        }
      }
    }
    pieces = std::move(next);
  }
  for (const Piece& piece : pieces)
    if (!piece.text.empty()) append_word_ids(piece.text, ids);
}

void HfTokenizer::append_word_ids(std::string_view word, std::vector<int32_t>& ids) const {
  if (ignore_merges_)
    if (const int32_t whole = model_vocab_.find(word, token_of_id_); whole >= 0) {
      ids.push_back(whole);
      return;
    }
  // The word's characters as symbols: each one's token, else its bytes' <0xXX> tokens (byte fallback),
  // else the unknown token, else nothing, as the tokenizers library drops a character it has no token
  // for. As there, an unknown token waits until a known character or the end of the word (byte-fallback
  // symbols go before it), and with fuse_unk the unknown characters it waits over fuse into it.
  std::vector<int32_t> symbols;
  bool unk_pending = false;
  std::u32string chars;
  unicode::decode_utf8(word, chars);
  for (char32_t c : chars) {
    std::string spelled;
    unicode::append_utf8(c, spelled);
    if (const int32_t found = model_vocab_.find(spelled, token_of_id_); found >= 0) {
      if (unk_pending) symbols.push_back(unk_id_);
      unk_pending = false;
      symbols.push_back(found);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (unsigned char byte : spelled) all_bytes = all_bytes && byte_fallback_ids_[byte] >= 0;
      if (all_bytes) {
        for (unsigned char byte : spelled) symbols.push_back(byte_fallback_ids_[byte]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (unk_pending && !fuse_unk_) symbols.push_back(unk_id_);
      unk_pending = true;
    }
  }
  if (unk_pending) symbols.push_back(unk_id_);

  // Merges, lowest rank first and leftmost among equal ranks, over a linked list of the symbols. A queued
  // pair is stale once either side has merged into something else; it is checked when it comes up.
  struct Candidate {
    uint32_t rank;
    uint32_t left;  // the left symbol's position
    int32_t merged;
    bool operator>(const Candidate& other) const { return rank != other.rank ? rank > other.rank : left > other.left; }
  };
  const size_t count = symbols.size();
  std::vector<int32_t> previous(count), next(count);
  for (size_t i = 0; i < count; ++i) {
    previous[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < count ? static_cast<int32_t>(i + 1) : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto consider = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    if (const MergeTable::Merge* merge = merges_.find(MergeTable::pair(symbols[left], symbols[next[left]])))
      queue.push({merge->rank, static_cast<uint32_t>(left), merge->merged});
  };
  for (size_t i = 0; i + 1 < count; ++i) consider(static_cast<int32_t>(i));
  std::vector<bool> removed(count, false);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int32_t left = static_cast<int32_t>(top.left), right = next[left];
    if (removed[left] || right < 0) continue;
    const MergeTable::Merge* merge = merges_.find(MergeTable::pair(symbols[left], symbols[right]));
    if (!merge || merge->merged != top.merged || merge->rank != top.rank) continue;
    symbols[left] = top.merged;
    removed[right] = true;
    next[left] = next[right];
    if (next[right] >= 0) previous[next[right]] = left;
    consider(previous[left]);
    consider(left);
  }
  for (size_t i = 0; i < count; ++i)
    if (!removed[i]) ids.push_back(symbols[i]);
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || is_special_[id]) return {};
  std::string token = token_of_id_[id];
  bool fused = false;  // a strip after the tokens are fused acts on the whole text's ends, not on a token within
  for (const DecoderStep& step : decoder_) {
    switch (step.kind) {
      case DecoderStep::Kind::byte_level:  // the raw bytes, even part of a character (decode() makes that U+FFFD)
        token = byte_level_bytes(token);
        fused = true;  // decode() joins the tokens here: a strip after it acts on the whole text
        break;
      case DecoderStep::Kind::byte_fallback:
        if (const int byte = byte_fallback_value(token); byte >= 0) token = std::string(1, static_cast<char>(byte));
        break;
      case DecoderStep::Kind::fuse:
        fused = true;
        break;
      case DecoderStep::Kind::strip:
        if (!fused) {
          std::vector<std::string> one = {std::move(token)};
          decode_step(step, one);
          token = std::move(one[0]);
        }
        break;
      case DecoderStep::Kind::metaspace:  // not the text's first token: its replacement is a space
        replace_all(token, step.metaspace_replacement, " ");
        break;
      case DecoderStep::Kind::replace: {
        std::vector<std::string> one = {std::move(token)};
        decode_step(step, one);
        token = std::move(one[0]);
        break;
      }
    }
  }
  return token;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0) throw InputError(path_ + ": the token id " + std::to_string(id) + " is negative");
    // An id no token has (a gap, or past the tokenizer's vocabulary: the padding rows a model's embedding
    // often has beyond it) decodes to nothing, as in the tokenizers library.
    if (id >= vocab_size() || token_of_id_[id].empty() || (skip_special_tokens && is_special_[id])) continue;
    tokens.push_back(token_of_id_[id]);
  }
  for (const DecoderStep& step : decoder_) decode_step(step, tokens);
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

}  // namespace tilefire
