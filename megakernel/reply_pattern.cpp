// A reply held to a regular expression or to a list of choices (tilefire/reply_pattern.h): the pattern's
// automaton over code points (string_pattern.h) read through a UTF-8 decoder that refuses a byte as soon as
// no character it may begin leads on.
#include "tilefire/reply_pattern.h"

#include <algorithm>
#include <utility>

#include "string_pattern.h"
#include "tilefire/errors.h"

namespace tilefire {

bool PatternReplyBytes::leads_on(uint32_t low, uint32_t high) const {
  const auto& transitions = pattern_->transitions(state_);
  // The first transition that ends at or past `low` (ascending, disjoint): it takes some of [low, high]
  // when it begins by `high`.
  auto first = std::lower_bound(transitions.begin(), transitions.end(), low,
                                [](const StringPattern::Transition& t, uint32_t c) { return t.high < c; });
  return first != transitions.end() && first->low <= high;
}

bool PatternReplyBytes::feed(uint8_t byte) {
  uint32_t partial = partial_;
  uint8_t left = utf8_left_, next_low = 0x80, next_high = 0xBF;
  if (left == 0) {
    if (byte < 0x80) {
      const int32_t next = pattern_->next(state_, byte);
      if (next < 0) return false;
      state_ = next;
      return true;
    }
    // A lead byte: how many continuation bytes follow, and the range of the first (no overlong forms, no
    // surrogates, nothing past U+10FFFF), as RFC 3629 gives them.
    if (byte >= 0xC2 && byte <= 0xDF) left = 1, partial = byte & 0x1Fu;
    else if (byte >= 0xE0 && byte <= 0xEF) left = 2, partial = byte & 0x0Fu;
    else if (byte >= 0xF0 && byte <= 0xF4) left = 3, partial = byte & 0x07u;
    else return false;
    if (byte == 0xE0) next_low = 0xA0;
    if (byte == 0xED) next_high = 0x9F;
    if (byte == 0xF0) next_low = 0x90;
    if (byte == 0xF4) next_high = 0x8F;
  } else {
    if (byte < next_low_ || byte > next_high_) return false;
    partial = (partial << 6) | (byte & 0x3Fu);
    --left;
    if (left == 0) {  // the character is whole
      const int32_t next = pattern_->next(state_, partial);
      if (next < 0) return false;
      state_ = next;
      partial_ = 0;
      utf8_left_ = 0;
      next_low_ = 0x80, next_high_ = 0xBF;
      return true;
    }
  }
  // The characters these bytes may still become: the next byte from next_low to next_high, any after it.
  // Every code point between the least and the most is one of them (the later bytes' range is whole).
  const uint32_t rest = 6u * (left - 1u);
  const uint32_t least = ((partial << 6) | (next_low & 0x3Fu)) << rest;
  const uint32_t most = (((partial << 6) | (next_high & 0x3Fu)) << rest) | ((1u << rest) - 1u);
  if (!leads_on(least, most)) return false;
  partial_ = partial;
  utf8_left_ = left;
  next_low_ = next_low, next_high_ = next_high;
  return true;
}

bool PatternReplyBytes::feed(std::string_view bytes) {
  for (char byte : bytes)
    if (!feed(uint8_t(byte))) return false;
  return true;
}

bool PatternReplyBytes::complete() const { return utf8_left_ == 0 && pattern_->accepting(state_); }

bool PatternReplyBytes::ended() const { return complete() && pattern_->transitions(state_).empty(); }

ReplyPattern::ReplyPattern(std::shared_ptr<const StringPattern> automaton) : automaton_(std::move(automaton)) {
  // Every state of the automaton leads to a match (string_pattern.h); one that matches nothing was refused
  // by its compile. A pattern of the empty text alone would end a reply before its first token.
  if (automaton_->accepting(StringPattern::kStart) && automaton_->transitions(StringPattern::kStart).empty())
    throw InputError("it matches only the empty text, and a reply has at least one token");
}

std::shared_ptr<const ReplyPattern> ReplyPattern::compile(std::string_view regex) {
  // The whole reply: a JSON Schema pattern is unanchored, so the expression is anchored at both ends.
  return std::shared_ptr<const ReplyPattern>(new ReplyPattern(StringPattern::compile_whole(regex)));
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
    throw InputError(std::string("the choices: ") + error.what());
  }
}

bool ReplyPattern::matches(std::string_view text) const {
  PatternReplyBytes state = start();
  return state.feed(text) && state.complete();
}

size_t ReplyPattern::states() const { return automaton_->states(); }

PatternReplyConstraint::PatternReplyConstraint(std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyPattern> pattern,
                                               std::vector<int32_t> ending_tokens)
    : pattern_(pattern ? std::move(pattern) : throw InputError("PatternReplyConstraint: no pattern")),
      bytes_(std::move(tokens), pattern_->start(), "reply held to a pattern", "towards a match"),
      ending_tokens_(std::move(ending_tokens)) {}

bool PatternReplyConstraint::is_ending(int32_t token) const {
  return std::find(ending_tokens_.begin(), ending_tokens_.end(), token) != ending_tokens_.end();
}

bool PatternReplyConstraint::ended(const std::vector<int32_t>& generated) {
  // An ending token has no bytes to follow: it was allowed only where the text matched, so the reply is whole.
  if (!generated.empty() && is_ending(generated.back())) return true;
  return bytes_.state(generated).ended();
}

void PatternReplyConstraint::allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
  bytes_.allowed(generated, allowed);
  if (!bytes_.state(generated).complete()) return;
  for (int32_t token : ending_tokens_)
    if (token >= 0 && size_t(token) < allowed.size()) allowed[size_t(token)] = 1;
}

void constrain_to_pattern(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyPattern> pattern,
                          const std::vector<int32_t>& eos_tokens) {
  std::vector<int32_t> ending = request.stop_tokens;
  if (request.stop_at_eos) ending.insert(ending.end(), eos_tokens.begin(), eos_tokens.end());
  constrain_request(request, std::make_shared<PatternReplyConstraint>(std::move(tokens), std::move(pattern), std::move(ending)));
}

}  // namespace tilefire
