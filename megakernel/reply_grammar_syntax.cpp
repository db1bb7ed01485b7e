// GBNF read into a ReplyGrammar (tilefire/reply_grammar.h): a recursive descent over the text, repetitions
// spelt out as rules of their own (x* as R ::= x R | nothing, right-recursive so that a parse's depth
// does not grow with the count), then the checks that make every parse able to end: each rule used is
// defined, none is left-recursive (a parse would open it forever), and every way of writing a rule the
// root reaches can end (so no byte taken leads to a dead end).
#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_map>
#include <utility>

#include "shared_token_tables.h"
#include "tilefire/errors.h"
#include "tilefire/reply_grammar.h"

namespace tilefire {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

struct GrammarBuilder {
  struct Sym {
    bool is_rule;
    uint32_t index;  // a class's or a rule's
  };
  using Sequence = std::vector<Sym>;

  std::string_view text;
  size_t at = 0;
  std::vector<std::vector<Sequence>> rules;  // [rule]: its alternatives
  std::vector<std::string> names;            // a group's or a repetition's: "what#n", no rule's name has '#'
  std::vector<uint32_t> owners;              // [rule]: the named rule a group or repetition is written in (itself for one named)
  std::vector<const char*> kinds;            // [rule]: "group", "repetition", or null for a named rule
  std::vector<size_t> defined_at, used_at;   // offsets in text; npos: not yet
  std::unordered_map<std::string, uint32_t> ids;
  std::vector<Ranges> classes;
  size_t spelt = 0;  // symbols written so far, repetitions spelt out
  uint32_t groups_open = 0;  // groups being read, inside one another (the parser recurses into each)

  [[noreturn]] void fail(const std::string& what, size_t offset) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < offset && i < text.size(); ++i) {
      if (text[i] == '\n') ++line, column = 1;
      else ++column;
    }
    throw InputError("line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail(what, at); }

  bool done() const { return at >= text.size(); }
  // A character of the text in a message: itself, or a byte that is not printable ASCII as \xHH.
  static bool printable(char c) { return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F; }
  static std::string shown(char c) {
    const auto byte = static_cast<unsigned char>(c);
    if (printable(c)) return std::string("'") + c + "'";
    const char* digits = "0123456789ABCDEF";
    return std::string("the byte \\x") + digits[byte >> 4] + digits[byte & 15];
  }
  static bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

  void skip_space() {
    while (!done()) {
      const char c = text[at];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++at;
      } else if (c == '#') {
        while (!done() && text[at] != '\n') ++at;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t begin = at;
    while (!done() && is_name_char(text[at])) ++at;
    return std::string(text.substr(begin, at - begin));
  }

  // A name followed by ::= : where the next rule begins (a rule may run over several lines).
  bool at_rule_start() {
    const size_t saved = at;
    read_name();
    skip_space();
    const bool starts = text.substr(at, 3) == "::=";
    at = saved;
    return starts;
  }

  uint32_t rule_id(const std::string& name) {
    const auto [it, added] = ids.emplace(name, uint32_t(names.size()));
    if (added) {
      names.push_back(name);
      owners.push_back(uint32_t(names.size() - 1));
      kinds.push_back(nullptr);
      rules.emplace_back();
      defined_at.push_back(std::string_view::npos);
      used_at.push_back(std::string_view::npos);
    }
    return it->second;
  }

  // A group's or a repetition's rule (`what`), in the rule `owner` is written in.
  uint32_t new_rule(const std::string& owner, const char* what, std::vector<Sequence> alternatives, size_t offset) {
    const uint32_t id = rule_id(std::string(what) + "#" + std::to_string(names.size()));
    owners[id] = ids.at(owner);
    kinds[id] = what;
    rules[id] = std::move(alternatives);
    defined_at[id] = offset;
    return id;
  }

  void count(size_t symbols) {
    spelt += symbols;
    if (spelt > kMostGrammarSymbols)
      fail("the grammar spells out more than " + std::to_string(kMostGrammarSymbols) + " symbols (its repetitions written out)");
  }

  // A class's ranges, merged, without the surrogates (no UTF-8 text has them): an empty one is refused.
  uint32_t add_class(Ranges ranges, size_t offset) {
    std::sort(ranges.begin(), ranges.end());
    Ranges merged;
    Ranges split;
    for (const auto& [low, high] : ranges) {
      if (low < 0xD800) split.emplace_back(low, std::min<uint32_t>(high, 0xD7FF));
      if (high > 0xDFFF) split.emplace_back(std::max<uint32_t>(low, 0xE000), high);
    }
    for (const auto& range : split) {
      if (!merged.empty() && range.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, range.second);
      else merged.push_back(range);
    }
    if (merged.empty()) fail("a class with no characters (surrogates are none: no UTF-8 text has them)", offset);
    classes.push_back(std::move(merged));
    return uint32_t(classes.size() - 1);
  }

  // One character of a literal or a class: as written (UTF-8), or an escape.
  uint32_t read_character() {
    if (done()) fail("the text ends inside a literal or a class");
    const auto byte = static_cast<unsigned char>(text[at]);
    if (byte == '\\') return read_escape();
    size_t length = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC2 ? 2 : 0;
    if (length == 0 || at + length > text.size()) fail("not UTF-8");
    uint32_t code_point = length == 1 ? byte : byte & (0x7Fu >> length);
    for (size_t i = 1; i < length; ++i) {
      const auto next = static_cast<unsigned char>(text[at + i]);
      if ((next & 0xC0) != 0x80) fail("not UTF-8");
      code_point = (code_point << 6) | (next & 0x3Fu);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < least[length] || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) fail("not UTF-8");
    at += length;
    return code_point;
  }

  uint32_t read_hex(size_t digits) {
    const size_t begin = at - 2;
    if (at + digits > text.size()) fail("an escape needs " + std::to_string(digits) + " hex digits", begin);
    uint32_t value = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char c = text[at + i];
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (digit < 0) fail("an escape needs " + std::to_string(digits) + " hex digits", begin);
      value = value * 16 + uint32_t(digit);
    }
    at += digits;
    if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) fail("an escape names no character", begin);
    return value;
  }

