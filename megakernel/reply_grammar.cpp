// A reply held to a grammar (tilefire/reply_grammar.h): the parses of the text so far, each a stack of
// places in the grammar's rules opened down to a class of characters, advanced a character at a time
// through the UTF-8 reader reply_pattern.cpp also uses. The grammar itself is read in
// reply_grammar_syntax.cpp.
#include "tilefire/reply_grammar.h"

#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "tilefire/errors.h"
#include "utf8_step.h"

namespace tilefire {

namespace {

using Kind = ReplyGrammar::Symbol::Kind;

// Calls visit(depth, place of the innermost symbol) for each parse of `parses` (encoded).
template <class Visit>
bool any_parse(const std::vector<uint32_t>& parses, const Visit& visit) {
  for (size_t i = 0; i < parses.size(); i += 1 + parses[i])
    if (visit(parses[i], parses[i] == 0 ? 0 : parses[i + parses[i]])) return true;
  return false;
}

}  // namespace

// The tokens each set of parses allows at a character's end, by (TokenTrie::serial, the set's parses): the
// same for every reply to the grammar, whichever table numbered the set. Made by the first reply in the set
// (its walk, outside the lock: other replies read the other lists meanwhile), then a list to copy. Bounded
// by kMostWords in all, tokens and keys: past it every list is dropped and the next visits walk again (a
// list handed out stays valid while its holder keeps it).
class GrammarTokenTables {
 public:
  static constexpr size_t kMostWords = size_t(4) << 20;  // 16 MiB
  static constexpr size_t kMostKeyWords = 4096;  // a longer set (a deep or ambiguous one) is walked each time

  using Tokens = std::vector<int32_t>;
  template <class Make>
  std::shared_ptr<const Tokens> find_or_make(std::vector<uint32_t> key, const Make& make) {
    {
      std::lock_guard lock(mutex_);
      if (auto kept = lists_.find(key); kept != lists_.end()) return kept->second;
    }
    auto made = std::make_shared<const Tokens>(make());
    std::lock_guard lock(mutex_);
    if (auto kept = lists_.find(key); kept != lists_.end()) return kept->second;  // made meanwhile by another reply
    const size_t words = key.size() + made->size();
    if (words_ + words > kMostWords) {
      lists_.clear();
      words_ = 0;
    }
    words_ += words;
    lists_.emplace(std::move(key), made);
    return made;
  }

