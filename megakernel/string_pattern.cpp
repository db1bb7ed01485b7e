// A JSON Schema pattern into an automaton over code points (string_pattern.h): parsed into a tree, built
// into a Thompson NFA with a search loop before and after it (the pattern is unanchored), made
// deterministic by subsets, pruned to the states that can still reach a match, and minimised.
#include "string_pattern.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "string_pattern_syntax.h"
#include "tilefire/errors.h"

namespace tilefire {
namespace {

using namespace pattern_syntax;
// Compiling a pattern is bounded by the work it does as well as by the states it ends with: a pattern of
// 14 characters, x(?:b?){4000}c, makes every subset thousands of NFA states long (seconds and gigabytes
// before the state cap). A step: an NFA state visited in a closure, a range tested, a pair's range met.
// 2^24 steps take about 0.2 s; ^(?:a?b?c?){300}$ (97 ms before the budget) still compiles.
constexpr uint64_t kMostPatternWork = uint64_t(1) << 24;

struct WorkBudget {
  uint64_t spent = 0;
  void spend(uint64_t steps) {
    spent += steps;
    if (spent > kMostPatternWork)
      throw InputError("the pattern is too costly to make into an automaton (more than " + std::to_string(kMostPatternWork) +
                       " steps: long repeats of optional parts, or of large classes)");
  }
};

// A Thompson NFA: each state has empty moves (some only at the string's start or end) and at most one
// move on a class of characters.
struct Nfa {
  struct State {
    std::vector<int32_t> moves, at_start, at_end;  // empty moves, by what they need
    int32_t chars = -1, chars_target = -1;         // a class (index in sets) and where it leads
  };
  struct Fragment {
    int32_t in, out;
  };
  std::vector<State> states;
  std::vector<CharSet> sets;
  std::map<const CharSet*, int32_t> set_of;  // a class of the tree: its index in sets (a repeat's copies share it)

  [[noreturn]] static void too_large() {
    throw InputError("the pattern is too large (its repeats spell out more than " + std::to_string(kMostNfaStates) + " states)");
  }
  int32_t add() {
    if (states.size() >= kMostNfaStates) too_large();
    states.emplace_back();
    return int32_t(states.size() - 1);
  }
  void move(int32_t from, int32_t to) { states[size_t(from)].moves.push_back(to); }
  int32_t chars(int32_t from, const CharSet& set) {
    const int32_t to = add();
    auto [found, added] = set_of.emplace(&set, int32_t(sets.size()));
    if (added) sets.push_back(set);
    states[size_t(from)].chars = found->second;
    states[size_t(from)].chars_target = to;
    return to;
  }