  uint32_t read_escape() {
    ++at;  // the backslash
    if (done()) fail("the text ends in an escape");
    const char c = text[at++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'x': return read_hex(2);
      case 'u': return read_hex(4);
      case 'U': return read_hex(8);
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return uint32_t(c);
      default:
        fail(printable(c) ? std::string("unknown escape \\") + c : "unknown escape: a backslash, then " + shown(c), at - 2);
    }
  }

  void literal(Sequence& sequence) {
    const size_t begin = at++;
    while (true) {
      if (done()) fail("a literal is not closed", begin);
      if (text[at] == '"') break;
      const size_t character_at = at;
      const uint32_t c = read_character();
      count(1);
      sequence.push_back({false, add_class({{c, c}}, character_at)});
    }
    ++at;
  }

  void character_class(Sequence& sequence) {
    const size_t begin = at++;
    const bool negated = !done() && text[at] == '^';
    if (negated) ++at;
    Ranges ranges;
    while (true) {
      if (done()) fail("a class is not closed", begin);
      if (text[at] == ']') break;
      const uint32_t low = read_character();
      uint32_t high = low;
      if (at + 1 < text.size() && text[at] == '-' && text[at + 1] != ']') {
        ++at;
        high = read_character();
        if (high < low) fail("a range whose end comes before its start", begin);
      }
      ranges.emplace_back(low, high);
    }
    ++at;
    if (negated) {
      Ranges complement;
      uint32_t next = 0;
      std::sort(ranges.begin(), ranges.end());
      for (const auto& [low, high] : ranges) {
        if (low > next) complement.emplace_back(next, low - 1);
        next = std::max(next, high + 1);
      }
      if (next <= 0x10FFFF) complement.emplace_back(next, 0x10FFFF);
      ranges = std::move(complement);
    }
    count(1);
    sequence.push_back({false, add_class(std::move(ranges), begin)});
  }

  uint32_t read_count() {
    const size_t begin = at;
    uint64_t value = 0;
    while (!done() && std::isdigit(static_cast<unsigned char>(text[at]))) {
      value = std::min<uint64_t>(value * 10 + uint64_t(text[at] - '0'), uint64_t(kMostGrammarRepetition) + 1);
      ++at;
    }
    if (at == begin) fail("a repetition {m,n} needs a number");
    if (value > kMostGrammarRepetition) fail("a repetition past " + std::to_string(kMostGrammarRepetition), begin);
    return uint32_t(value);
  }

