#pragma once
// Constrained decoding to a context-free grammar written in GBNF (llama.cpp's grammar format, which vLLM's
// structured_outputs "grammar" takes through xgrammar): at each step only the tokens that keep the reply a
// prefix of a text the grammar's `root` rule derives may be chosen, the ending tokens (eos, stop tokens)
// only where the text so far is whole, and the reply ends by itself where nothing may follow.
// - ReplyGrammar: the grammar read once and checked (every rule defined, none left-recursive, each of its
//   ways able to end), shared by every reply.
// - GrammarParseTable: the sets of parses one reply has met (each parse a stack of places in the grammar's
//   rules), each given a number once, and the characters that lead from one to another, worked out once:
//   a trie's walk meets few sets, so after the first character from a set it costs a lookup.
// - GrammarReplyBytes: a reply's state, a few bytes: its set's number in the table and a UTF-8 character
//   being read. A byte is refused as soon as no parse can take a character it may begin, so a reply
//   never reaches a dead end.
// - GrammarTokenTables: the tokens each set of parses allows at a character's end, over one vocabulary,
//   kept by the grammar for every reply to it on any thread: after the first visit by any reply, a state's
//   mask is its list, not a walk of the trie.
// - GrammarReplyConstraint and constrain_to_grammar: one reply's constraint, for GenerateRequest.
//
// The GBNF read (docs/ARCHITECTURE.md, "A reply held to a grammar"): rules `name ::= alternatives`, names of
// letters, digits, '-' and '_'; alternatives split by `|`; a sequence of literals "..." (escapes \n \r \t
// \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH), classes [a-z0-9_] and [^...], `.` (any character), rule names and
// groups ( ... ); the repetitions * + ? {m} {m,} {m,n} after any of them; comments from # to the line's end.
// A rule may go on over several lines; a new one begins at `name ::=`.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tilefire/engine.h"
#include "tilefire/json_constraint.h"
#include "tilefire/reply_pattern.h"  // EndingTokens

namespace tilefire {

constexpr uint32_t kMostGrammarParses = 1024;     // parses of one reply held at once (an ambiguity bound)
constexpr uint32_t kMostGrammarDepth = 256;       // rules one parse holds open inside one another
constexpr uint32_t kMostGrammarSymbols = 65536;   // symbols of the rules, repetitions spelt out
constexpr uint32_t kMostGrammarRepetition = 1000; // the m and n of {m,n}
constexpr uint32_t kMostGrammarGroups = 256;      // groups ( ... ) written inside one another
constexpr uint32_t kMostGrammarOpens = 65536;     // alternatives taken at one character (an ambiguity bound)
constexpr size_t kMostGrammarTableBytes = size_t(64) << 20;  // one reply's table of parse sets and steps

class ReplyGrammar;
class GrammarParseTable;
class GrammarTokenTables;  // megakernel/reply_grammar.cpp

// The state of a reply read so far against a ReplyGrammar (copied freely; valid while its table lives).
class GrammarReplyBytes {
 public:
  // Takes the next byte: false (and the state as it was) when no text the grammar derives begins with the
  // bytes so far and this one. An InputError when the text so far has more than kMostGrammarParses parses
  // (a grammar that ambiguous is the request's to fix), or when its table would pass its bound
  // (kMostGrammarTableBytes).
  bool feed(uint8_t byte);
  // Every byte of `bytes` in turn; false when one is refused (the state is then unspecified).
  bool feed(std::string_view bytes);
  // The bytes so far are a whole text the grammar derives: the reply may end here.
  bool complete() const;
  // Complete, and no character may follow: where the reply ends.
  bool ended() const;
  // A character step from here has dropped a parse that would have nested past kMostGrammarDepth: with
  // nothing left to choose, the bound stopped the reply, not the grammar.
  bool cut_for_depth() const;
  // TokenTrie::allow_tokens' question first: at a character's end, the tokens from this set of parses as
  // the grammar's tables keep them (walked once, by the first reply in it), and true; inside a character,
  // false (the trie is walked).
  bool allow_tokens_itself(const TokenTrie& trie, std::vector<uint8_t>& allowed) const;
  bool operator==(const GrammarReplyBytes&) const = default;

 private:
  friend class GrammarParseTable;
  explicit GrammarReplyBytes(GrammarParseTable* table) : table_(table) {}
  GrammarParseTable* table_;
  uint32_t parses_ = 0;     // the set's number in the table
  uint32_t partial_ = 0;    // a character's bits so far
  uint8_t utf8_left_ = 0;   // continuation bytes it still needs
  uint8_t next_low_ = 0x80, next_high_ = 0xBF;  // the range of the next one
};

// A grammar a whole reply must be derived by. Immutable once compiled: replies on many threads share one.
class ReplyGrammar {
 public:
  // An InputError naming what is wrong and where (line and column): a syntax error, a rule used but not
  // defined or defined twice, no `root`, a left-recursive rule (write it with a repetition), a rule none
  // of whose ways can end, a class with no characters, past the bounds above, or a grammar that derives
  // only the empty text.
  static std::shared_ptr<const ReplyGrammar> compile(std::string_view gbnf);
  // compile, but the same object for a text among the last 8 compiled this way (a server's way).
  static std::shared_ptr<const ReplyGrammar> compile_cached(std::string_view gbnf);
  ~ReplyGrammar();

  // Whether `text` (UTF-8) is derived whole (the tests' way to ask).
  bool matches(std::string_view text) const;
  size_t rules() const { return rule_names_.size(); }
  size_t symbols() const { return symbols_.size(); }
  // The sets of parses whose tokens its tables keep (the tests' way to see them used).
  size_t token_tables() const;