  Fragment build(const Regex& regex) {
    const int32_t in = add();
    switch (regex.kind) {
      case Regex::Kind::chars: return {in, chars(in, regex.chars)};
      case Regex::Kind::line_start: case Regex::Kind::line_end: {
        const int32_t out = add();
        (regex.kind == Regex::Kind::line_start ? states[size_t(in)].at_start : states[size_t(in)].at_end).push_back(out);
        return {in, out};
      }
      case Regex::Kind::sequence: {
        int32_t at = in;
        for (const Regex& part : regex.parts) {
          const Fragment fragment = build(part);
          move(at, fragment.in);
          at = fragment.out;
        }
        return {in, at};
      }
      case Regex::Kind::alternation: {
        const int32_t out = add();
        for (const Regex& part : regex.parts) {
          const Fragment fragment = build(part);
          move(in, fragment.in);
          move(fragment.out, out);
        }
        return {in, out};
      }
      case Regex::Kind::repeat: {
        // Each copy adds a state at least (an empty part too): refused here, not after counting to it.
        if (regex.least > kMostNfaStates || (regex.most != kUnbounded && regex.most > kMostNfaStates)) too_large();
        int32_t at = in;
        for (uint32_t i = 0; i < regex.least; ++i) {
          const Fragment fragment = build(regex.parts[0]);
          move(at, fragment.in);
          at = fragment.out;
        }
        const int32_t out = add();
        if (regex.most == kUnbounded) {
          const Fragment fragment = build(regex.parts[0]);
          move(at, fragment.in);
          move(fragment.out, at);
          move(at, out);
          return {in, out};
        }
        for (uint32_t i = regex.least; i < regex.most; ++i) {
          move(at, out);
          const Fragment fragment = build(regex.parts[0]);
          move(at, fragment.in);
          at = fragment.out;
        }
        move(at, out);
        return {in, out};
      }
    }
    throw std::logic_error("StringPattern: a pattern node of no kind");
  }
};

// Adds [low, high] -> target after a state's last range (ranges come in ascending order): one range with
// the last when they touch and lead to the same state.
void append_transition(StringPattern::State& state, uint32_t low, uint32_t high, int32_t target) {
  if (!state.transitions.empty() && state.transitions.back().target == target && state.transitions.back().high + 1 == low)
    state.transitions.back().high = high;
  else
    state.transitions.push_back({low, high, target});
}

// Only the states from which a match can still be reached, the start first.
std::vector<StringPattern::State> live(std::vector<StringPattern::State> states, const char* none_left) {
  std::vector<std::vector<int32_t>> into(states.size());
  for (size_t s = 0; s < states.size(); ++s)
    for (const auto& transition : states[s].transitions) into[size_t(transition.target)].push_back(int32_t(s));
  std::vector<int32_t> renumbered(states.size(), -1), stack;
  std::vector<char> alive(states.size(), 0);
  for (size_t s = 0; s < states.size(); ++s)
    if (states[s].accepting) alive[s] = 1, stack.push_back(int32_t(s));
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t from : into[size_t(s)])
      if (!alive[size_t(from)]) alive[size_t(from)] = 1, stack.push_back(from);
  }
  if (!alive[0]) throw InputError(none_left);
  int32_t count = 0;
  for (size_t s = 0; s < states.size(); ++s)
    if (alive[s]) renumbered[s] = count++;
  std::vector<StringPattern::State> out(static_cast<size_t>(count));
  for (size_t s = 0; s < states.size(); ++s) {
    if (!alive[s]) continue;
    StringPattern::State& kept = out[size_t(renumbered[s])];
    kept.accepting = states[s].accepting;
    for (const auto& transition : states[s].transitions)
      if (alive[size_t(transition.target)]) kept.transitions.push_back({transition.low, transition.high, renumbered[size_t(transition.target)]});
  }
  return out;
}

// Moore's refinement: states that no string tells apart become one (so a reply's states repeat, and
// TokenTrie's cached masks serve them).
// It refines one round at a time, so a long chain of states (^a{4000}$) would take as many rounds: past
// kMostPatternWork steps the states are kept as they are (the same strings match; fewer masks repeat).
std::vector<StringPattern::State> minimized(std::vector<StringPattern::State> states) {
  std::vector<int32_t> block(states.size());
  for (size_t s = 0; s < states.size(); ++s) block[s] = states[s].accepting ? 1 : 0;
  size_t blocks = 0, transitions = 0;
  for (const auto& state : states) transitions += state.transitions.size() + 1;
  uint64_t spent = 0;
  while (true) {
    if ((spent += transitions) > kMostPatternWork) return states;
    std::map<std::vector<uint64_t>, int32_t> signatures;
    std::vector<int32_t> next(states.size());
    for (size_t s = 0; s < states.size(); ++s) {
      std::vector<uint64_t> signature = {uint64_t(block[s])};
      for (const auto& transition : states[s].transitions) {
        const uint64_t target = uint64_t(block[size_t(transition.target)]);
        // Neighbouring ranges into one block are one range.
        if (signature.size() > 1 && signature.back() == target && uint32_t(signature[signature.size() - 2]) + 1 == transition.low)
          signature[signature.size() - 2] = (signature[signature.size() - 2] >> 32 << 32) | transition.high;
        else
          signature.insert(signature.end(), {uint64_t(transition.low) << 32 | transition.high, target});
      }
      next[s] = signatures.emplace(std::move(signature), int32_t(signatures.size())).first->second;
    }
    block = std::move(next);
    if (signatures.size() == blocks) break;
    blocks = signatures.size();
  }
  // The start's block first.
  std::vector<int32_t> renumbered(blocks, -1);
  int32_t count = 0;
  renumbered[size_t(block[0])] = count++;
  for (size_t s = 0; s < states.size(); ++s)
    if (renumbered[size_t(block[s])] < 0) renumbered[size_t(block[s])] = count++;
  std::vector<StringPattern::State> out(blocks);
  std::vector<char> done(blocks, 0);
  for (size_t s = 0; s < states.size(); ++s) {
    const size_t b = size_t(renumbered[size_t(block[s])]);
    if (done[b]) continue;
    done[b] = 1;
    out[b].accepting = states[s].accepting;
    for (const auto& transition : states[s].transitions)
      append_transition(out[b], transition.low, transition.high, renumbered[size_t(block[size_t(transition.target)])]);
  }
  return out;
}


