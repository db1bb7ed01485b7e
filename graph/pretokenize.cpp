// The pre-tokenizer regexes Tilefire knows, as scanners (graph/tokenizer.h, SplitPattern).
//
// Each regex is an alternation tried left to right at the current position, the first alternative that
// matches winning (Oniguruma's leftmost-first), with greedy quantifiers that backtrack. Every code point is
// a letter (\p{L}), a number (\p{N}), white space (\s: the White_Space property) or other, and for these
// patterns some alternative matches at every position, so the matches tile the text. Each alternative
// below says which part of the pattern it is and what its backtracking comes to.
#include <cstddef>
#include <string_view>
#include <vector>

#include "graph/tokenizer.h"
#include "graph/unicode.h"

namespace tilefire {
namespace {

bool is_line_break(char32_t c) { return c == U'\r' || c == U'\n'; }
bool is_other(char32_t c) { return !unicode::is_white_space(c) && !unicode::is_letter(c) && !unicode::is_number(c); }

class Scanner {
 public:
  explicit Scanner(const std::u32string& text) : text_(text) {}

  size_t size() const { return text_.size(); }
  char32_t at(size_t i) const { return i < text_.size() ? text_[i] : U'\0'; }
  bool has(size_t i) const { return i < text_.size(); }

  // The end of the run of code points from `i` for which `in_class` holds (i when none does).
  template <typename Class>
  size_t run_end(size_t i, Class in_class, size_t max_length = SIZE_MAX) const {
    size_t end = i;
    while (end < text_.size() && end - i < max_length && in_class(text_[end])) ++end;
    return end;
  }

  // 's|'t|'re|'ve|'m|'ll|'d at i, case-sensitive or (?i:...): the length matched, 0 for none. Under
  // Unicode case folding 's' also matches U+017F LATIN SMALL LETTER LONG S.
  size_t contraction(size_t i, bool ignore_case) const {
    if (at(i) != U'\'') return 0;
    const auto is = [&](size_t k, char32_t lower) {
      const char32_t c = at(k);
      if (c == lower) return true;
      if (!ignore_case) return false;
      return c == lower - 32 || (lower == U's' && c == U'\u017F');
    };
    // The alternatives in the pattern's order; none is a prefix of a later one, so order only matters
    // for what it says.
    if (is(i + 1, U's') || is(i + 1, U't') || is(i + 1, U'm') || is(i + 1, U'd')) return 2;
    if ((is(i + 1, U'r') || is(i + 1, U'v')) && is(i + 2, U'e')) return 3;
    if (is(i + 1, U'l') && is(i + 2, U'l')) return 3;
    return 0;
  }

  // " ?X+" at i: an optional U+0020 then a run of class X. Backtracking drops the space when X does not
  // follow it, and then X+ must match at the space itself, which it cannot for the classes used here.
  template <typename Class>
  size_t optional_space_then_run(size_t i, Class in_class) const {
    if (at(i) == U' ' && has(i + 1) && in_class(at(i + 1))) return run_end(i + 1, in_class) - i;
    if (has(i) && in_class(at(i))) return run_end(i, in_class) - i;
    return 0;
  }

  // \s+(?!\S): the longest run of white space that is not followed by a non-space. The greedy run stops
  // before a non-space (or at the end); giving back one code point leaves white space after it.
  size_t spaces_not_before_non_space(size_t i) const {
    const size_t end = run_end(i, unicode::is_white_space);
    if (end == i) return 0;
    if (end == size()) return end - i;
    return end - i >= 2 ? end - i - 1 : 0;
  }

  size_t spaces(size_t i) const { return run_end(i, unicode::is_white_space) - i; }

  // \s*[\r\n]+: white space up to and including the last line break of the run of white space from i.
  // (\s* takes the whole run and backs off to the last \r or \n; [\r\n]+ then takes it alone, since the
  // next code point is either not a line break or not white space.)
  size_t spaces_through_last_line_break(size_t i) const {
    const size_t end = run_end(i, unicode::is_white_space);
    for (size_t k = end; k > i; --k)
      if (is_line_break(at(k - 1))) return k - i;
    return 0;
  }

