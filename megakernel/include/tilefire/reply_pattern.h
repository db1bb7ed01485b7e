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

class StringPattern;   // megakernel/string_pattern.h
class PatternLengths;  // megakernel/string_pattern.h
class ReplyPattern;
class PatternTokenTables;  // megakernel/reply_pattern.cpp: a pattern's tables of the tokens from each state

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
  // TokenTrie::allow_tokens' question first: for a pattern held as a counted class's star with lengths
  // (whose states count characters, so no whole-state mask repeats), from the second time a reply to the
  // pattern (through a PatternReplyConstraint) is at a character's end in a pattern state, it allows the
  // tokens from that state's table (made once for every reply to the pattern), checked against the lengths
  // left, and says true; elsewhere false (the trie is walked).
  bool allow_tokens_itself(const TokenTrie& trie, std::vector<uint8_t>& allowed) const;
  bool operator==(const PatternReplyBytes&) const = default;

 private:
  friend class ReplyPattern;
  friend class PatternReplyConstraint;
  PatternReplyBytes(const ReplyPattern* pattern, PatternTokenTables* tables);
  // Whether some character in [low, high] may be written next (a transition takes it, and the lengths
  // can still be met after it).
  bool leads_on(uint32_t low, uint32_t high) const;
  const StringPattern* automaton_;  // the pattern's, held here too: a walk reads it at every byte
  const ReplyPattern* pattern_;
  PatternTokenTables* tables_;   // the pattern's; null: none (the trie is always walked)
  int32_t state_ = 0;            // the pattern automaton's (StringPattern::kStart)
  uint32_t count_ = 0;           // characters written (ReplyPattern::counted_after)
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
  // One class counted with parts of one length around it ([a-z]{1,400}, \d{3}-[A-Z ]{2,80}\.) is held as
  // the class's star and the whole reply's lengths (StringPattern::counted_class), as a schema holds it,
  // where the count would spell out 8 or more copies of the class; a count past the states a pattern may
  // have ([a-z]{1,100000}) is held too.
  static std::shared_ptr<const ReplyPattern> compile(std::string_view regex);
  // compile, but the same object for a text among the last 8 compiled this way (byte for byte), so that
  // requests sending one pattern share the tables its replies make (a server's way; thread-safe).
  static std::shared_ptr<const ReplyPattern> compile_cached(std::string_view regex);
  // The reply is exactly one of `choices` (each a non-empty UTF-8 text, written as it is: no character
  // has a meaning). An InputError for no choice, an empty one, or too many to hold.
  static std::shared_ptr<const ReplyPattern> of_choices(const std::vector<std::string>& choices);
  ~ReplyPattern();

  PatternReplyBytes start() const;
  // Whether the whole of `text` is matched (the tests' way to ask).
  bool matches(std::string_view text) const;
  size_t states() const;  // the automaton's
  // Held as a counted class's star with lengths (the tests' way to ask which path a pattern took).
  bool counted() const { return lengths_ != nullptr; }

 private:
  friend class PatternReplyBytes;
  explicit ReplyPattern(std::shared_ptr<const StringPattern> automaton);
  // Whether a reply `after` characters long, in `state`, can still end within the lengths.
  bool within_lengths(int32_t state, uint32_t after) const;
  // The count kept after one more character: exact up to the most; with no most, kept at the least
  // (beyond it only the star's own end matters), so that the states of a long reply repeat.
  uint32_t counted_after(uint32_t count) const;
  std::shared_ptr<const StringPattern> automaton_;
  uint32_t least_ = 0, most_ = UINT32_MAX;  // the reply's characters (most UINT32_MAX: none), with lengths_
  std::unique_ptr<const PatternLengths> lengths_;  // null: no lengths
  // The tables of the tokens from each state, made by and for every reply to it (thread-safe).
  std::unique_ptr<PatternTokenTables> tables_;
  friend class PatternReplyConstraint;
};

// The tokens that end a reply held to a pattern or a grammar (the model's eos, a request's stop tokens):
// allowed only where the text so far is whole, even one whose bytes would go on (a byte model's eos, a stop
// token id a request gives: the engine would end the reply there, unmatched); a reply whose last token is
// one has ended (it has no bytes to follow, and was allowed only where the text was whole).
class EndingTokens {
 public:
  explicit EndingTokens(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  bool end(const std::vector<int32_t>& generated) const;
  // Sets each ending token's entry of `allowed` to `whole`.
  void allow_where(bool whole, std::vector<uint8_t>& allowed) const;

 private:
  std::vector<int32_t> tokens_;
};

// One reply's constraint to a pattern (ByteReplyConstraint over PatternReplyBytes), with the tokens that end
// a reply (eos, stop tokens): those are allowed where the text so far is complete. Not thread-safe: one
// reply's calls come one at a time.
class PatternReplyConstraint {
 public:
  PatternReplyConstraint(std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyPattern> pattern,
                         std::vector<int32_t> ending_tokens);
  ~PatternReplyConstraint();
  void allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed);
  // Where nothing may follow, or after an ending token (the engine asks stop_when with it).
  bool ended(const std::vector<int32_t>& generated);

 private:
  std::shared_ptr<const ReplyPattern> pattern_;  // the automaton and tables the states point into
  ByteReplyConstraint<PatternReplyBytes> bytes_;
  EndingTokens ending_tokens_;
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