// Builds a StringPattern's states from the NFA.
class PatternBuilder {
 public:
  PatternBuilder(Nfa nfa, int32_t start, int32_t matched) : nfa_(std::move(nfa)), start_(start), matched_(matched) {
    marks_.assign(nfa_.states.size() * 2, 0);
  }

  std::vector<StringPattern::State> run() { return minimized(live(determinize(), "no string matches the pattern")); }

 private:
  // A subset's element: an NFA state, times 2, plus 1 when the string must end there (after a $).
  using Subset = std::vector<uint32_t>;

  void close(Subset& subset, bool at_start) {
    ++generation_;
    std::vector<uint32_t> stack = subset;
    for (uint32_t element : stack) marks_[element] = generation_;
    subset.clear();
    while (!stack.empty()) {
      const uint32_t element = stack.back();
      stack.pop_back();
      subset.push_back(element);
      const Nfa::State& state = nfa_.states[element / 2];
      work_.spend(1 + state.moves.size() + state.at_end.size() + state.at_start.size());
      const uint32_t ended = element & 1;
      const auto reach = [&](int32_t to, uint32_t must_end) {
        const uint32_t next = uint32_t(to) * 2 + must_end;
        if (marks_[next] != generation_) marks_[next] = generation_, stack.push_back(next);
      };
      for (int32_t to : state.moves) reach(to, ended);
      for (int32_t to : state.at_end) reach(to, 1);
      if (at_start)
        for (int32_t to : state.at_start) reach(to, ended);
    }
    std::sort(subset.begin(), subset.end());
    // Once the pattern has matched (and no $ holds the string to its end), any rest matches too.
    if (std::binary_search(subset.begin(), subset.end(), uint32_t(matched_) * 2)) subset = {uint32_t(matched_) * 2};
  }

  // Each subset is kept once, as its map key (subsets points at them: a map's keys stay where they are).
  int32_t intern(Subset subset, std::map<Subset, int32_t>& ids, std::vector<const Subset*>& subsets) {
    auto [found, added] = ids.emplace(std::move(subset), int32_t(subsets.size()));
    if (added) {
      if (subsets.size() >= kMostPatternStates)
        throw InputError("the pattern needs more than " + std::to_string(kMostPatternStates) + " automaton states");
      subsets.push_back(&found->first);
    }
    return found->second;
  }

  std::vector<StringPattern::State> determinize() {
    std::map<Subset, int32_t> ids;
    std::vector<const Subset*> subsets;
    Subset first = {uint32_t(start_) * 2};
    close(first, true);
    intern(std::move(first), ids, subsets);
    std::vector<StringPattern::State> states;
    for (size_t at = 0; at < subsets.size(); ++at) {
      const Subset& subset = *subsets[at];
      StringPattern::State state;
      std::vector<std::pair<int32_t, int32_t>> moves;  // (set, target) of the elements that may go on
      std::vector<uint32_t> bounds = {0, 0xD800, 0xE000, kMostCodePoint + 1};
      for (uint32_t element : subset) {
        const Nfa::State& nfa_state = nfa_.states[element / 2];
        if (element / 2 == uint32_t(matched_)) state.accepting = true;
        if ((element & 1) || nfa_state.chars < 0) continue;
        moves.emplace_back(nfa_state.chars, nfa_state.chars_target);
        for (const CodeRange& range : nfa_.sets[size_t(nfa_state.chars)]) {
          bounds.push_back(range.low);
          bounds.push_back(range.high + 1);
        }
      }
      std::sort(bounds.begin(), bounds.end());
      bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
      work_.spend(uint64_t(bounds.size()) * (moves.size() + 1));
      std::map<Subset, int32_t> closed;  // this state's moves before their closure: the state they lead to
      for (size_t i = 0; i + 1 < bounds.size(); ++i) {
        const uint32_t low = bounds[i], high = bounds[i + 1] - 1;
        if (low >= 0xD800 && low < 0xE000) continue;  // surrogates: no character of a JSON string
        Subset targets;
        for (const auto& [set, target] : moves)
          if (contains(nfa_.sets[size_t(set)], low)) targets.push_back(uint32_t(target) * 2);
        if (targets.empty()) continue;
        auto [known, fresh] = closed.emplace(targets, -1);
        if (fresh) {
          close(targets, false);
          work_.spend(targets.size());
          known->second = intern(std::move(targets), ids, subsets);
        }
        append_transition(state, low, high, known->second);
      }
      states.push_back(std::move(state));
    }
    return states;
  }

