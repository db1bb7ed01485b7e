#pragma once
// A UTF-8 reader one byte at a time, for the byte automata of replies held to a pattern or a grammar
// (reply_pattern.cpp, reply_grammar.cpp): it says which characters the bytes so far may still become, so a
// byte is refused as soon as no character it may begin leads on.
#include <cstdint>

namespace tilefire {

// One byte of UTF-8 read (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF) after a
// character's bytes so far.
struct Utf8Step {
  bool valid = false;  // the byte may come here
  bool whole = false;  // it ends a character, the code point `low`
  uint32_t low = 0, high = 0;  // the characters the bytes so far may still become (one when whole)
  uint32_t partial = 0;        // the reader after it
  uint8_t left = 0, next_low = 0x80, next_high = 0xBF;
};

inline Utf8Step read_utf8(uint32_t partial, uint8_t left, uint8_t next_low, uint8_t next_high, uint8_t byte) {
  Utf8Step step;
  if (left == 0) {
    if (byte < 0x80) {
      step.valid = step.whole = true;
      step.low = step.high = byte;
      return step;
    }
    // A lead byte: how many continuation bytes follow, and the range of the first.
    if (byte >= 0xC2 && byte <= 0xDF) step.left = 1, step.partial = byte & 0x1Fu;
    else if (byte >= 0xE0 && byte <= 0xEF) step.left = 2, step.partial = byte & 0x0Fu;
    else if (byte >= 0xF0 && byte <= 0xF4) step.left = 3, step.partial = byte & 0x07u;
    else return step;
    if (byte == 0xE0) step.next_low = 0xA0;
    if (byte == 0xED) step.next_high = 0x9F;
    if (byte == 0xF0) step.next_low = 0x90;
    if (byte == 0xF4) step.next_high = 0x8F;
  } else {
    if (byte < next_low || byte > next_high) return step;
    step.partial = (partial << 6) | (byte & 0x3Fu);
    step.left = uint8_t(left - 1);
    if (step.left == 0) {
      step.valid = step.whole = true;
      step.low = step.high = step.partial;
      step.partial = 0;
      return step;
    }
  }
  // The next byte from next_low to next_high, any after it: every code point from the least to the most
  // is one of them (the later bytes' range is whole).
  step.valid = true;
  const uint32_t rest = 6u * (step.left - 1u);
  step.low = ((step.partial << 6) | (step.next_low & 0x3Fu)) << rest;
  step.high = (((step.partial << 6) | (step.next_high & 0x3Fu)) << rest) | ((1u << rest) - 1u);
  return step;
}

}  // namespace tilefire