 private:
  const std::u32string& text_;
};

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t gpt2_match(const Scanner& s, size_t i) {
  if (size_t n = s.contraction(i, /*ignore_case=*/false)) return n;
  if (size_t n = s.optional_space_then_run(i, unicode::is_letter)) return n;
  if (size_t n = s.optional_space_then_run(i, unicode::is_number)) return n;
  if (size_t n = s.optional_space_then_run(i, is_other)) return n;
  if (size_t n = s.spaces_not_before_non_space(i)) return n;
  return s.spaces(i);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// (Qwen2's pattern has \p{N} where Llama 3's has \p{N}{1,3}: max_digits 1 or 3.)
size_t llama3_match(const Scanner& s, size_t i, size_t max_digits) {
  if (size_t n = s.contraction(i, /*ignore_case=*/true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+: one code point that is neither a line break, a letter nor a number may lead
  // the letters (a space, a tab, punctuation).
  const char32_t first = s.at(i);
  if (s.has(i) && !is_line_break(first) && !unicode::is_letter(first) && !unicode::is_number(first) && s.has(i + 1) &&
      unicode::is_letter(s.at(i + 1)))
    return s.run_end(i + 1, unicode::is_letter) - i;
  if (s.has(i) && unicode::is_letter(first)) return s.run_end(i, unicode::is_letter) - i;
  if (size_t n = s.run_end(i, unicode::is_number, max_digits) - i) return n;
  // ?[^\s\p{L}\p{N}]+[\r\n]*
  if (size_t n = s.optional_space_then_run(i, is_other)) return s.run_end(i + n, is_line_break) - i;
  if (size_t n = s.spaces_through_last_line_break(i)) return n;
  if (size_t n = s.spaces_not_before_non_space(i)) return n;
  return s.spaces(i);
}

// GPT-4o's word classes: a word's head [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and its tail [\p{Ll}\p{Lm}\p{Lo}\p{M}]
// (modifier and other letters and marks are both).
bool is_word_head(char32_t c) {
  return unicode::is_mark(c) || (unicode::is_letter(c) && !unicode::is_lowercase_letter(c));
}
bool is_word_tail(char32_t c) {
  return unicode::is_mark(c) || (unicode::is_letter(c) && !unicode::is_upper_or_titlecase_letter(c));
}
// [^\r\n\p{L}\p{N}]: what may lead a word (a space, punctuation, a mark).
bool is_word_lead(char32_t c) { return !is_line_break(c) && !unicode::is_letter(c) && !unicode::is_number(c); }

// GPT-4o's (o200k):
//   [^\r\n\p{L}\p{N}]?[HEAD]*[TAIL]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |[^\r\n\p{L}\p{N}]?[HEAD]+[TAIL]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// and Mistral's Tekken, the same without the two contractions and with \p{N} in place of \p{N}{1,3}
// (`contractions` false, `digits` 1): "it's" is then "it" and "'s", the apostrophe leading a word.
size_t o200k_match(const Scanner& s, size_t i, bool contractions, size_t digits) {
  const auto contraction = [&](size_t end) { return contractions ? s.contraction(end, /*ignore_case=*/true) : 0; };
  // The two word alternatives, each with its lead taken first and then without it (the optional's
  // backtracking). [HEAD]*[TAIL]+: the head run greedy, given back a code point at a time until a tail
  // code point follows it (the last one given back may be that one: the classes share Lm, Lo and M); the
  // tail run then greedy, and the contraction if it follows (optional: nothing after it can fail).
  const auto heads_then_tails = [&](size_t start) -> size_t {
    const size_t heads_end = s.run_end(start, is_word_head);
    for (size_t tail = heads_end + 1; tail-- > start;)
      if (s.has(tail) && is_word_tail(s.at(tail))) {
        const size_t end = s.run_end(tail, is_word_tail);
        return end + contraction(end);
      }
    return 0;
  };
  // [HEAD]+[TAIL]*: at least one head, then the tails (none needed), then the contraction.
  const auto heads_at_least_one = [&](size_t start) -> size_t {
    const size_t heads_end = s.run_end(start, is_word_head);
    if (heads_end == start) return 0;
    const size_t end = s.run_end(heads_end, is_word_tail);
    return end + contraction(end);
  };
  const bool lead = s.has(i) && is_word_lead(s.at(i));
  if (lead)
    if (size_t end = heads_then_tails(i + 1)) return end - i;
  if (size_t end = heads_then_tails(i)) return end - i;
  if (lead)
    if (size_t end = heads_at_least_one(i + 1)) return end - i;
  if (size_t end = heads_at_least_one(i)) return end - i;
  if (size_t n = s.run_end(i, unicode::is_number, digits) - i) return n;
  // ?[^\s\p{L}\p{N}]+[\r\n/]*
  if (size_t n = s.optional_space_then_run(i, is_other))
    return s.run_end(i + n, [](char32_t c) { return is_line_break(c) || c == U'/'; }) - i;
  if (size_t n = s.spaces_through_last_line_break(i)) return n;
  if (size_t n = s.spaces_not_before_non_space(i)) return n;
  return s.spaces(i);
}

}  // namespace

std::vector<std::string_view> split_by_pattern(SplitPattern pattern, std::string_view text) {
  std::u32string code_points;
  code_points.reserve(text.size());
  unicode::decode_utf8(text, code_points);  // the caller checked the text is valid UTF-8
  std::vector<size_t> byte_offset(code_points.size() + 1);  // [code points + 1]
  for (size_t i = 0, offset = 0; i < code_points.size(); ++i) {
    byte_offset[i] = offset;
    const char32_t c = code_points[i];
    offset += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  byte_offset[code_points.size()] = text.size();

  const Scanner scanner(code_points);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < code_points.size();) {
    size_t length = 0;
    switch (pattern) {
      case SplitPattern::gpt2: length = gpt2_match(scanner, i); break;
      case SplitPattern::llama3: length = llama3_match(scanner, i, 3); break;
      case SplitPattern::qwen2: length = llama3_match(scanner, i, 1); break;
      case SplitPattern::o200k: length = o200k_match(scanner, i, /*contractions=*/true, 3); break;
      case SplitPattern::tekken: length = o200k_match(scanner, i, /*contractions=*/false, 1); break;
    }
    // Some alternative matches every code point (see the top of the file); a zero length here would be
    // a scanner fault, and one code point on its own is what Isolated splitting makes of unmatched text.
    if (length == 0) length = 1;
    pieces.push_back(text.substr(byte_offset[i], byte_offset[i + length] - byte_offset[i]));
    i += length;
  }
  return pieces;
}

}  // namespace tilefire