  // The repetition after the element sequence[first ..]: * + ? {m} {m,} {m,n}.
  void repeat(Sequence& sequence, size_t first, const std::string& owner) {
    const size_t begin = at;
    const Sequence element(sequence.begin() + std::ptrdiff_t(first), sequence.end());
    sequence.resize(first);
    uint32_t least = 0, most = 0;
    bool unbounded = false;
    const char c = text[at++];
    if (c == '*') unbounded = true;
    else if (c == '+') least = 1, unbounded = true;
    else if (c == '?') most = 1;
    else {  // {
      skip_space();
      least = most = read_count();
      skip_space();
      if (!done() && text[at] == ',') {
        ++at;
        skip_space();
        if (!done() && text[at] == '}') unbounded = true;
        else most = read_count();
        skip_space();
      }
      if (done() || text[at] != '}') fail("a repetition {m,n} is not closed", begin);
      ++at;
      if (!unbounded && most < least) fail("a repetition {m,n} whose n is less than its m", begin);
    }
    for (uint32_t i = 0; i < least; ++i) {
      count(element.size());
      sequence.insert(sequence.end(), element.begin(), element.end());
    }
    if (unbounded) {  // R ::= element R | nothing
      const uint32_t star = new_rule(owner, "repetition", {}, begin);
      Sequence again = element;
      again.push_back({true, star});
      count(again.size() + 2);
      rules[star] = {again, {}};
      sequence.push_back({true, star});
      return;
    }
    // Up to most - least more, each inside the one before: R1 ::= element R2 | nothing, ..., Rk ::= element | nothing.
    Sym inner{true, 0};
    bool has_inner = false;
    for (uint32_t i = least; i < most; ++i) {
      Sequence once = element;
      if (has_inner) once.push_back(inner);
      count(once.size() + 2);
      inner = {true, new_rule(owner, "repetition", {once, {}}, begin)};
      has_inner = true;
    }
    if (has_inner) sequence.push_back(inner);
  }

  Sequence sequence_of(const std::string& owner) {
    Sequence sequence;
    while (!done()) {
      const char c = text[at];
      if (c == '|' || c == ')') break;
      if (is_name_char(c) && at_rule_start()) break;
      const size_t first = sequence.size();
      const size_t begin = at;
      if (c == '"') {
        literal(sequence);
      } else if (c == '[') {
        character_class(sequence);
      } else if (c == '.') {
        ++at;
        count(1);
        sequence.push_back({false, add_class({{0, 0x10FFFF}}, begin)});
      } else if (c == '(') {
        if (++groups_open > kMostGrammarGroups) fail("groups nested more than " + std::to_string(kMostGrammarGroups) + " deep");
        ++at;
        skip_space();
        std::vector<Sequence> alternatives = alternatives_of(owner);
        --groups_open;
        if (done() || text[at] != ')') fail("a group is not closed", begin);
        ++at;
        count(1);
        sequence.push_back({true, new_rule(owner, "group", std::move(alternatives), begin)});
      } else if (is_name_char(c)) {
        const uint32_t id = rule_id(read_name());
        if (used_at[id] == std::string_view::npos) used_at[id] = begin;
        count(1);
        sequence.push_back({true, id});
      } else {
        fail("unexpected " + shown(c));
      }
      skip_space();
      while (!done() && std::string_view("*+?{").find(text[at]) != std::string_view::npos) {
        if (sequence.size() == first) fail("a repetition of nothing");
        repeat(sequence, first, owner);
        skip_space();
      }
    }
    return sequence;
  }

  std::vector<Sequence> alternatives_of(const std::string& owner) {
    std::vector<Sequence> alternatives{sequence_of(owner)};
    while (!done() && text[at] == '|') {
      ++at;
      skip_space();
      alternatives.push_back(sequence_of(owner));
    }
    return alternatives;
  }

  void read() {
    skip_space();
    if (done()) fail("the grammar is empty");
    while (!done()) {
      const size_t begin = at;
      if (!is_name_char(text[at])) fail("expected a rule's name, got " + shown(text[at]));
      const std::string name = read_name();
      skip_space();
      if (text.substr(at, 3) != "::=") fail("expected ::= after the rule name '" + name + "'");
      at += 3;
      skip_space();
      const uint32_t id = rule_id(name);
      if (defined_at[id] != std::string_view::npos) fail("rule '" + name + "' is defined twice", begin);
      defined_at[id] = begin;
      rules[id] = alternatives_of(name);
      if (!done() && text[at] == ')') fail("a ')' with no group open");
    }
  }

  // How a message names a rule: "rule 'x'", or "a group in rule 'x'".
  std::string label(uint32_t rule) const {
    const std::string named = "rule '" + names[owners[rule]] + "'";
    return kinds[rule] ? std::string("a ") + kinds[rule] + " in " + named : named;
  }

