#pragma once
// Unicode support for the tokenizer: UTF-8 decoding and encoding, the character classes its pre-tokenizer
// patterns use (\p{L}, \p{N}, \s) and Normalization Form C. The data is Unicode 17.0, generated into
// graph/unicode_tables.inc by scripts/gen-unicode-tables.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tilefire::unicode {

// UTF-8 to code points. Returns the byte offset of the first invalid sequence (a stray continuation byte,
// an overlong form, a surrogate, a value above U+10FFFF, a sequence cut short), or std::nullopt when all of
// `bytes` is valid; `out` gets the code points decoded (appended) before that point.
std::optional<std::size_t> decode_utf8(std::string_view bytes, std::u32string& out);

// Appends the UTF-8 form of `code_point`, which must be a Unicode scalar value (at most U+10FFFF, not a
// surrogate).
void append_utf8(char32_t code_point, std::string& out);

// The UTF-8 form of a sequence of scalar values.
std::string encode_utf8(std::u32string_view code_points);

bool is_letter(char32_t code_point);       // General_Category L (Lu, Ll, Lt, Lm, Lo): regex \p{L}
bool is_number(char32_t code_point);       // General_Category N (Nd, Nl, No): regex \p{N}
bool is_white_space(char32_t code_point);  // the White_Space property (what Oniguruma's \s matches on UTF-8)
bool is_lowercase_letter(char32_t code_point);       // General_Category Ll: regex \p{Ll}
bool is_upper_or_titlecase_letter(char32_t code_point);  // Lu or Lt: regex [\p{Lu}\p{Lt}]
bool is_mark(char32_t code_point);                   // General_Category M (Mn, Mc, Me): regex \p{M}

// The code point whose UTF-8 bytes are text[at, end); false when they are not one whole character.
bool code_point_at(std::string_view text, std::size_t at, std::size_t end, char32_t& out);

// Runs of characters of a class in UTF-8 text (white space, for the tokenizer's lstrip and rstrip and the
// chat templates' whitespace control); a byte that is not part of a whole character ends a run.
// Where the run that starts at text[from] ends:
template <class Class>
std::size_t run_end(std::string_view text, std::size_t from, Class in_class) {
  while (from < text.size()) {
    std::size_t end = from + 1;
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80 && end - from < 4) ++end;
    char32_t c = 0;
    if (!code_point_at(text, from, end, c) || !in_class(c)) return from;
    from = end;
  }
  return from;
}
// Where the run that ends at text[end] begins, looking back no further than `begin`:
template <class Class>
std::size_t run_start(std::string_view text, std::size_t begin, std::size_t end, Class in_class) {
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    char32_t c = 0;
    if (!code_point_at(text, start, end, c) || !in_class(c)) return end;
    end = start;
  }
  return end;
}

// Unicode Normalization Form C (UAX #15): canonical decomposition, canonical ordering, canonical
// composition. Linear in the length (a run of over 32 combining marks in a row is sorted in n log n); text
// made only of code points below U+0300 is returned unchanged without looking anything up.
std::u32string to_nfc(std::u32string_view code_points);

}  // namespace tilefire::unicode
