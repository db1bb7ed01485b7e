#pragma once
// Constrained decoding to a regular expression or to a list of choices (vLLM's structured_outputs "regex"
// and "choice"): at each step only the tokens that keep the reply a prefix of a text the expression matches
// whole may be chosen, the ending tokens (eos, stop tokens) only where the text so far matches, and the
// reply ends by itself where nothing could follow.
// - ReplyPattern: the expression read once (the ECMAScript subset a JSON Schema "pattern" takes, string_
//   pattern.h, matched against the whole reply), shared by every reply.
// - PatternReplyBytes: a reply's state, a few bytes: the pattern's automaton state and a UTF-8 character
//   being read. A byte is refused as soon as no matched text can follow, inside a character too (a token
//   that ends halfway through one is allowed only if some character it begins leads on).
// - PatternReplyConstraint and constrain_to_pattern: one reply's constraint, for GenerateRequest.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tilefire/engine.h"
#include "tilefire/json_constraint.h"

namespace tilefire {

class StringPattern;  // megakernel/string_pattern.h
class ReplyPattern;

// The state of a reply read so far against a ReplyPattern (copied freely; valid while its pattern lives).
class PatternReplyBytes {
 public:
  // Takes the next byte: false (and the state as it was) when no text the pattern matches begins with the
  // bytes so far and this one.
  bool feed(uint8_t byte);
  // Every byte of `bytes` in turn; false when one is refused (the state is then unspecified).
  bool feed(std::string_view bytes);
  // The bytes so far are a whole text the pattern matches: the reply may end here.
  bool complete() const;
  // Complete, and no character may follow: where the reply ends.
  bool ended() const;
  bool operator==(const PatternReplyBytes&) const = default;

 private:
  friend class ReplyPattern;
  explicit PatternReplyBytes(const StringPattern* pattern) : pattern_(pattern) {}
  // Whether a transition from the state takes a code point in [low, high].
  bool leads_on(uint32_t low, uint32_t high) const;
  const StringPattern* pattern_;
  int32_t state_ = 0;            // the pattern automaton's (StringPattern::kStart)
  uint32_t partial_ = 0;         // a character's bits so far
  uint8_t utf8_left_ = 0;        // continuation bytes it still needs
  uint8_t next_low_ = 0x80, next_high_ = 0xBF;  // the range of the next one
};

// A regular expression that a whole reply must match. Immutable once compiled: replies on many threads
// share one.
class ReplyPattern {
 public:
  // `regex` as a JSON Schema "pattern" reads it (string_pattern.h: ECMAScript with the u flag; `.` takes no
  // line terminator, [\s\S] does), matched against the whole reply as if written ^(?:regex)$. An
  // InputError naming what is wrong: a syntax error, a feature not read (lookaround, backreferences, \b),
  // an automaton past kMostPatternStates, an expression nothing matches or that matches only the empty text.
  static std::shared_ptr<const ReplyPattern> compile(std::string_view regex);
  // The reply is exactly one of `choices` (each a non-empty UTF-8 text, written as it is: no character
  // has a meaning). An InputError for no choice, an empty one, or too many to hold.
  static std::shared_ptr<const ReplyPattern> of_choices(const std::vector<std::string>& choices);

  PatternReplyBytes start() const { return PatternReplyBytes(automaton_.get()); }
  // Whether the whole of `text` is matched (the tests' way to ask).
  bool matches(std::string_view text) const;
  size_t states() const;  // the automaton's

 private:
  explicit ReplyPattern(std::shared_ptr<const StringPattern> automaton);
  std::shared_ptr<const StringPattern> automaton_;
};

// One reply's constraint to a pattern (ByteReplyConstraint over PatternReplyBytes), with the tokens that end
// a reply (eos, stop tokens): those are allowed where the text so far is complete. Not thread-safe: one
// reply's calls come one at a time.
class PatternReplyConstraint {
 public:
  PatternReplyConstraint(std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyPattern> pattern,
                         std::vector<int32_t> ending_tokens);
  void allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed);
  // Where nothing may follow, or after an ending token (the engine asks stop_when with it).
  bool ended(const std::vector<int32_t>& generated);

 private:
  bool is_ending(int32_t token) const;
  std::shared_ptr<const ReplyPattern> pattern_;  // the automaton the states point into
  ByteReplyConstraint<PatternReplyBytes> bytes_;
  std::vector<int32_t> ending_tokens_;
};

// Makes `request`'s reply match `pattern` whole: its allowed_tokens become the constraint's, with the
// tokens that end a generation (`eos_tokens`, the model's, if request.stop_at_eos; request.stop_tokens:
// set both first) allowed where the text so far matches, and its stop_when also ends the reply where no
// character may follow (the stop_when it had still asked first). A reply that ends by an ending token or
// by itself matches the pattern; one cut by max_new_tokens, the context or that earlier stop_when (a stop
// string) is a prefix of a match.
void constrain_to_pattern(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyPattern> pattern,
                          const std::vector<int32_t>& eos_tokens);

}  // namespace tilefire
