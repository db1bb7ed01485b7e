#pragma once
// Constrained decoding of a JSON reply (OpenAI's response_format {"type": "json_object"}): at each step
// only the tokens that keep the reply a prefix of a JSON text may be chosen, and the reply ends as soon as
// its value is complete. Three parts:
// - JsonBytes: a pushdown automaton over bytes that accepts exactly the JSON texts of RFC 8259 (strings
//   checked as UTF-8, a \u escape's surrogates paired), within the bounds a reply needs: nesting at most
//   kMostJsonDepth deep, whitespace runs at most kMostJsonWhitespace bytes long (a model that would pad
//   with whitespace forever cannot; fewer when asked), numbers a double holds (kMostJsonIntegerDigits,
//   kMostJsonExponentDigits). It rejects a byte as soon as no JSON text can follow, so a constrained reply
//   never reaches a dead end.
// - TokenTrie: a vocabulary's token bytes (Tokenizer::token_bytes) in a byte trie, built once per
//   tokenizer and shared by every constrained reply: one walk of it, pruned where the automaton rejects a
//   byte, finds every allowed token.
// - JsonReplyConstraint and constrain_to_json: one reply's constraint, for GenerateRequest::allowed_tokens
//   and stop_when.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tilefire/engine.h"
#include "tilefire/errors.h"
#include "tilefire/tokenizer.h"

namespace tilefire {

constexpr uint32_t kMostJsonDepth = 128;      // arrays and objects inside one another
constexpr uint32_t kMostJsonWhitespace = 32;  // whitespace bytes in a row
// A number's integer part and exponent: within them every number is a finite double (below 1e120), where
// one past a double's range (2e999) is JSON all the same and a parser refuses it or reads infinity.
constexpr uint32_t kMostJsonIntegerDigits = 20;
constexpr uint32_t kMostJsonExponentDigits = 2;

// What the text is: one JSON value of any kind, or an object (OpenAI's json_object replies).
enum class JsonTop : uint8_t { any_value, object };

// A reply's whitespace bound as given: InputError past kMostJsonWhitespace.
uint32_t checked_whitespace(uint32_t most_whitespace);

// The state of a JSON text read so far, a few bytes (copied freely).
class JsonBytes {
 public:
  // most_whitespace: the longest whitespace run taken (at most kMostJsonWhitespace; 0: compact JSON).
  explicit JsonBytes(JsonTop top = JsonTop::object, uint32_t most_whitespace = kMostJsonWhitespace);

  // Takes the next byte: false (and the state as it was) when no JSON text begins with the bytes so far
  // and this one.
  bool feed(uint8_t byte);
  // Every byte of `bytes` in turn; false when one is rejected (the state is then unspecified).
  bool feed(std::string_view bytes);
  // The bytes so far are a whole JSON text (a top-level number could still go on: "12" may become "123").
  bool complete() const;
  // The value is whole and nothing but whitespace may follow: where a reply ends.
  bool ended() const { return mode_ == Mode::done; }
  // Inside a string, no character cut and no escape open: the bytes that keep the text inside the string
  // are then the same wherever the string is (TokenTrie works their tokens out once).
  bool in_plain_string() const { return mode_ == Mode::string && utf8_left_ == 0; }
  // Equal states take the same bytes from here on (every field compared, those a mode leaves unused too).
  bool operator==(const JsonBytes&) const = default;

 private:
  enum class Mode : uint8_t {
    start_object, value, array_first, object_first, object_key, colon, after_value, done,
    string, escape, unicode, low_backslash, low_u, literal,
    minus, zero, integer, fraction_start, fraction, exponent_start, exponent_sign, exponent,
  };
  bool structural(uint8_t byte);
  bool begin_value(uint8_t byte);
  bool after_value(uint8_t byte);
  bool string_byte(uint8_t byte);
  bool unicode_digit(uint8_t byte);
  bool number_byte(uint8_t byte);
  bool open(bool object);
  bool close(bool object);
  void value_done() { mode_ = depth_ == 0 ? Mode::done : Mode::after_value; }
  bool is_object(uint32_t level) const { return (containers_[level / 64] >> (level % 64)) & 1u; }

