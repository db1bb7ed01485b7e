// A reply held to a regular expression or to a list of choices (tilefire/reply_pattern.h): the pattern's
// automaton over code points (string_pattern.h) read through a UTF-8 decoder that refuses a byte as soon as
// no character it may begin leads on; a counted class held as its star with the reply's lengths, and the
// tokens from each of its states listed once per reply (as json_schema_pattern_tokens.cpp does for a
// schema's pattern strings), since a state that counts characters never repeats for a mask to be kept.
#include "tilefire/reply_pattern.h"

#include <algorithm>
#include <utility>

#include "pattern_token_sort.h"
#include "shared_token_tables.h"
#include "string_pattern.h"
#include "utf8_step.h"
#include "tilefire/errors.h"

namespace tilefire {

namespace {

// Whether some transition from `state` takes a code point in [low, high] to a target `fits`.
template <class Fits>
bool some_transition(const StringPattern& pattern, int32_t state, uint32_t low, uint32_t high, const Fits& fits) {
  const auto& transitions = pattern.transitions(state);
  auto at = std::lower_bound(transitions.begin(), transitions.end(), low,
                             [](const StringPattern::Transition& t, uint32_t c) { return t.high < c; });
  for (; at != transitions.end() && at->low <= high; ++at)
    if (fits(at->target)) return true;
  return false;
}

// A reply's characters from one pattern state, without its lengths: the state TokenTrie::walk carries to
// make a state's table. Every pattern state can still reach a match, so a character may come whenever
// some transition takes it.
struct PatternCharacters {
  const StringPattern* pattern;
  int32_t state;
  uint32_t partial = 0;
  uint8_t left = 0, next_low = 0x80, next_high = 0xBF;
  uint16_t characters = 0;  // whole characters written (a token's bytes are fewer than 65,535)