  size_t size() {
    std::lock_guard lock(mutex_);
    return lists_.size();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const Tokens>, ReplyGrammar::StackHash> lists_;
  size_t words_ = 0;
};

ReplyGrammar::ReplyGrammar() : tables_(std::make_unique<GrammarTokenTables>()) {}
ReplyGrammar::~ReplyGrammar() = default;

size_t ReplyGrammar::token_tables() const { return tables_->size(); }

std::vector<uint32_t> ReplyGrammar::encode_parses(std::vector<std::vector<uint32_t>>& parses) {
  std::sort(parses.begin(), parses.end());
  parses.erase(std::unique(parses.begin(), parses.end()), parses.end());
  if (parses.size() > kMostGrammarParses)
    throw InputError("the grammar has more than " + std::to_string(kMostGrammarParses) +
                     " parses of the reply so far: it is too ambiguous to follow (write it so that fewer ways of reading a text stay open)");
  std::vector<uint32_t> flat;
  for (const std::vector<uint32_t>& parse : parses) {
    flat.push_back(uint32_t(parse.size()));
    flat.insert(flat.end(), parse.begin(), parse.end());
  }
  return flat;
}

size_t ReplyGrammar::StackHash::operator()(const std::vector<uint32_t>& words) const {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a over the words
  for (uint32_t word : words) hash = (hash ^ word) * 0x100000001b3ull;
  return size_t(hash);
}

bool ReplyGrammar::open(std::vector<std::vector<uint32_t>> work, std::vector<std::vector<uint32_t>>& out) const {
  // The same rule opened over the same stack gives the same parses, wherever it came from: once is enough.
  // (A rule that can be empty, repeated, comes back to itself so: x* of a nullable x.) A worklist, not
  // recursion: rules that may be empty can open many inside one another without a character between.
  std::unordered_set<std::vector<uint32_t>, StackHash> opened;
  size_t ways = 0;  // alternatives taken, each a stack copied: the work, bounded
  bool too_deep = false;
  while (!work.empty()) {
    std::vector<uint32_t> stack = std::move(work.back());
    work.pop_back();
    bool whole = true;  // opened down to a class or to nothing, not cut
    while (!stack.empty()) {
      const uint32_t place = stack.back();
      const Symbol symbol = symbols_[place];
      if (symbol.kind == Kind::characters) break;
      stack.pop_back();
      if (symbol.kind == Kind::end) continue;  // an alternative is whole: the rule that opened it goes on
      // A rule: what follows it goes on once it is whole (nothing to keep when it is its alternative's last,
      // so a right-recursive repetition keeps its depth), inside each of its alternatives.
      if (symbols_[place + 1].kind != Kind::end) stack.push_back(place + 1);
      if (stack.size() + 1 > kMostGrammarDepth) {  // its alternatives would pass the bound: dropped
        too_deep = true;
        whole = false;
        break;
      }
      std::vector<uint32_t> key = stack;
      key.push_back(symbol.index | 0x80000000u);  // a rule's, set apart from places
      if (!opened.insert(std::move(key)).second) {
        whole = false;
        break;
      }
      const std::vector<uint32_t>& starts = alternatives_[symbol.index];
      ways += starts.size();
      if (ways > kMostGrammarOpens)
        throw InputError("the grammar opens more than " + std::to_string(kMostGrammarOpens) +
                         " ways through its rules at one character: it is too ambiguous to follow");
      for (size_t i = 0; i + 1 < starts.size(); ++i) {
        std::vector<uint32_t> other = stack;
        other.push_back(starts[i]);
        work.push_back(std::move(other));
      }
      stack.push_back(starts.back());
    }
    if (whole) out.push_back(std::move(stack));
  }
  return too_deep;
}

bool ReplyGrammar::class_has(uint32_t place, uint32_t code_point) const { return class_meets(place, code_point, code_point); }

bool ReplyGrammar::class_meets(uint32_t place, uint32_t low, uint32_t high) const {
  const auto& ranges = classes_[symbols_[place].index];
  auto at = std::lower_bound(ranges.begin(), ranges.end(), low,
                             [](const std::pair<uint32_t, uint32_t>& range, uint32_t c) { return range.second < c; });
  return at != ranges.end() && at->first <= high;
}

bool ReplyGrammar::matches(std::string_view text) const {
  GrammarParseTable table(std::shared_ptr<const ReplyGrammar>(std::shared_ptr<const ReplyGrammar>(), this));  // not owned
  GrammarReplyBytes state = table.start();
  return state.feed(text) && state.complete();
}

GrammarParseTable::GrammarParseTable(std::shared_ptr<const ReplyGrammar> grammar, size_t most_bytes)
    : grammar_(grammar ? std::move(grammar) : throw InputError("GrammarParseTable: no grammar")), most_bytes_(most_bytes) {
  number(grammar_->start_parses_);
}

void GrammarParseTable::grow(size_t bytes) {
  if (bytes_ + bytes > most_bytes_)
    throw InputError("the grammar's parses of this reply take more than " + std::to_string(most_bytes_ >> 10) +
                     " KiB: it is too ambiguous to follow this far");
  bytes_ += bytes;
}

uint32_t GrammarParseTable::number(std::vector<uint32_t> parses) {
  if (const auto known = numbers_.find(parses); known != numbers_.end()) return known->second;
  // The set twice (its number's key, and by number), its row of ASCII steps, the containers' own; checked
  // before anything is added, so a refusal leaves the table whole.
  const size_t added = 2 * parses.size() * sizeof(uint32_t) + 128 * sizeof(int32_t) + 96;
  grow(added);
  const uint32_t number = uint32_t(sets_.size());
  numbers_.emplace(parses, number);
  whole_.push_back(any_parse(parses, [](uint32_t depth, uint32_t) { return depth == 0; }) ? 1 : 0);
  cut_.push_back(0);
  sets_.push_back(std::move(parses));
  ascii_steps_.resize(ascii_steps_.size() + 128, kUnknownStep);
  return number;
}

int32_t GrammarParseTable::next(uint32_t from, uint32_t code_point) {
  const uint64_t key = (uint64_t(from) << 21) | code_point;
  if (code_point < 128) {
    if (const int32_t known = ascii_steps_[size_t(from) * 128 + code_point]; known != kUnknownStep) return known;
  } else if (const auto known = steps_.find(key); known != steps_.end()) {
    return known->second;
  }
  std::vector<std::vector<uint32_t>> stepped, opened;
  const std::vector<uint32_t>& parses = sets_[from];
  for (size_t i = 0; i < parses.size(); i += 1 + parses[i]) {
    const uint32_t depth = parses[i];
    if (depth == 0 || !grammar_->class_has(parses[i + depth], code_point)) continue;
    stepped.emplace_back(parses.begin() + std::ptrdiff_t(i + 1), parses.begin() + std::ptrdiff_t(i + 1 + depth));
    ++stepped.back().back();  // past the class: the next symbol of its alternative (an end, a class or a rule)
  }
  if (grammar_->open(std::move(stepped), opened)) cut_[from] = 1;
  const int32_t to = opened.empty() ? -1 : int32_t(number(ReplyGrammar::encode_parses(opened)));
  if (code_point < 128) ascii_steps_[size_t(from) * 128 + code_point] = to;  // after number(): it may grow the table
  else grow(48), steps_.emplace(key, to);  // a hash node, about
  return to;
}

bool GrammarParseTable::leads_on(uint32_t from, uint32_t low, uint32_t high) const {
  return any_parse(sets_[from], [&](uint32_t depth, uint32_t top) { return depth > 0 && grammar_->class_meets(top, low, high); });
}

bool GrammarReplyBytes::feed(uint8_t byte) {
  const Utf8Step step = read_utf8(partial_, utf8_left_, next_low_, next_high_, byte);
  if (!step.valid) return false;
  if (step.whole) {
    const int32_t next = table_->next(parses_, step.low);
    if (next < 0) return false;
    parses_ = uint32_t(next);
  } else if (!table_->leads_on(parses_, step.low, step.high)) {
    return false;
  }
  partial_ = step.partial, utf8_left_ = step.left, next_low_ = step.next_low, next_high_ = step.next_high;
  return true;
}

bool GrammarReplyBytes::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(static_cast<uint8_t>(c))) return false;
  return true;
}