  void check() {
    for (uint32_t r = 0; r < names.size(); ++r)
      if (defined_at[r] == std::string_view::npos) fail("rule '" + names[r] + "' is used but not defined", used_at[r]);
    const auto root = ids.find("root");
    if (root == ids.end()) fail("no rule 'root' (the reply is what root derives)", 0);
    // Nullable (derives the empty text) and productive (derives some text), to a fixed point.
    const size_t count_rules = names.size();
    std::vector<char> nullable(count_rules, 0), productive(count_rules, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < count_rules; ++r)
        for (const Sequence& alternative : rules[r]) {
          const bool all_nullable = std::all_of(alternative.begin(), alternative.end(), [&](Sym s) { return s.is_rule && nullable[s.index]; });
          const bool all_productive = std::all_of(alternative.begin(), alternative.end(), [&](Sym s) { return !s.is_rule || productive[s.index]; });
          if (all_nullable && !nullable[r]) nullable[r] = 1, changed = true;
          if (all_productive && !productive[r]) productive[r] = 1, changed = true;
        }
    }
    // The rules root reaches: each way of writing them must be able to end, and none may begin with itself.
    std::vector<char> reached(count_rules, 0);
    std::vector<uint32_t> work{root->second};
    reached[root->second] = 1;
    while (!work.empty()) {
      const uint32_t r = work.back();
      work.pop_back();
      for (const Sequence& alternative : rules[r])
        for (Sym s : alternative) {
          if (!s.is_rule) continue;
          if (!productive[s.index]) fail(label(s.index) + " can never end: each way of writing it uses itself again", defined_at[s.index]);
          if (!reached[s.index]) reached[s.index] = 1, work.push_back(s.index);
        }
    }
    if (!productive[root->second]) fail("rule 'root' can never end: each way of writing it uses itself again", defined_at[root->second]);
    // Left recursion: a rule that can begin with itself (through rules that may be empty) with something
    // still to come after it, which a parse would open deeper and deeper. One that begins with itself only
    // as the last symbol of each way there (x* of a nullable x) comes back over the same stack, which
    // ReplyGrammar::open opens once.
    for (uint32_t r = 0; r < count_rules; ++r) {
      if (!reached[r]) continue;
      std::vector<char> seen(2 * count_rules, 0);  // [rule * 2 + grew]
      std::vector<std::pair<uint32_t, bool>> begins{{r, false}};
      while (!begins.empty()) {
        const auto [from, grew] = begins.back();
        begins.pop_back();
        for (const Sequence& alternative : rules[from])
          for (size_t i = 0; i < alternative.size(); ++i) {
            const Sym s = alternative[i];
            if (!s.is_rule) break;
            const bool grows = grew || i + 1 < alternative.size();
            if (s.index == r && grows)
              fail(label(r) + " is left-recursive (it can begin with itself): write it with a repetition", defined_at[r]);
            if (!seen[2 * s.index + grows]) seen[2 * s.index + grows] = 1, begins.emplace_back(s.index, grows);
            if (!nullable[s.index]) break;
          }
      }
    }
  }

  std::shared_ptr<ReplyGrammar> build() {
    auto grammar = std::shared_ptr<ReplyGrammar>(new ReplyGrammar());
    using Kind = ReplyGrammar::Symbol::Kind;
    grammar->alternatives_.resize(names.size());
    for (uint32_t r = 0; r < names.size(); ++r)
      for (const Sequence& alternative : rules[r]) {
        grammar->alternatives_[r].push_back(uint32_t(grammar->symbols_.size()));
        for (Sym s : alternative) grammar->symbols_.push_back({s.is_rule ? Kind::rule : Kind::characters, s.index});
        grammar->symbols_.push_back({Kind::end, 0});
      }
    grammar->classes_ = std::move(classes);
    grammar->rule_names_ = std::move(names);
    grammar->root_ = ids.at("root");
    return grammar;
  }
};

std::shared_ptr<const ReplyGrammar> ReplyGrammar::compile(std::string_view gbnf) {
  GrammarBuilder builder;
  builder.text = gbnf;
  builder.read();
  builder.check();
  std::shared_ptr<ReplyGrammar> grammar = builder.build();
  // The parses before any byte: root's alternatives opened down to their first classes.
  std::vector<std::vector<uint32_t>> starts, opened;
  for (uint32_t start : grammar->alternatives_[grammar->root_]) starts.push_back({start});
  const bool too_deep = grammar->open(std::move(starts), opened);
  const bool only_whole = std::all_of(opened.begin(), opened.end(), [](const std::vector<uint32_t>& parse) { return parse.empty(); });
  if (too_deep && only_whole)
    throw InputError("the grammar opens more than " + std::to_string(kMostGrammarDepth) +
                     " rules inside one another before its first character");
  grammar->start_parses_ = ReplyGrammar::encode_parses(opened);
  if (grammar->start_parses_ == std::vector<uint32_t>{0}) throw InputError("the grammar derives only the empty text, and a reply has at least one token");
  return grammar;
}

std::shared_ptr<const ReplyGrammar> ReplyGrammar::compile_cached(std::string_view gbnf) {
  static RecentlyCompiled<ReplyGrammar> recent;
  return recent.get(gbnf, [](std::string_view text) { return compile(text); });
}

}  // namespace tilefire