  Mode mode_;
  bool in_key_ = false;        // the string being read is an object's key
  bool low_surrogate_ = false;  // the \u escape being read must be a low surrogate (after a high one)
  uint8_t literal_ = 0;        // which of true, false, null is being read (0, 1, 2)
  uint8_t matched_ = 0;        // of its letters, or of a \u escape's hex digits
  uint8_t utf8_left_ = 0;      // continuation bytes a string's character still needs
  uint8_t next_low_ = 0x80, next_high_ = 0xBF;  // the range of its next one
  uint8_t whitespace_ = 0;     // whitespace bytes in a row just before
  uint8_t most_whitespace_;    // the longest run taken
  uint16_t escape_value_ = 0;  // the hex digits of a \u escape so far
  uint16_t depth_ = 0;         // open arrays and objects
  static_assert(kMostJsonDepth % 64 == 0, "the containers' bits fill whole words");
  uint64_t containers_[kMostJsonDepth / 64] = {};  // bit d: the container at depth d (from 0) is an object
};

// Token bytes by id (Tokenizer::token_bytes, or a byte per id for a model without a tokenizer) in a byte
// trie. Tokens with no bytes (special ones, gaps), or with 65,535 or more, are left out: a constrained
// reply never has them.
class TokenTrie {
 public:
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  // For each token whose bytes `state` takes whole: allowed[token] = 1. allowed holds at least as many
  // entries as there are tokens (the model's vocabulary can have more than its tokenizer). State is a
  // byte automaton: copyable, with `bool feed(uint8_t)` that leaves it as it was when it refuses the byte
  // (JsonBytes, JsonSchemaBytes, or a grammar of one's own). A state with `in_plain_string()` true (a
  // JSON string's lexer) takes the string's own tokens from a mask worked out once, and is asked only
  // about the tokens that reach the string's closing quote, instead of walking the whole trie; one with
  // `string_budget()` too (the characters the string may still take) takes those of its own tokens that
  // add no more characters than that. A state with `allow_tokens_itself(trie, allowed)` is asked first,
  // and the trie is walked only when that says false (JsonSchemaBytes inside a string held to a pattern:
  // its tables of the tokens from each pattern state).
  template <class State>
  void allow_tokens(const State& state, std::vector<uint8_t>& allowed) const;
  // Calls visit(token, state after its bytes) for each token whose bytes `state` takes whole, pruning
  // where it refuses a byte (allow_tokens' walk).
  template <class State, class Visit>
  void walk(const State& state, const Visit& visit) const;
  const std::string& bytes(int32_t token) const;  // "" past the tokens given
  size_t tokens() const { return token_bytes_.size(); }
  size_t nodes() const { return node_byte_.size(); }
  // The tokens whose bytes reach a JSON string's closing quote from inside it (JsonBytes::in_plain_string):
  // every other token a string takes keeps the text inside it.
  const std::vector<int32_t>& string_closing_tokens() const { return closing_string_; }
  // Which trie this is, for caches of what was worked out from one: each trie built gets its own; a copy,
  // with the same tokens, keeps it; a trie moved from (its tokens gone) gets a new one.
  uint64_t serial() const { return serial_.value; }

 private:
  struct Serial {
    static uint64_t fresh();
    uint64_t value = fresh();
    Serial() = default;
    Serial(const Serial&) = default;
    Serial& operator=(const Serial&) = default;
    Serial(Serial&& other) noexcept : value(other.value) { other.value = fresh(); }
    Serial& operator=(Serial&& other) noexcept {
      value = other.value;
      other.value = fresh();
      return *this;
    }
  };
  Serial serial_;
  std::vector<std::string> token_bytes_;
  // From a plain string state (JsonBytes::in_plain_string): the tokens taken without leaving the string
  // ([tokens], 1 or 0), and those whose bytes reach its closing quote (their verdict depends on what may
  // follow the string).
  std::vector<uint8_t> inside_string_;
  std::vector<uint16_t> inside_characters_;  // [tokens]: the characters each of those adds (an escape is one)
  std::vector<int32_t> closing_string_;
  // The nodes below the root in preorder; node i's subtree is [i, subtree_end_[i]), the tokens whose bytes
  // end at it are ids_[ids_begin_[i] .. ids_begin_[i + 1]).
  std::vector<uint8_t> node_byte_;
  std::vector<uint16_t> node_depth_;  // 1 for the root's children
  std::vector<uint32_t> subtree_end_;
  std::vector<uint32_t> ids_begin_;   // [nodes + 1]
  std::vector<int32_t> ids_;
};

// The bytes each id of a model's vocabulary of `vocab` adds to its text, for a TokenTrie: the tokenizer's
// (Tokenizer::token_bytes), or without one (null) a byte per id below 256, as bytes_text reads such a
// model's tokens. Ids past the vocabulary are left out: the model never generates them.
std::vector<std::string> vocabulary_bytes(const Tokenizer* tokenizer, uint32_t vocab);

// One reply's constraint over a byte automaton State (with `bool feed(uint8_t)` and `bool ended()`: the
// reply's value is whole). Called with the reply's tokens so far, it follows them (and a reply taken back
// to fewer tokens); a token it would not have allowed is an InputError naming it. It keeps the masks of the
// last few states it walked the trie from: a reply writing a string is in the same state token after
// token (inside the string, no character cut), so those tokens copy the mask instead of walking the
// whole trie again. Not thread-safe: one reply's calls come one at a time.
template <class State>
class ByteReplyConstraint {
 public:
  // `reply` and `continuing` name the reply and what a token must keep it, in the message for one that
  // does not: "the JSON reply's token 3 (id 17) does not continue it as JSON".
  ByteReplyConstraint(std::shared_ptr<const TokenTrie> tokens, State start, const char* reply = "JSON reply",
                      const char* continuing = "as JSON");
  // GenerateRequest::allowed_tokens: the tokens that keep the reply a prefix of a text State takes.
  void allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed);
  // Whether the reply's value is whole (State::ended): where it stops.
  bool ended(const std::vector<int32_t>& generated) { return follow(generated).ended(); }
  // The state after the reply's tokens (the last one followed is kept, so asking again is cheap).
  const State& state(const std::vector<int32_t>& generated) { return follow(generated); }