  bool feed(uint8_t byte) {
    const Utf8Step step = read_utf8(partial, left, next_low, next_high, byte);
    if (!step.valid) return false;
    if (step.whole) {
      const int32_t next = pattern->next(state, step.low);
      if (next < 0) return false;
      state = next;
      ++characters;
    } else if (!some_transition(*pattern, state, step.low, step.high, [](int32_t) { return true; })) {
      return false;
    }
    partial = step.partial, left = step.left, next_low = step.next_low, next_high = step.next_high;
    return true;
  }
};

static_assert(kMostPatternStates <= UINT16_MAX + 1u, "a table's target is 16 bits");

constexpr size_t kCountedStatesWorthLengths = 8;

}  // namespace

// A pattern's tables, by (TokenTrie::serial, state), shared by every reply to it (shared_token_tables.h).
class PatternTokenTables : public SharedTokenTables<std::pair<uint64_t, int32_t>, PatternStateTable> {};

PatternReplyBytes::PatternReplyBytes(const ReplyPattern* pattern, PatternTokenTables* tables)
    : automaton_(pattern->automaton_.get()), pattern_(pattern), tables_(tables) {}

bool PatternReplyBytes::leads_on(uint32_t low, uint32_t high) const {
  return some_transition(*automaton_, state_, low, high,
                         [&](int32_t target) { return pattern_->within_lengths(target, count_ + 1); });
}

bool PatternReplyBytes::feed(uint8_t byte) {
  if (byte < 0x80 && utf8_left_ == 0) {  // an ASCII character: most bytes of a trie's walk
    const int32_t next = automaton_->next(state_, byte);
    if (next < 0) return false;
    if (pattern_->lengths_) {
      if (!pattern_->within_lengths(next, count_ + 1)) return false;
      count_ = pattern_->counted_after(count_);
    }
    state_ = next;
    return true;
  }
  const Utf8Step step = read_utf8(partial_, utf8_left_, next_low_, next_high_, byte);
  if (!step.valid) return false;
  if (step.whole) {
    const int32_t next = automaton_->next(state_, step.low);
    if (next < 0 || !pattern_->within_lengths(next, count_ + 1)) return false;
    state_ = next;
    count_ = pattern_->counted_after(count_);
  } else if (!leads_on(step.low, step.high)) {
    return false;
  }
  partial_ = step.partial, utf8_left_ = step.left, next_low_ = step.next_low, next_high_ = step.next_high;
  return true;
}

bool PatternReplyBytes::feed(std::string_view bytes) {
  for (char byte : bytes)
    if (!feed(uint8_t(byte))) return false;
  return true;
}

bool PatternReplyBytes::complete() const {
  return utf8_left_ == 0 && automaton_->accepting(state_) && count_ >= pattern_->least_;
}

bool PatternReplyBytes::ended() const { return complete() && !leads_on(0, kMostCodePoint); }

bool PatternReplyBytes::allow_tokens_itself(const TokenTrie& trie, std::vector<uint8_t>& allowed) const {
  if (!tables_ || !pattern_->lengths_ || utf8_left_) return false;
  const std::shared_ptr<const PatternStateTable> table = tables_->find_or_make(std::pair(trie.serial(), state_), [&] {
    auto made = std::make_shared<PatternStateTable>();
    trie.walk(PatternCharacters{automaton_, state_}, [&](int32_t token, const PatternCharacters& after) {
      if (after.left) made->asked.push_back(token);
      else made->whole.push_back({token, uint16_t(after.state), after.characters});
    });
    sort_by_state_and_characters(made->whole);
    made->whole.shrink_to_fit();
    made->asked.shrink_to_fit();
    return std::shared_ptr<const PatternStateTable>(std::move(made));
  });
  if (!table) return false;
  if (allowed.size() < trie.tokens())
    throw InputError("PatternReplyBytes::allow_tokens_itself: a list of " + std::to_string(allowed.size()) +
                     " tokens for a vocabulary of " + std::to_string(trie.tokens()));
  // A token is taken when its last state can still end within the lengths left after it: then so can each
  // state before it (the rest of its characters and that ending are a way on from each), which is what
  // feed asks of every character. The table is sorted by state and characters: one verdict per pair.
  int32_t last_target = -1;
  uint32_t last_characters = 0;
  bool taken = false;
  for (const PatternStateTable::Whole& whole : table->whole) {
    if (whole.target != last_target || whole.characters != last_characters) {
      last_target = whole.target, last_characters = whole.characters;
      taken = pattern_->within_lengths(whole.target, uint32_t(std::min<uint64_t>(uint64_t(count_) + whole.characters, UINT32_MAX)));
    }
    if (taken) allowed[size_t(whole.token)] = 1;
  }
  for (int32_t token : table->asked) {  // ending inside a character: how it can end decides
    PatternReplyBytes next = *this;
    if (next.feed(trie.bytes(token))) allowed[size_t(token)] = 1;
  }
  return true;
}

ReplyPattern::ReplyPattern(std::shared_ptr<const StringPattern> automaton)
    : automaton_(std::move(automaton)), tables_(std::make_unique<PatternTokenTables>()) {}

ReplyPattern::~ReplyPattern() = default;

bool ReplyPattern::within_lengths(int32_t state, uint32_t after) const {
  if (!lengths_ || (most_ == UINT32_MAX && after >= least_)) return true;  // every state leads to a match
  if (after > most_) return false;
  return lengths_->can_end(state, least_ > after ? least_ - after : 0, most_ == UINT32_MAX ? UINT32_MAX : most_ - after);
}

uint32_t ReplyPattern::counted_after(uint32_t count) const {
  if (!lengths_) return 0;  // nothing counts
  return most_ == UINT32_MAX ? std::min(count + 1, least_) : count + 1;
}

std::shared_ptr<const ReplyPattern> ReplyPattern::compile(std::string_view regex) {
  // The whole reply: a JSON Schema pattern is unanchored, so the expression is anchored at both ends (its
  // errors named at their place in `regex`). One class counted is held as its star with lengths where the
  // count would spell out 8 or more states (lengths cost each character of a walk a lookup, and a plus is
  // a star already), before any automaton is spelt out: a count past the states a pattern may have is held
  // too, and a large one costs no spelt-out automaton to throw away.
  std::shared_ptr<ReplyPattern> pattern;
  const std::optional<StringPattern::CountedClass> counted = StringPattern::counted_class_whole(regex);
  if (counted && counted->spelt >= kCountedStatesWorthLengths) {
    std::unique_ptr<const PatternLengths> lengths;
    try {
      lengths = std::make_unique<const PatternLengths>(*counted->star, counted->least, counted->most);
    } catch (const InputError&) {
      // Lengths too far ahead to tabulate: spelt out below, a state per count, if that fits.
    }
    if (lengths) {
      if (!lengths->can_end(StringPattern::kStart, counted->least, counted->most)) throw InputError("no string matches the pattern");
      pattern.reset(new ReplyPattern(counted->star));
      pattern->lengths_ = std::move(lengths);
      pattern->least_ = counted->least, pattern->most_ = counted->most;
    }
  }
  if (!pattern) pattern.reset(new ReplyPattern(StringPattern::compile_whole(regex)));
  // Every state of the automaton leads to a match (string_pattern.h); one that matches nothing was refused
  // by its compile. A pattern of the empty text alone would end a reply before its first token.
  if (pattern->start().ended()) throw InputError("it matches only the empty text, and a reply has at least one token");
  return pattern;
}

std::shared_ptr<const ReplyPattern> ReplyPattern::compile_cached(std::string_view regex) {
  static RecentlyCompiled<ReplyPattern> recent;
  return recent.get(regex, [](std::string_view text) { return compile(text); });
}

std::shared_ptr<const ReplyPattern> ReplyPattern::of_choices(const std::vector<std::string>& choices) {
  if (choices.empty()) throw InputError("no choice given");
  std::string alternation;
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string& choice = choices[i];
    if (choice.empty()) throw InputError("choice " + std::to_string(i) + " is empty, and a reply has at least one token");
    if (i > 0) alternation += '|';
    for (char c : choice) {
      // The characters with a meaning in a pattern outside a class (ECMAScript's syntax characters, the u
      // flag's escapable ones) are escaped; every other is itself, bytes of UTF-8 included.
      if (std::string_view("^$\\.*+?()[]{}|/").find(c) != std::string_view::npos) alternation += '\\';
      alternation += c;
    }
  }
  try {
    return compile(alternation);
  } catch (const InputError& error) {
    const std::string what = error.what();
    if (what.find("states") == std::string::npos) throw InputError("the choices: " + what);  // not UTF-8
    size_t characters = 0;
    for (const std::string& choice : choices) characters += choice.size();
    throw InputError(std::to_string(choices.size()) + " choices of " + std::to_string(characters) +
                     " bytes in all are more than an automaton of " + std::to_string(kMostPatternStates) + " states holds");
  }
}