  // A rule's symbol: a class of characters, another rule, or the end of one of a rule's alternatives.
  struct Symbol {
    enum class Kind : uint8_t { end, characters, rule } kind;
    uint32_t index;  // classes_'s or the rule's
  };

 private:
  friend struct GrammarBuilder;  // reply_grammar_syntax.cpp
  ReplyGrammar();
  friend class GrammarParseTable;
  friend class GrammarReplyBytes;
  friend class GrammarTokenTables;
  // Adds to `out` each parse the stacks of `work` (places, the innermost last) open into, down to a class
  // of characters at the innermost place (or to nothing: a whole text): a rule there opens each of its
  // alternatives. A parse that would pass kMostGrammarDepth is dropped, and then it returns true; an
  // InputError past kMostGrammarOpens alternatives taken.
  bool open(std::vector<std::vector<uint32_t>> work, std::vector<std::vector<uint32_t>>& out) const;
  struct StackHash {
    size_t operator()(const std::vector<uint32_t>& words) const;
  };
  // A set of parses as GrammarParseTable keeps it (sorted, distinct, one after another): an InputError past
  // kMostGrammarParses.
  static std::vector<uint32_t> encode_parses(std::vector<std::vector<uint32_t>>& parses);
  // Whether the class at `place` has the character, or one in [low, high].
  bool class_has(uint32_t place, uint32_t code_point) const;
  bool class_meets(uint32_t place, uint32_t low, uint32_t high) const;
  // Each alternative's symbols in a row, then an end; rule r's alternatives begin at alternatives_[r].
  std::vector<Symbol> symbols_;
  std::vector<std::vector<uint32_t>> alternatives_;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> classes_;  // code point ranges, ascending, disjoint
  std::vector<std::string> rule_names_;
  uint32_t root_ = 0;
  std::vector<uint32_t> start_parses_;  // the parses before any byte, as GrammarParseTable keeps a set
  // The tokens from each set of parses met, shared by every reply to the grammar (thread-safe).
  std::unique_ptr<GrammarTokenTables> tables_;
};

// The sets of parses of one reply (or of the states a caller starts from it), numbered as they are met,
// with the character steps between them worked out once. Not thread-safe: one reply's calls come one at a
// time (each reply to a shared grammar has a table of its own). Set 0 is the grammar's start.
class GrammarParseTable {
 public:
  // most_bytes: what the table may take before a step that would add to it is an InputError.
  explicit GrammarParseTable(std::shared_ptr<const ReplyGrammar> grammar, size_t most_bytes = kMostGrammarTableBytes);
  GrammarReplyBytes start() { return GrammarReplyBytes(this); }
  size_t sets() const { return sets_.size(); }

 private:
  friend class GrammarReplyBytes;
  // The set after one character from set `from`: its number, or -1 when no parse takes the character.
  int32_t next(uint32_t from, uint32_t code_point);
  // Whether some parse of set `from` takes a character in [low, high] next.
  bool leads_on(uint32_t from, uint32_t low, uint32_t high) const;
  bool whole(uint32_t set) const { return whole_[set] != 0; }
  bool cut(uint32_t set) const { return cut_[set] != 0; }
  bool alone_whole(uint32_t set) const { return sets_[set].size() == 1; }  // the one parse [0]: nothing follows
  uint32_t number(std::vector<uint32_t> parses);
  void grow(size_t bytes);  // counts `bytes` more, an InputError past most_bytes_ (nothing counted then)

  std::shared_ptr<const ReplyGrammar> grammar_;
  // Each set, sorted and distinct, one parse after another: its depth d, then d places (symbol indices
  // of ReplyGrammar::symbols_, the innermost last, always a class of characters). Depth 0: a whole text.
  std::vector<std::vector<uint32_t>> sets_;
  std::vector<uint8_t> whole_;  // [set]: it has a parse of depth 0
  std::vector<uint8_t> cut_;    // [set]: a step from it dropped a parse for depth
  std::unordered_map<std::vector<uint32_t>, uint32_t, ReplyGrammar::StackHash> numbers_;
  // The steps met so far: an ASCII character's in a row of 128 per set (most of a walk's), the others by
  // (set << 21 | code point).
  static constexpr int32_t kUnknownStep = -2;
  std::vector<int32_t> ascii_steps_;
  std::unordered_map<uint64_t, int32_t> steps_;
  size_t bytes_ = 0;  // what the sets and steps take, about
  size_t most_bytes_;

};

// One reply's constraint to a grammar (ByteReplyConstraint over GrammarReplyBytes), with the tokens that end
// a reply (eos, stop tokens): those are allowed where the text so far is whole. Not thread-safe: one
// reply's calls come one at a time.
class GrammarReplyConstraint {
 public:
  GrammarReplyConstraint(std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyGrammar> grammar,
                         std::vector<int32_t> ending_tokens);
  void allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed);
  // Where nothing may follow, or after an ending token (the engine asks stop_when with it).
  bool ended(const std::vector<int32_t>& generated);

 private:
  std::unique_ptr<GrammarParseTable> table_;  // what the states point into
  ByteReplyConstraint<GrammarReplyBytes> bytes_;
  EndingTokens ending_tokens_;
};

// Makes `request`'s reply a text `grammar` derives: as constrain_to_pattern (reply_pattern.h) does for a
// pattern. A reply that ends by an ending token or by itself is derived whole; one cut by max_new_tokens,
// the context or an earlier stop_when (a stop string) is a prefix of one.
void constrain_to_grammar(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyGrammar> grammar,
                          const std::vector<int32_t>& eos_tokens);

}  // namespace tilefire
