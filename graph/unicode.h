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

// Unicode Normalization Form C (UAX #15): canonical decomposition, canonical ordering, canonical
// composition. Linear in the length (a run of over 32 combining marks in a row is sorted in n log n); text
// made only of code points below U+0300 is returned unchanged without looking anything up.
std::u32string to_nfc(std::u32string_view code_points);

}  // namespace tilefire::unicode
