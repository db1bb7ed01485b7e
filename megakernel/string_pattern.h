#pragma once
// A JSON Schema "pattern" compiled into a deterministic automaton over code points, for the schema
// automaton (megakernel/json_schema_bytes.cpp): a string value's frame keeps one of its states.
//
// The pattern is read as JSON Schema says and Ajv does: an ECMAScript regular expression with the u flag,
// unanchored (a string matches when some part of it does; ^ and $ anchor). What is read: alternation,
// groups (plain, non-capturing, named), the quantifiers * + ? {n} {n,} {n,m} (greedy or lazy: the same
// strings match), . (any code point but a line terminator), classes with ranges and negation, the
// escapes \d \D \w \W \s \S \t \n \v \f \r \0 \cX \xHH \uHHHH (surrogate pairs joined) \u{H...} and escaped
// syntax characters, ^ and $. Refused by name: lookaround, backreferences, \b \B, \p{...}; and a pattern
// whose automaton would pass kMostPatternStates.
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace tilefire {

namespace pattern_syntax {
struct Regex;  // string_pattern_syntax.h
}

constexpr uint32_t kMostPatternStates = 4096;  // automaton states of one pattern
constexpr uint32_t kMostCodePoint = 0x10FFFF;

class StringPattern {
 public:
  // An InputError naming what is wrong or not supported (the caller adds where the pattern is).
  static std::shared_ptr<const StringPattern> compile(std::string_view pattern);
  // The strings the pattern matches whole, as ^(?:pattern)$ would (a reply held to a regex, reply_pattern.h),
  // with what is wrong named at its place in `pattern` itself.
  static std::shared_ptr<const StringPattern> compile_whole(std::string_view pattern);
  // The strings both match (a pattern beside a format). An InputError when there are none.
  static std::shared_ptr<const StringPattern> intersect(const StringPattern& a, const StringPattern& b);

  // A pattern that is one class of characters repeated, anchored at both ends, with parts of one length
  // each (in code points) before and after it (^[a-z]{3,20}$, ^\d{5}$, ^[A-Z][a-z]{1,40}$,
  // ^(?:[ a-zA-Z]){1,400}$): ^P C{m,n} S$ matches the strings of ^P C* S$ whose length less P's and S's is
  // from m to n (code points: the u flag counts them as minLength does). So it is returned as that star
  // and the lengths of the whole string, P's and S's added (UINT32_MAX: no most), which a schema holds as
  // minLength and maxLength: an automaton whose states do not grow with the count, where the counted one
  // has one per count, which made compiling ^[ a-zA-Z]{1,400}$ take 14 ms and a reply walk the
  // vocabulary's trie at every token (no pattern state came round twice for a table to serve:
  // docs/ARCHITECTURE.md, "Constrained decoding"). When every part has one length, the class repeated
  // most is taken. Empty for a pattern of any other shape; an InputError as compile() gives.
  struct CountedClass {
    std::shared_ptr<const StringPattern> star;
    uint32_t least = 0, most = UINT32_MAX;  // the whole string's code points
    uint32_t spelt = 0;  // the copies of the class the counted automaton would spell out (its most, or its least)
  };
  static std::optional<CountedClass> counted_class(std::string_view pattern);
  // The same for the strings the pattern matches whole (compile_whole), errors named at their place in it.
  static std::optional<CountedClass> counted_class_whole(std::string_view pattern);

  static constexpr int32_t kStart = 0;
  // Every state can still reach a match: a string with no way to a match is refused at its first
  // character that leaves none (next() gives -1), never later. Surrogate code points lead nowhere (a JSON
  // string's characters are Unicode scalar values).
  int32_t next(int32_t state, uint32_t code_point) const;
  bool accepting(int32_t state) const { return states_[size_t(state)].accepting; }
  size_t states() const { return states_.size(); }
  // Whether the whole of `text` (UTF-8) matches: the tests' way to ask the automaton.
  bool matches(std::string_view text) const;

  // One of a state's ways on: the code points [low, high] lead to `target`.
  struct Transition {
    uint32_t low, high;
    int32_t target;
  };
  const std::vector<Transition>& transitions(int32_t state) const { return states_[size_t(state)].transitions; }
  struct State {
    bool accepting = false;
    std::vector<Transition> transitions;  // ascending, disjoint
  };

 private:
  static std::shared_ptr<const StringPattern> compile_tree(const pattern_syntax::Regex& regex);
  static std::optional<CountedClass> counted_class_of(const pattern_syntax::Regex& regex);
  std::vector<State> states_;  // [kStart]: the start
};

// The lengths, in characters, with which a pattern's strings can still end from each state, as far as a
// string's minLength and maxLength need to know: so a string held to both a pattern and lengths is refused
// at the first character after which none of the lengths left can match.
class PatternLengths {
 public:
  PatternLengths() = default;  // no bounds: any length will do
  // An InputError when the table would be too large (states times the characters it must look ahead).
  PatternLengths(const StringPattern& pattern, uint32_t min_length, uint32_t max_length_or_unbounded);
  // Whether some string matched from `state` ends after between `least` and `most` more characters
  // (least at most the minLength the table was made for; most: UINT32_MAX for no bound).
  bool can_end(int32_t state, uint32_t least, uint32_t most) const;

 private:
  uint32_t horizon_ = 0;               // the most characters ahead the table holds
  size_t words_ = 0;                   // 64-bit words per state
  std::vector<uint64_t> ends_after_;   // state * words_: bit k set when a match ends after exactly k more
};

}  // namespace tilefire