 private:
  const State& follow(const std::vector<int32_t>& generated);
  std::shared_ptr<const TokenTrie> tokens_;
  const char* reply_;
  const char* continuing_;
  std::vector<State> states_;  // [reply tokens + 1]: after each of followed_'s tokens
  std::vector<int32_t> followed_;
  static constexpr size_t kCachedMasks = 4;
  struct CachedMask {
    State state;
    std::vector<uint8_t> allowed;  // [the trie's tokens]
  };
  std::vector<CachedMask> cached_;  // at most kCachedMasks, the oldest replaced first
  size_t next_replaced_ = 0;
};

// A reply that is JSON: any JSON text, or an object (JsonTop).
class JsonReplyConstraint : public ByteReplyConstraint<JsonBytes> {
 public:
  JsonReplyConstraint(std::shared_ptr<const TokenTrie> tokens, JsonTop top, uint32_t most_whitespace = kMostJsonWhitespace)
      : ByteReplyConstraint<JsonBytes>(std::move(tokens), JsonBytes(top, checked_whitespace(most_whitespace))) {}
};

// Makes `request`'s reply JSON: its allowed_tokens become the constraint's, and its stop_when also ends
// the reply when the value is whole (the stop_when it had still asked first). finish_reason is then
// "stopped"; a reply cut by max_new_tokens, the context or that earlier stop_when (a stop string) is a
// prefix of JSON, not JSON. Copies of the request share the constraint, which follows whichever reply it
// is asked about: copies that generate at once on different threads each need a constrain_to_json of
// their own.
// most_whitespace bounds each whitespace run of the reply (0: compact JSON, where a model would pad).
// request.stop_tokens are never chosen (set them first): the reply ends where its value closes.
void constrain_to_json(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, JsonTop top = JsonTop::object,
                       uint32_t most_whitespace = kMostJsonWhitespace);

// Makes `request`'s reply follow `constraint` (a reply constraint: allowed() and ended() over the reply's
// tokens): its allowed_tokens become the constraint's, less `never_chosen` (a JSON reply's stop tokens: one
// whose bytes the value would take, a request's stop token id of a newline, would end the reply there
// before the value is whole), and its stop_when also ends the reply when the value is whole (the
// stop_when it had still asked first).
template <class Constraint>
void constrain_request(GenerateRequest& request, std::shared_ptr<Constraint> constraint, std::vector<int32_t> never_chosen = {}) {
  request.allowed_tokens = [constraint, never_chosen = std::move(never_chosen)](const std::vector<int32_t>& generated,
                                                                               std::vector<uint8_t>& allowed) {
    constraint->allowed(generated, allowed);
    for (int32_t token : never_chosen)
      if (token >= 0 && size_t(token) < allowed.size()) allowed[size_t(token)] = 0;
  };
  request.stop_when = [constraint, before = std::move(request.stop_when)](const std::vector<int32_t>& generated) {
    const bool stopped = before && before(generated);  // asked first: it may watch every token (a stop string)
    return constraint->ended(generated) || stopped;
  };
}

// The templates' definitions.

