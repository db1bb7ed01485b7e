#pragma once
// A JSON Schema pattern's syntax (string_pattern.h says what is read): the tree an ECMAScript regular
// expression with the u flag parses into, for string_pattern.cpp to build an automaton from.
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace tilefire::pattern_syntax {

constexpr uint32_t kUnbounded = UINT32_MAX;   // a repeat with no most
constexpr uint32_t kMostNfaStates = 1 << 16;  // the NFA a tree may spell out (a repeat's count is held below it)

struct CodeRange {
  uint32_t low, high;
};
using CharSet = std::vector<CodeRange>;  // ascending, disjoint, not touching once normalized

bool contains(const CharSet& set, uint32_t code_point);

// The pattern as a tree.
struct Regex {
  enum class Kind : uint8_t { chars, line_start, line_end, sequence, alternation, repeat };
  Kind kind = Kind::sequence;  // an empty sequence matches the empty string
  CharSet chars;
  std::vector<Regex> parts;              // sequence, alternation: in order; repeat: the one repeated
  uint32_t least = 0, most = kUnbounded;  // repeat

  static Regex of(CharSet chars) {
    Regex regex;
    regex.kind = Kind::chars;
    regex.chars = std::move(chars);
    return regex;
  }
};

// The code points of UTF-8 text; an InputError when it is not UTF-8.
std::vector<uint32_t> code_points(std::string_view text);
// The pattern's tree; an InputError naming what is wrong or not supported, and where.
Regex parse_pattern(std::string_view pattern);

}  // namespace tilefire::pattern_syntax
