#pragma once
// A compiled JSON Schema's nodes (tilefire/json_schema.h), shared by its compiler (json_schema.cpp) and its
// automaton (json_schema_bytes.cpp).
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "string_pattern.h"
#include "shared_token_tables.h"
#include "tilefire/json_schema.h"

namespace tilefire {

// A bounded number's text (json_schema_numbers.cpp): at most this many digits (a lone 0 before the point
// not counted), so that two such texts are never one double, and no exponent. Its value in units of
// 10^-kBoundedNumberDigits is below kMostNumberUnits in magnitude.
constexpr uint32_t kBoundedNumberDigits = 15;
// 10^0 to 10^36, looked up: a bounded number's every digit asks for several (a mask walks thousands).
inline constexpr std::array<__int128, 37> kPowersOfTen = [] {
  std::array<__int128, 37> powers{};
  powers[0] = 1;
  for (size_t i = 1; i < powers.size(); ++i) powers[i] = powers[i - 1] * 10;
  return powers;
}();
constexpr __int128 power_of_ten(uint32_t exponent) { return kPowersOfTen[exponent]; }
constexpr __int128 kMostNumberUnits = power_of_ten(2 * kBoundedNumberDigits);

// Byte strings in a trie: an object's key names, a literal's texts.
struct SchemaByteTrie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // by byte, ascending
    int32_t value = -1;   // what ends here (a property's index, or 0 for a literal), or -1
    uint64_t marks = 0;   // the marks of the strings through this node (properties' bits)
  };
  std::vector<Node> nodes = std::vector<Node>(1);  // [0]: the root

  int32_t child(int32_t node, uint8_t byte) const {
    for (const auto& [edge, next] : nodes[size_t(node)].children)
      if (edge == byte) return next;
    return -1;
  }
  void insert(std::string_view bytes, int32_t value, uint64_t mark) {
    int32_t node = 0;
    nodes[0].marks |= mark;
    for (char c : bytes) {
      int32_t next = child(node, uint8_t(c));
      if (next < 0) {
        next = int32_t(nodes.size());
        auto& children = nodes[size_t(node)].children;
        auto at = children.begin();
        while (at != children.end() && at->first < uint8_t(c)) ++at;
        children.insert(at, {uint8_t(c), next});
        nodes.emplace_back();
      }
      node = next;
      nodes[size_t(node)].marks |= mark;
    }
    nodes[size_t(node)].value = value;
  }
};

constexpr uint32_t kUnfinishable = std::numeric_limits<uint32_t>::max();

struct JsonSchema::Node {
  enum class Kind : uint8_t { any, object, array, string, number, integer, literals, any_of };
  Kind kind = Kind::any;
  bool implied_type = false;  // the type came from the keywords alone (JSON Schema lets other types through)
  // object: its properties (at most kMostSchemaProperties), those required, what other keys may hold
  std::vector<std::pair<std::string, int32_t>> properties;  // name, node
  uint64_t required = 0;    // bit i: properties[i]
  int32_t additional = -1;  // the node of additionalProperties' values, or -1: no other keys
  // Each property's name as JSON writes it after the opening quote, closing quote included; value: the
  // property's index, marks: the bits of the properties through a node.
  SchemaByteTrie keys;
  // array
  int32_t items = -1;
  uint32_t min_items = 0, max_items = kUnfinishable;  // kUnfinishable: no bound
  // integer: its bounds, inclusive (bounded: the schema gave one; its value then fits int64)
  bool bounded = false;
  int64_t min_value = -INT64_MAX, max_value = INT64_MAX;
  // number: its bounds (bounded: the schema gave one), inclusive, in units of 10^-kBoundedNumberDigits;
  // a bounded number is written with at most that many digits and no exponent (json_schema_numbers.cpp)
  __int128 min_units = -kMostNumberUnits, max_units = kMostNumberUnits;
  // string (characters, as JSON Schema counts them: code points)
  uint32_t min_length = 0, max_length = kUnfinishable;
  // and its pattern (null: none), with the lengths a match can still end at where minLength or maxLength
  // bound it. A pattern string's frame keeps the pattern's state (position) and its character so far (seen).
  std::shared_ptr<const StringPattern> pattern;
  PatternLengths pattern_lengths;
  // literals (enum, const, boolean, null): each value's compact JSON text, in a trie (those a reply may
  // take) and listed (every value of the schema's type, a format's or not: what oneOf's proof reads)
  SchemaByteTrie texts;
  std::vector<std::string> literal_texts;
  // any_of: its branches as written (a $ref is an any_of of one branch, its target), and the nodes other
  // than any_of reached through them, each once (a value begins as one of these; an anyOf that refers back
  // to itself adds nothing, as JSON Schema reads it).
  std::vector<int32_t> branches;
  std::vector<int32_t> choices;
  // The fewest container frames a value of this node needs, its own included (kUnfinishable: no finite
  // value): 0 for a scalar.
  uint32_t min_frames = kUnfinishable;
};

// A bounded number written so far (json_schema_numbers.cpp): its digits as one integer (a lone 0 before
// the point not counted) and how many, how many of them after the point (-1: no point yet), whether its
// integer part is a lone 0 (then no more digits before the point), and whether a digit is written at all
// (a '-' alone: not).
struct NumberPrefix {
  bool negative = false, begun = true, zero = false;
  uint64_t value = 0;
  uint32_t digits = 0;
  int32_t fraction_digits = -1;
};
// Whether the number can still end within the node's bounds (min_units, max_units) after more digits, a
// point and digits after it, within kBoundedNumberDigits digits in all.
bool number_reachable(const JsonSchema::Node& node, const NumberPrefix& prefix);
// Whether the number as written is within them (it is whole: a digit ends it).
bool number_within(const JsonSchema::Node& node, const NumberPrefix& prefix);
// A schema's bound (a JSON number) as an exact decimal: an integer as written, a double as the shortest of
// its 15- and 17-digit forms that reads back as itself.
std::string decimal_of_bound(double value);
// That decimal (-?digits(.digits)?(e[+-]?digits)?) as an inclusive bound in units of 10^-15: a lower
// bound's least unit at or above it (strictly above if exclusive), an upper one's most at or below;
// clamped at kMostNumberUnits, past any value a reply writes.
__int128 number_bound_units(const std::string& decimal, bool lower, bool exclusive);

// A string format a reply is held to (json_schema_formats.cpp): date, time, date-time, duration, email,
// hostname, ipv4, ipv6, uuid, uri, each as a pattern matching a subset of what the format allows, and
// the most characters it has (kUnfinishable: no bound). Null for any other format, an annotation.
struct StringFormat {
  std::shared_ptr<const StringPattern> pattern;
  uint32_t most_length;
};
const StringFormat* asserted_format(std::string_view name);

struct JsonSchema::Compiled {
  std::vector<JsonSchema::Node> nodes;
  int32_t root = -1;
};

// Inside a string held to a pattern, the tokens from one pattern state (json_schema_pattern_tokens.cpp).
struct PatternStateKey {
  uint64_t trie;  // TokenTrie::serial
  int32_t node, position;
  bool operator==(const PatternStateKey&) const = default;
};
struct JsonSchema::PatternTables : SharedTokenTables<PatternStateKey, PatternStateTable> {};

}  // namespace tilefire