template <class State>
void TokenTrie::allow_tokens(const State& state, std::vector<uint8_t>& allowed) const {
  if (allowed.size() < token_bytes_.size())
    throw InputError("TokenTrie::allow_tokens: a list of " + std::to_string(allowed.size()) + " tokens for a vocabulary of " +
                     std::to_string(token_bytes_.size()));
  if constexpr (requires { state.allow_tokens_itself(*this, allowed); }) {
    if (state.allow_tokens_itself(*this, allowed)) return;
  }
  if constexpr (requires { state.in_plain_string(); }) {
    if (state.in_plain_string()) {
      uint32_t budget = UINT32_MAX;  // characters the string may still take
      if constexpr (requires { state.string_budget(); }) budget = state.string_budget();
      if (budget >= UINT16_MAX) {
        for (size_t t = 0; t < inside_string_.size(); ++t) allowed[t] |= inside_string_[t];
      } else {
        for (size_t t = 0; t < inside_string_.size(); ++t) allowed[t] |= inside_string_[t] & (inside_characters_[t] <= budget);
      }
      for (int32_t token : closing_string_) {
        State next = state;
        const std::string& token_bytes = token_bytes_[size_t(token)];
        bool taken = true;
        for (size_t b = 0; taken && b < token_bytes.size(); ++b) taken = next.feed(uint8_t(token_bytes[b]));
        if (taken) allowed[size_t(token)] = 1;
      }
      return;
    }
  }
  walk(state, [&](int32_t token, const State&) { allowed[size_t(token)] = 1; });
}

template <class State, class Visit>
void TokenTrie::walk(const State& state, const Visit& visit) const {
  // states[d]: after the bytes of the path to the current node at depth d (states[0]: `state`). A state is
  // assigned over the one kept at its depth, so one that holds a vector reuses its storage.
  std::vector<State> states(1, state);
  for (uint32_t node = 0; node < node_byte_.size();) {
    const uint16_t depth = node_depth_[node];
    if (states.size() <= depth) states.resize(depth + 1u, state);
    states[depth] = states[depth - 1u];
    if (!states[depth].feed(node_byte_[node])) {  // no token below this node keeps the text in the language
      node = subtree_end_[node];
      continue;
    }
    for (uint32_t i = ids_begin_[node]; i < ids_begin_[node + 1]; ++i) visit(ids_[i], states[depth]);
    ++node;
  }
}

template <class State>
ByteReplyConstraint<State>::ByteReplyConstraint(std::shared_ptr<const TokenTrie> tokens, State start, const char* reply,
                                                const char* continuing)
    : tokens_(std::move(tokens)), reply_(reply), continuing_(continuing), states_(1, std::move(start)) {
  if (!tokens_) throw InputError("JsonReplyConstraint: no token trie");
}

template <class State>
const State& ByteReplyConstraint<State>::follow(const std::vector<int32_t>& generated) {
  size_t same = 0;
  while (same < followed_.size() && same < generated.size() && followed_[same] == generated[same]) ++same;
  followed_.resize(same);
  states_.resize(same + 1, states_.front());
  for (size_t i = same; i < generated.size(); ++i) {
    State next = states_.back();
    const std::string& bytes = tokens_->bytes(generated[i]);
    bool taken = !bytes.empty();
    for (size_t b = 0; taken && b < bytes.size(); ++b) taken = next.feed(uint8_t(bytes[b]));
    if (!taken)
      throw InputError(std::string("the ") + reply_ + "'s token " + std::to_string(i) + " (id " + std::to_string(generated[i]) +
                       ") does not continue it " + continuing_);
    states_.push_back(std::move(next));
    followed_.push_back(generated[i]);
  }
  return states_.back();
}

template <class State>
void ByteReplyConstraint<State>::allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
  const State& state = follow(generated);
  const size_t tokens = tokens_->tokens();
  if (allowed.size() < tokens)  // what allow_tokens would refuse, refused before a cached mask is copied
    throw InputError("JsonReplyConstraint::allowed: a list of " + std::to_string(allowed.size()) + " tokens for a vocabulary of " +
                     std::to_string(tokens));
  auto hit = std::find_if(cached_.begin(), cached_.end(), [&](const CachedMask& cached) { return cached.state == state; });
  if (hit == cached_.end()) {
    CachedMask walked{state, std::vector<uint8_t>(tokens, 0)};
    tokens_->allow_tokens(state, walked.allowed);
    if (cached_.size() < kCachedMasks) {
      cached_.push_back(std::move(walked));
      hit = cached_.end() - 1;
    } else {
      hit = cached_.begin() + ptrdiff_t(next_replaced_);
      *hit = std::move(walked);
      next_replaced_ = (next_replaced_ + 1) % kCachedMasks;
    }
  }
  // The tokens' entries; those past them (a model's vocabulary beyond its tokenizer's) stay as given.
  for (size_t t = 0; t < tokens; ++t) allowed[t] = allowed[t] | hit->allowed[t];
}

}  // namespace tilefire