bool GrammarReplyBytes::cut_for_depth() const { return table_->cut(parses_); }

bool GrammarReplyBytes::allow_tokens_itself(const TokenTrie& trie, std::vector<uint8_t>& allowed) const {
  if (utf8_left_) return false;
  const std::vector<uint32_t>& parses = table_->sets_[parses_];
  if (parses.size() > GrammarTokenTables::kMostKeyWords) return false;
  std::vector<uint32_t> key{uint32_t(trie.serial()), uint32_t(trie.serial() >> 32)};
  key.insert(key.end(), parses.begin(), parses.end());
  const std::shared_ptr<const GrammarTokenTables::Tokens> tokens = table_->grammar_->tables_->find_or_make(std::move(key), [&] {
    GrammarTokenTables::Tokens made;
    trie.walk(*this, [&](int32_t token, const GrammarReplyBytes&) { made.push_back(token); });
    return made;
  });
  // None: the reply can go no further here; the walk says so again, and marks the set cut for depth
  // where that is why (GrammarReplyConstraint's message).
  if (tokens->empty()) return false;
  if (allowed.size() < trie.tokens())
    throw InputError("GrammarReplyBytes::allow_tokens_itself: a list of " + std::to_string(allowed.size()) +
                     " tokens for a vocabulary of " + std::to_string(trie.tokens()));
  for (int32_t token : *tokens) allowed[size_t(token)] = 1;
  return true;
}

bool GrammarReplyBytes::complete() const { return utf8_left_ == 0 && table_->whole(parses_); }

// The parses are distinct, so a whole text is one of depth 0, alone when nothing may follow.
bool GrammarReplyBytes::ended() const { return utf8_left_ == 0 && table_->alone_whole(parses_) && table_->whole(parses_); }

GrammarReplyConstraint::GrammarReplyConstraint(std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyGrammar> grammar,
                                               std::vector<int32_t> ending_tokens)
    : table_(std::make_unique<GrammarParseTable>(std::move(grammar))),
      bytes_(std::move(tokens), table_->start(), "reply held to a grammar", "as the grammar derives"),
      ending_tokens_(std::move(ending_tokens)) {}

bool GrammarReplyConstraint::ended(const std::vector<int32_t>& generated) {
  return ending_tokens_.end(generated) || bytes_.state(generated).ended();
}

void GrammarReplyConstraint::allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
  bytes_.allowed(generated, allowed);
  // Nothing to choose where the grammar would go on but only deeper than the bound: said so, rather than
  // the engine's "allowed no token".
  const GrammarReplyBytes& state = bytes_.state(generated);
  if (state.cut_for_depth() && !state.complete() && std::find(allowed.begin(), allowed.end(), 1) == allowed.end())
    throw InputError("the reply nests the grammar's rules " + std::to_string(kMostGrammarDepth) +
                     " deep, and only a deeper parse could go on");
  ending_tokens_.allow_where(state.complete(), allowed);
}

void constrain_to_grammar(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const ReplyGrammar> grammar,
                          const std::vector<int32_t>& eos_tokens) {
  constrain_request(request, std::make_shared<GrammarReplyConstraint>(std::move(tokens), std::move(grammar), request.ending_tokens(eos_tokens)));
}

}  // namespace tilefire