  Nfa nfa_;
  int32_t start_, matched_;
  std::vector<uint32_t> marks_;  // closure's visited marks, by element
  uint32_t generation_ = 0;
  WorkBudget work_;
};

}  // namespace

std::shared_ptr<const StringPattern> StringPattern::compile(std::string_view pattern) { return compile_tree(parse_pattern(pattern)); }

namespace {

// The tree of ^(?:pattern)$, read from `pattern` itself (so an error names its place there).
Regex anchored_tree(std::string_view pattern) {
  Regex anchored;  // a sequence: ^, the pattern, $
  anchored.parts.resize(3);
  anchored.parts[0].kind = Regex::Kind::line_start;
  anchored.parts[1] = parse_pattern(pattern);
  anchored.parts[2].kind = Regex::Kind::line_end;
  return anchored;
}

}  // namespace

std::shared_ptr<const StringPattern> StringPattern::compile_whole(std::string_view pattern) { return compile_tree(anchored_tree(pattern)); }

namespace {

// A group of one part, or an alternation of one branch, is that part.
const Regex* unwrapped(const Regex* part) {
  while ((part->kind == Regex::Kind::sequence || part->kind == Regex::Kind::alternation) && part->parts.size() == 1) part = &part->parts[0];
  return part;
}

// The code points of every string `regex` matches, when they are one number (an anchor's: 0); none when
// its strings differ in length (or it passes UINT32_MAX).
std::optional<uint64_t> fixed_length(const Regex& regex) {
  switch (regex.kind) {
    case Regex::Kind::chars: return 1;
    case Regex::Kind::line_start: case Regex::Kind::line_end: return 0;
    case Regex::Kind::sequence: {
      uint64_t length = 0;
      for (const Regex& part : regex.parts) {
        const std::optional<uint64_t> part_length = fixed_length(part);
        if (!part_length || (length += *part_length) >= UINT32_MAX) return std::nullopt;
      }
      return length;
    }
    case Regex::Kind::alternation: {
      std::optional<uint64_t> length;
      for (const Regex& branch : regex.parts) {
        const std::optional<uint64_t> branch_length = fixed_length(branch);
        if (!branch_length || (length && *length != *branch_length)) return std::nullopt;
        length = branch_length;
      }
      return length ? length : std::optional<uint64_t>(0);
    }
    case Regex::Kind::repeat: {
      const std::optional<uint64_t> part_length = fixed_length(regex.parts[0]);
      if (regex.least != regex.most || !part_length || *part_length * regex.least >= UINT32_MAX) return std::nullopt;
      return *part_length * regex.least;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<StringPattern::CountedClass> StringPattern::counted_class(std::string_view pattern) {
  return counted_class_of(parse_pattern(pattern));
}

std::optional<StringPattern::CountedClass> StringPattern::counted_class_whole(std::string_view pattern) {
  return counted_class_of(anchored_tree(pattern));
}

std::optional<StringPattern::CountedClass> StringPattern::counted_class_of(const Regex& regex) {
  // The pattern's parts in order, groups opened: ^, then P, C{m,n} and S, then $.
  std::vector<const Regex*> parts;
  auto flatten = [&](auto&& self, const Regex& regex_part) -> void {
    const Regex* part = unwrapped(&regex_part);
    if (part->kind != Regex::Kind::sequence) return parts.push_back(part);
    for (const Regex& inner : part->parts) self(self, inner);
  };
  flatten(flatten, regex);
  if (parts.size() < 3 || parts.front()->kind != Regex::Kind::line_start || parts.back()->kind != Regex::Kind::line_end) return std::nullopt;
  // The counted class: a repeat of one class, every other part of one length. Its strings are P's, then
  // the class's, then S's: those of ^P C* S$ whose length less P's and S's is within the count. The one
  // part whose strings differ in length, or when none does, the class repeated most (the longest run).
  std::vector<std::optional<uint64_t>> lengths;
  size_t counted = 0, varying = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    lengths.push_back(fixed_length(*parts[i]));
    const bool class_repeat = parts[i]->kind == Regex::Kind::repeat && unwrapped(&parts[i]->parts[0])->kind == Regex::Kind::chars;
    if (!lengths.back()) ++varying, counted = class_repeat ? i : parts.size();
    else if (varying == 0 && class_repeat && (counted == 0 || parts[i]->most > parts[counted]->most)) counted = i;
  }
  if (varying > 1 || counted == 0 || counted == parts.size()) return std::nullopt;
  uint64_t fixed = 0;  // P's and S's code points
  for (size_t i = 0; i < parts.size(); ++i)
    if (i != counted && (fixed += *lengths[i]) >= UINT32_MAX) return std::nullopt;
  const Regex& repeat = *parts[counted];
  const uint64_t least = fixed + repeat.least, most = repeat.most == kUnbounded ? uint64_t(UINT32_MAX) : fixed + repeat.most;
  if (least >= UINT32_MAX || (repeat.most != kUnbounded && most >= UINT32_MAX)) return std::nullopt;
  Regex star;  // ^P C* S$
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i != counted) {
      star.parts.push_back(*parts[i]);
      continue;
    }
    Regex star_of_class;
    star_of_class.kind = Regex::Kind::repeat;
    star_of_class.parts = {*unwrapped(&repeat.parts[0])};
    star.parts.push_back(std::move(star_of_class));
  }
  return CountedClass{compile_tree(star), uint32_t(least), uint32_t(most), repeat.most == kUnbounded ? repeat.least : repeat.most};
}

std::shared_ptr<const StringPattern> StringPattern::compile_tree(const Regex& regex) {
  // Unanchored: any characters, the pattern, any characters; ^ holds only before the first.
  Nfa nfa;
  const CharSet everything = {{0, kMostCodePoint}};
  const int32_t start = nfa.add();
  const Nfa::Fragment body = nfa.build(regex);
  const int32_t matched = nfa.add();
  nfa.sets.push_back(everything);
  nfa.states[size_t(start)].chars = int32_t(nfa.sets.size() - 1);
  nfa.states[size_t(start)].chars_target = start;
  nfa.states[size_t(matched)].chars = int32_t(nfa.sets.size() - 1);
  nfa.states[size_t(matched)].chars_target = matched;
  nfa.move(start, body.in);
  nfa.move(body.out, matched);
  auto compiled = std::make_shared<StringPattern>();
  compiled->states_ = PatternBuilder(std::move(nfa), start, matched).run();
  return compiled;
}

std::shared_ptr<const StringPattern> StringPattern::intersect(const StringPattern& a, const StringPattern& b) {
  // The product automaton over the pairs reachable from the two starts: a pair's ranges are where a
  // range of each meets.
  std::map<std::pair<int32_t, int32_t>, int32_t> ids = {{{kStart, kStart}, 0}};
  std::vector<std::pair<int32_t, int32_t>> pairs = {{kStart, kStart}};
  std::vector<State> states;
  WorkBudget work;
  for (size_t at = 0; at < pairs.size(); ++at) {
    const auto [x, y] = pairs[at];
    State state;
    state.accepting = a.accepting(x) && b.accepting(y);
    const auto& left = a.transitions(x);
    const auto& right = b.transitions(y);
    work.spend(1 + left.size() + right.size());
    for (size_t i = 0, j = 0; i < left.size() && j < right.size();) {
      const uint32_t low = std::max(left[i].low, right[j].low), high = std::min(left[i].high, right[j].high);
      if (low <= high) {
        auto [found, added] = ids.emplace(std::pair(left[i].target, right[j].target), int32_t(pairs.size()));
        if (added) {
          if (pairs.size() >= kMostPatternStates)
            throw InputError("the strings both match need more than " + std::to_string(kMostPatternStates) + " automaton states");
          pairs.push_back(found->first);
        }
        append_transition(state, low, high, found->second);
      }
      (left[i].high < right[j].high ? i : j) += 1;
    }
    states.push_back(std::move(state));
  }
  auto both = std::make_shared<StringPattern>();
  both->states_ = minimized(live(std::move(states), "no string matches both the pattern and the format"));
  return both;
}

int32_t StringPattern::next(int32_t state, uint32_t code_point) const {
  const auto& transitions = states_[size_t(state)].transitions;
  auto after = std::upper_bound(transitions.begin(), transitions.end(), code_point,
                                [](uint32_t c, const Transition& t) { return c < t.low; });
  if (after == transitions.begin() || std::prev(after)->high < code_point) return -1;
  return std::prev(after)->target;
}

bool StringPattern::matches(std::string_view text) const {
  std::vector<uint32_t> characters;
  try {
    characters = code_points(text);
  } catch (const InputError&) {
    return false;
  }
  int32_t state = kStart;
  for (uint32_t c : characters)
    if ((state = next(state, c)) < 0) return false;
  return accepting(state);
}

PatternLengths::PatternLengths(const StringPattern& pattern, uint32_t min_length, uint32_t max_length) {
  const size_t states = pattern.states();
  // Looking |states| past minLength is enough (or to maxLength, when nearer): a longer match has a loop of
  // at most |states| characters that can be left out while it stays longer than minLength, so a match
  // of a length in [least, most] (least at most minLength) past the table has one within it.
  const uint64_t horizon = std::min<uint64_t>(max_length, uint64_t(min_length) + states);
  size_t edges = 0;
  std::vector<std::vector<int32_t>> into(states);
  for (size_t s = 0; s < states; ++s) {
    for (const auto& transition : pattern.transitions(int32_t(s))) {
      auto& from = into[size_t(transition.target)];
      if (from.empty() || from.back() != int32_t(s)) from.push_back(int32_t(s)), ++edges;
    }
  }
  constexpr uint64_t kMostWork = uint64_t(1) << 26;
  if ((horizon + 1) * (states + edges) > kMostWork)
    throw InputError("the string's lengths (minLength, maxLength, or the pattern's own count of a class) look " + std::to_string(horizon) +
                     " characters ahead over " + std::to_string(states) + " pattern states: too large to hold (at most " +
                     std::to_string(kMostWork) + " characters times states and their edges)");
  horizon_ = uint32_t(horizon);
  words_ = size_t(horizon / 64 + 1);
  ends_after_.assign(states * words_, 0);
  std::vector<char> layer(states, 0), next(states, 0);
  for (size_t s = 0; s < states; ++s) layer[s] = pattern.accepting(int32_t(s));
  for (uint32_t k = 0;; ++k) {  // layer: the states a match ends exactly k characters after
    for (size_t s = 0; s < states; ++s)
      if (layer[s]) ends_after_[s * words_ + k / 64] |= uint64_t(1) << (k % 64);
    if (k == horizon_) break;
    std::fill(next.begin(), next.end(), 0);
    for (size_t t = 0; t < states; ++t)
      if (layer[t])
        for (int32_t s : into[t]) next[size_t(s)] = 1;
    layer.swap(next);
  }
}

bool PatternLengths::can_end(int32_t state, uint32_t least, uint32_t most) const {
  if (words_ == 0) return true;
  most = std::min(most, horizon_);
  if (least > most) return false;
  const uint64_t* bits = &ends_after_[size_t(state) * words_];
  for (uint32_t word = least / 64; word <= most / 64; ++word) {
    uint64_t mask = ~uint64_t(0);
    if (word == least / 64) mask &= ~uint64_t(0) << (least % 64);
    if (word == most / 64 && most % 64 != 63) mask &= (uint64_t(1) << (most % 64 + 1)) - 1;
    if (bits[word] & mask) return true;
  }
  return false;
}

}  // namespace tilefire
