#pragma once
// How a string held to a pattern is written in a reply, byte by byte: shared by the schema automaton
// (json_schema_bytes.cpp), which also holds the string to its lengths, and the per-state token tables
// (json_schema_pattern_tokens.cpp), which leave the lengths to be checked when a table is read.
//
// The string is written as raw UTF-8 with only the escapes JSON needs (\" \\ \/ \b \f \n \r \t, and
// \u00XX for other control characters), so each byte narrows the character being written to a range of
// code points; the byte is taken when the caller says some character in that range may come next.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "tilefire/json_schema.h"

namespace tilefire {

// A string frame's escape (JsonSchemaBytes::Frame::escape): none, after '\', hex digits of \u (2 + those
// matched), a low surrogate's '\' and 'u'.
enum : uint8_t { kNoEscape = 0, kBackslash = 1, kHexDigits = 2, kLowBackslash = 6, kLowU = 7 };

inline int hex_digit_value(uint8_t byte) {
  return byte >= '0' && byte <= '9'   ? byte - '0'
         : byte >= 'a' && byte <= 'f' ? byte - 'a' + 10
         : byte >= 'A' && byte <= 'F' ? byte - 'A' + 10
                                      : -1;
}

// A frame whose character is whole: its character fields cleared, so equal states compare equal.
inline void clear_character(JsonSchemaBytes::Frame& frame) {
  frame.seen = 0;
  frame.escape = kNoEscape;
  frame.utf8_left = 0;
  frame.next_low = 0x80;
  frame.next_high = 0xBF;
}

enum class PatternByte : uint8_t {
  refused,        // the frame is as it was
  taken,          // the frame moved on (write() was called when the byte ended a character)
  closing_quote,  // an unescaped '"' (the frame is as it was): the caller decides whether the string may end
};

// One byte of a pattern string's frame (its position, seen, utf8_left, next_low, next_high, escape).
// can_write(low, high): whether a character within [low, high] may come next; write(code_point): writes a
// whole character that can_write allowed, moving the frame's position and clearing its character fields
// (clear_character).
template <class CanWrite, class Write>
PatternByte lex_pattern_string_byte(JsonSchemaBytes::Frame& frame, uint8_t byte, const CanWrite& can_write, const Write& write) {
  const auto written = [&](uint32_t code_point) {
    write(code_point);
    return PatternByte::taken;
  };
  // The code points a UTF-8 character can still be, its bits so far `bits` with `left` bytes to come, the
  // next within [low, high].
  const auto utf8_span = [](uint64_t bits, uint32_t left, uint8_t low, uint8_t high) {
    const uint32_t rest = 6 * (left - 1);
    return std::pair<uint32_t, uint32_t>(uint32_t((bits << 6 | (low & 0x3Fu)) << rest),
                                         uint32_t((bits << 6 | (high & 0x3Fu)) << rest | ((1u << rest) - 1)));
  };
  if (frame.utf8_left > 0) {
    if (byte < frame.next_low || byte > frame.next_high) return PatternByte::refused;
    const uint64_t bits = frame.seen << 6 | (byte & 0x3Fu);
    if (frame.utf8_left == 1) return can_write(uint32_t(bits), uint32_t(bits)) ? written(uint32_t(bits)) : PatternByte::refused;
    const auto [low, high] = utf8_span(bits, frame.utf8_left - 1u, 0x80, 0xBF);
    if (!can_write(low, high)) return PatternByte::refused;
    frame.seen = bits;
    --frame.utf8_left;
    frame.next_low = 0x80;
    frame.next_high = 0xBF;
    return PatternByte::taken;
  }
  if (frame.escape == kBackslash) {
    static constexpr std::pair<uint8_t, uint8_t> kShortEscapes[] = {
        {'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 0x08}, {'f', 0x0C}, {'n', 0x0A}, {'r', 0x0D}, {'t', 0x09}};
    for (const auto& [letter, character] : kShortEscapes)
      if (byte == letter) return can_write(character, character) ? written(character) : PatternByte::refused;
    if (byte != 'u' || !can_write(0x00, 0x1F)) return PatternByte::refused;
    frame.escape = kHexDigits;
    frame.seen = 0;
    return PatternByte::taken;
  }
  if (frame.escape >= kHexDigits) {  // \u00XX: 0, 0, then 0 or 1, then any hex digit
    const int digit = hex_digit_value(byte);
    const int matched = frame.escape - kHexDigits;
    if (digit < 0 || (matched < 2 && digit != 0) || (matched == 2 && digit > 1)) return PatternByte::refused;
    const uint32_t value = uint32_t(frame.seen) * 16 + uint32_t(digit);
    if (matched == 3) return can_write(value, value) ? written(value) : PatternByte::refused;
    const uint32_t low = value << 4 * (3 - matched), high = std::min<uint32_t>(low | ((1u << 4 * (3 - matched)) - 1), 0x1F);
    if (!can_write(low, high)) return PatternByte::refused;
    frame.seen = value;
    ++frame.escape;
    return PatternByte::taken;
  }
  if (byte == '"') return PatternByte::closing_quote;
  if (byte == '\\') {
    if (!(can_write(0x00, 0x1F) || can_write('"', '"') || can_write('/', '/') || can_write('\\', '\\'))) return PatternByte::refused;
    frame.escape = kBackslash;
    return PatternByte::taken;
  }
  if (byte < 0x20) return PatternByte::refused;
  if (byte < 0x80) return can_write(byte, byte) ? written(byte) : PatternByte::refused;
  uint32_t left = 0;
  uint8_t low = 0x80, high = 0xBF;
  if (byte >= 0xC2 && byte <= 0xDF) left = 1;
  else if (byte >= 0xE0 && byte <= 0xEF) left = 2, low = byte == 0xE0 ? 0xA0 : 0x80, high = byte == 0xED ? 0x9F : 0xBF;
  else if (byte >= 0xF0 && byte <= 0xF4) left = 3, low = byte == 0xF0 ? 0x90 : 0x80, high = byte == 0xF4 ? 0x8F : 0xBF;
  else return PatternByte::refused;
  const uint64_t bits = byte & (0x7Fu >> (left + 1));
  const auto [first, last] = utf8_span(bits, left, low, high);
  if (!can_write(first, last)) return PatternByte::refused;
  frame.seen = bits;
  frame.utf8_left = uint8_t(left);
  frame.next_low = low;
  frame.next_high = high;
  return PatternByte::taken;
}

}  // namespace tilefire