bool ReplyPattern::matches(std::string_view text) const {
  PatternReplyBytes state = start();
  return state.feed(text) && state.complete();
}

size_t ReplyPattern::states() const { return automaton_->states(); }

PatternReplyBytes ReplyPattern::start() const { return PatternReplyBytes(this, nullptr); }

PatternReplyConstraint::PatternReplyConstraint(std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyPattern> pattern,
                                               std::vector<int32_t> ending_tokens)
    : pattern_(pattern ? std::move(pattern) : throw InputError("PatternReplyConstraint: no pattern")),
      bytes_(std::move(tokens), PatternReplyBytes(pattern_.get(), pattern_->tables_.get()), "reply held to a pattern", "towards a match"),
      ending_tokens_(std::move(ending_tokens)) {}

PatternReplyConstraint::~PatternReplyConstraint() = default;

bool EndingTokens::end(const std::vector<int32_t>& generated) const {
  return !generated.empty() && std::find(tokens_.begin(), tokens_.end(), generated.back()) != tokens_.end();
}

void EndingTokens::allow_where(bool whole, std::vector<uint8_t>& allowed) const {
  for (int32_t token : tokens_)
    if (token >= 0 && size_t(token) < allowed.size()) allowed[size_t(token)] = whole ? 1 : 0;
}

bool PatternReplyConstraint::ended(const std::vector<int32_t>& generated) {
  return ending_tokens_.end(generated) || bytes_.state(generated).ended();
}

void PatternReplyConstraint::allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
  bytes_.allowed(generated, allowed);
  ending_tokens_.allow_where(bytes_.state(generated).complete(), allowed);
}

void constrain_to_pattern(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyPattern> pattern,
                          const std::vector<int32_t>& eos_tokens) {
  constrain_request(request, std::make_shared<PatternReplyConstraint>(std::move(tokens), std::move(pattern), request.ending_tokens(eos_tokens)));
}

}  // namespace tilefire
