// The tokens a string held to a pattern may take next, from a table per pattern state: the answer to
// TokenTrie::allow_tokens inside such a string after the first time a reply is in that state.
//
// Walking the trie from a pattern string costs as much as the vocabulary is wide (a line of any
// characters: every node), and with minLength or maxLength the reply's state counts characters, so it
// never repeats and no whole-state mask can be kept. What the tokens do from a pattern state does not
// depend on the count: a table made once per state lists, for each token that stays inside the string,
// the state it ends in and the characters it adds; reading it checks those against the lengths left.
#include <algorithm>

#include "json_schema_node.h"
#include "pattern_string_lexer.h"
#include "pattern_token_sort.h"
#include "tilefire/errors.h"

namespace tilefire {
namespace {

using Node = JsonSchema::Node;
using Frame = JsonSchemaBytes::Frame;

// A pattern string's characters from one state, without its lengths and without its end: the state
// TokenTrie::walk carries to make a table. Every pattern state can still reach a match
// (StringPattern::compile, intersect), so a character may come whenever some transition takes it.
struct PatternCharacters {
  const StringPattern* pattern;
  Frame frame;              // position, and the character or escape being written
  uint16_t characters = 0;  // whole characters written (a token's bytes are fewer than 65,535)
  bool closed = false;      // past the closing quote: whatever follows is taken (the reply's state decides)

  bool feed(uint8_t byte) {
    if (closed) return true;
    const auto can_write = [&](uint32_t low, uint32_t high) {
      for (const StringPattern::Transition& transition : pattern->transitions(frame.position))
        if (transition.high >= low && transition.low <= high) return true;
      return false;
    };
    const auto write = [&](uint32_t code_point) {
      frame.position = pattern->next(frame.position, code_point);
      clear_character(frame);
      ++characters;
    };
    const PatternByte lexed = lex_pattern_string_byte(frame, byte, can_write, write);
    closed = lexed == PatternByte::closing_quote;
    return lexed != PatternByte::refused;
  }
};

static_assert(kMostPatternStates <= UINT16_MAX + 1u, "a table's target is 16 bits");

// The table of the tokens from a pattern state, shared by every reply to the schema (json_schema_node.h):
// null the first time any of them is there.
std::shared_ptr<const PatternStateTable> pattern_token_table(const JsonSchema& schema, const TokenTrie& trie, const PatternStateKey& key) {
  return schema.pattern_tables().find_or_make(key, [&] {
    auto table = std::make_shared<PatternStateTable>();
    const Node& node = schema.compiled().nodes[size_t(key.node)];
    PatternCharacters start{node.pattern.get(), Frame{}};
    start.frame.position = key.position;
    trie.walk(start, [&](int32_t token, const PatternCharacters& after) {
      if (after.closed || after.frame.utf8_left || after.frame.escape) table->asked.push_back(token);
      else table->whole.push_back({token, uint16_t(after.frame.position), after.characters});
    });
    sort_by_state_and_characters(table->whole);  // the tokens alike in both get one verdict from the lengths left
    table->whole.shrink_to_fit();
    table->asked.shrink_to_fit();
    return std::shared_ptr<const PatternStateTable>(std::move(table));
  });
}

}  // namespace

bool JsonSchemaBytes::allow_tokens_itself(const TokenTrie& trie, std::vector<uint8_t>& allowed) const {
  if (alternatives_.size() != 1) return false;
  const Frame& frame = alternatives_[0].top;
  if (frame.node < 0 || frame.utf8_left || frame.escape) return false;
  const Node& node = matcher_->schema_->compiled().nodes[size_t(frame.node)];
  if (node.kind != Node::Kind::string || !node.pattern) return false;
  const std::shared_ptr<const PatternStateTable> table =
      pattern_token_table(*matcher_->schema_, trie, {trie.serial(), frame.node, frame.position});
  if (!table) return false;
  if (allowed.size() < trie.tokens())
    throw InputError("JsonSchemaBytes::allow_tokens_itself: a list of " + std::to_string(allowed.size()) +
                     " tokens for a vocabulary of " + std::to_string(trie.tokens()));
  if (node.min_length == 0 && node.max_length == kUnfinishable) {
    for (const auto& whole : table->whole) allowed[size_t(whole.token)] = 1;  // every state can reach a match
  } else {
    // A token is taken when its last state can still end within the lengths left after it: then so can
    // each state before it (the rest of its characters and that ending are a way on from each), which is
    // what the automaton asks of every character (pattern_can_write). frame.count is exact below
    // maxLength, and past minLength (without a maxLength) it stays there, where no least is left.
    // The table is sorted by state and characters, so the verdict is worked out once for each pair.
    int32_t last_target = -1;
    uint32_t last_characters = 0;
    bool taken = false;
    for (const auto& whole : table->whole) {
      if (whole.target != last_target || whole.characters != last_characters) {
        last_target = whole.target, last_characters = whole.characters;
        const uint64_t after = uint64_t(frame.count) + whole.characters;
        const uint32_t least = node.min_length > after ? uint32_t(node.min_length - after) : 0;
        const uint32_t most = node.max_length == kUnfinishable ? UINT32_MAX : uint32_t(node.max_length - std::min<uint64_t>(after, node.max_length));
        taken = (node.max_length == kUnfinishable || after <= node.max_length) && node.pattern_lengths.can_end(whole.target, least, most);
      }
      if (taken) allowed[size_t(whole.token)] = 1;
    }
  }
  // The tokens that end inside a character or an escape, and those that reach the closing quote (the
  // lengths and what follows the string decide them), are fed to a copy of this state.
  JsonSchemaBytes next = *this;
  const auto ask = [&](int32_t token) {
    next = *this;  // assigned over: its vector keeps its storage
    const std::string& bytes = trie.bytes(token);
    bool taken = true;
    for (size_t b = 0; taken && b < bytes.size(); ++b) taken = next.feed(uint8_t(bytes[b]));
    if (taken) allowed[size_t(token)] = 1;
  };
  for (int32_t token : table->asked) ask(token);
  return true;
}

}  // namespace tilefire
