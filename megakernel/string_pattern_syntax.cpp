// Parsing a JSON Schema pattern (string_pattern_syntax.h): a recursive-descent reader of ECMAScript's
// pattern grammar with the u flag, into a tree of classes, anchors, sequences, alternations and repeats.
#include "string_pattern_syntax.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string>

#include "string_pattern.h"
#include "tilefire/errors.h"

namespace tilefire::pattern_syntax {
namespace {

constexpr uint32_t kMostGroupNesting = 64;

CharSet normalized(CharSet set) {
  std::sort(set.begin(), set.end(), [](const CodeRange& a, const CodeRange& b) { return a.low < b.low; });
  CharSet out;
  for (const CodeRange& range : set) {
    if (!out.empty() && range.low <= out.back().high + 1) out.back().high = std::max(out.back().high, range.high);
    else out.push_back(range);
  }
  return out;
}

CharSet complement(const CharSet& set) {  // of a normalized set, within the code points
  CharSet out;
  uint32_t next = 0;
  for (const CodeRange& range : set) {
    if (range.low > next) out.push_back({next, range.low - 1});
    next = range.high + 1;
  }
  if (next <= kMostCodePoint) out.push_back({next, kMostCodePoint});
  return out;
}


// ECMAScript's classes (u flag, no i flag): \d, \w, \s (WhiteSpace and LineTerminator), and what . leaves out.
const CharSet kDigits = {{'0', '9'}};
const CharSet kWordCharacters = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CharSet kWhiteSpace = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                             {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const CharSet kLineTerminators = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}};

}  // namespace

std::vector<uint32_t> code_points(std::string_view text) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < text.size();) {
    const uint8_t lead = uint8_t(text[i]);
    const int length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    if ((lead >= 0x80 && lead < 0xC2) || lead > 0xF4 || i + size_t(length) > text.size())
      throw InputError("the pattern is not UTF-8");
    uint32_t code_point = length == 1 ? lead : lead & (0x7F >> length);
    for (int k = 1; k < length; ++k) {
      const uint8_t continuation = uint8_t(text[i + size_t(k)]);
      // RFC 3629's ranges: the second byte after E0, ED, F0 and F4 is narrower (no overlong forms, no
      // surrogates, nothing past U+10FFFF), every other continuation byte 80 to BF.
      const uint8_t low = k > 1 ? 0x80 : lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
      const uint8_t high = k > 1 ? 0xBF : lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
      if (continuation < low || continuation > high) throw InputError("the pattern is not UTF-8");
      code_point = code_point << 6 | (continuation & 0x3F);
    }
    out.push_back(code_point);
    i += size_t(length);
  }
  return out;
}

namespace {

std::string shown(uint32_t code_point) {  // a character of the pattern in a message
  if (code_point >= 0x20 && code_point < 0x7F) return std::string(1, char(code_point));
  char text[16];
  std::snprintf(text, sizeof text, "U+%04X", code_point);
  return text;
}

// A recursive-descent reader of ECMAScript's pattern grammar with the u flag (the subset in string_pattern.h).
class PatternParser {
 public:
  explicit PatternParser(std::string_view text) : text_(code_points(text)) {}

  Regex parse() {
    Regex regex = alternation();
    if (at_ < text_.size()) fail("a ')' that closes no group");
    return regex;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(what + " (at character " + std::to_string(at_) + " of the pattern)");
  }
  bool at_end() const { return at_ >= text_.size(); }
  bool peek(uint32_t c) const { return !at_end() && text_[at_] == c; }
  bool eat(uint32_t c) {
    if (!peek(c)) return false;
    ++at_;
    return true;
  }

  Regex alternation() {
    Regex first = sequence();
    if (!peek('|')) return first;
    Regex either;
    either.kind = Regex::Kind::alternation;
    either.parts.push_back(std::move(first));
    while (eat('|')) either.parts.push_back(sequence());
    return either;
  }

  Regex sequence() {
    Regex sequence;
    while (!at_end() && !peek('|') && !peek(')')) sequence.parts.push_back(term());
    return sequence;
  }

  Regex term() {
    const uint32_t c = text_[at_];
    Regex atom;
    bool anchor = false;
    switch (c) {
      case '^': case '$':
        ++at_;
        atom.kind = c == '^' ? Regex::Kind::line_start : Regex::Kind::line_end;
        anchor = true;
        break;
      case '(': atom = group(); break;
      case '.': ++at_; atom = Regex::of(complement(kLineTerminators)); break;
      case '[': atom = char_class(); break;
      case '\\': atom = atom_escape(); break;
      case '*': case '+': case '?': case '{': fail("nothing to repeat before '" + shown(c) + "'");
      case '}': case ']': fail("a lone '" + shown(c) + "' (a u-flag pattern writes it \\" + shown(c) + ")");
      default: ++at_; atom = Regex::of({{c, c}}); break;
    }
    uint32_t least = 0, most = 0;
    if (!quantifier(least, most)) return atom;
    if (anchor) fail("a quantifier after ^ or $");
    Regex repeat;
    repeat.kind = Regex::Kind::repeat;
    repeat.least = least;
    repeat.most = most;
    repeat.parts.push_back(std::move(atom));
    return repeat;
  }

  // Decimal digits (at least one), exactly: a class counted by them is held as lengths (string_pattern.h,
  // counted_class), and the NFA refuses a repeat counted past its size before spelling it out.
  uint32_t number() {
    if (at_end() || text_[at_] < '0' || text_[at_] > '9') fail("a '{' that begins no quantifier (a u-flag pattern writes it \\{)");
    uint64_t value = 0;
    while (!at_end() && text_[at_] >= '0' && text_[at_] <= '9') {
      value = value * 10 + uint64_t(text_[at_++] - '0');
      if (value >= kUnbounded) fail("a quantifier's count above " + std::to_string(kUnbounded - 1));
    }
    return uint32_t(value);
  }

  bool quantifier(uint32_t& least, uint32_t& most) {
    if (eat('*')) least = 0, most = kUnbounded;
    else if (eat('+')) least = 1, most = kUnbounded;
    else if (eat('?')) least = 0, most = 1;
    else if (eat('{')) {
      least = most = number();
      if (eat(',')) most = peek('}') ? kUnbounded : number();
      if (!eat('}')) fail("a '{' that begins no quantifier (a u-flag pattern writes it \\{)");
      if (least > most) fail("a quantifier {n,m} with n above m");
    } else {
      return false;
    }
    eat('?');  // lazy: the same strings match
    return true;
  }

  Regex group() {
    ++at_;  // (
    if (eat('?')) {
      if (peek('=') || peek('!')) fail("lookahead (?= and (?! is not supported");
      if (eat('<')) {
        if (peek('=') || peek('!')) fail("lookbehind (?<= and (?<! is not supported");
        const size_t name_start = at_;
        const auto name_character = [&](uint32_t c) {
          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || (at_ > name_start && c >= '0' && c <= '9');
        };
        while (!at_end() && name_character(text_[at_])) ++at_;
        const std::vector<uint32_t> name(text_.begin() + long(name_start), text_.begin() + long(at_));
        if (at_ == name_start || !eat('>')) fail("a group name must be ASCII letters, digits, _ and $, closed by '>'");
        if (!group_names_.insert(name).second) fail("a group name used twice");
      } else if (!eat(':')) {
        fail("'(?' begins no group Tilefire reads ((?:...) and (?<name>...) are)");
      }
    }
    if (++depth_ > kMostGroupNesting) fail("groups nest deeper than " + std::to_string(kMostGroupNesting));
    Regex inner = alternation();
    --depth_;
    if (!eat(')')) fail("a '(' is not closed");
    return inner;
  }

  // \d \D \w \W \s \S as a class; nullopt for any other escape.
  std::optional<CharSet> class_escape(uint32_t c) const {
    switch (c) {
      case 'd': return kDigits;
      case 'D': return complement(kDigits);
      case 'w': return kWordCharacters;
      case 'W': return complement(kWordCharacters);
      case 's': return kWhiteSpace;
      case 'S': return complement(kWhiteSpace);
      default: return std::nullopt;
    }
  }

  uint32_t hex_digits(size_t count) {
    uint32_t value = 0;
    for (size_t i = 0; i < count; ++i) {
      const uint32_t c = at_end() ? 0 : text_[at_];
      const int digit = c >= '0' && c <= '9' ? int(c - '0') : c >= 'a' && c <= 'f' ? int(c - 'a' + 10) : c >= 'A' && c <= 'F' ? int(c - 'A' + 10) : -1;
      if (digit < 0) fail("an escape expects " + std::to_string(count) + " hex digits");
      value = value * 16 + uint32_t(digit);
      ++at_;
    }
    return value;
  }

  // The character a character escape names (after the '\' and `c`, which at_ has passed).
  uint32_t character_escape(uint32_t c, bool in_class) {
    switch (c) {
      case 't': return 0x09;
      case 'n': return 0x0A;
      case 'v': return 0x0B;
      case 'f': return 0x0C;
      case 'r': return 0x0D;
      case '0':
        if (!at_end() && text_[at_] >= '0' && text_[at_] <= '9') fail("'\\0' followed by a digit (an octal escape) is not allowed with the u flag");
        return 0;
      case 'c': {
        const uint32_t letter = at_end() ? 0 : text_[at_];
        if (!((letter >= 'a' && letter <= 'z') || (letter >= 'A' && letter <= 'Z'))) fail("'\\c' expects a letter");
        ++at_;
        return letter % 32;
      }
      case 'x': return hex_digits(2);
      case 'u': {
        if (eat('{')) {
          uint32_t value = 0;
          const size_t first = at_;
          while (!peek('}')) {
            value = value * 16 + hex_digits(1);
            if (value > kMostCodePoint) fail("'\\u{...}' past U+10FFFF");
          }
          if (at_ == first) fail("'\\u{}' names no character");
          ++at_;
          return value;
        }
        const uint32_t value = hex_digits(4);
        // A high surrogate escaped before a low one is the one character they encode (as JavaScript reads it).
        if (value >= 0xD800 && value <= 0xDBFF && at_ + 5 < text_.size() && text_[at_] == '\\' && text_[at_ + 1] == 'u') {
          const size_t back = at_;
          at_ += 2;
          bool four = true;
          for (size_t i = 0; i < 4; ++i) {
            const uint32_t d = text_[at_ + i];
            four = four && ((d >= '0' && d <= '9') || (d >= 'a' && d <= 'f') || (d >= 'A' && d <= 'F'));
          }
          if (four) {
            const uint32_t low = hex_digits(4);
            if (low >= 0xDC00 && low <= 0xDFFF) return 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00);
          }
          at_ = back;
        }
        return value;
      }
      case '^': case '$': case '\\': case '.': case '*': case '+': case '?': case '(': case ')': case '[': case ']':
      case '{': case '}': case '|': case '/':
        return c;
      case '-':
        if (in_class) return c;
        break;
      case 'b':
        if (in_class) return 0x08;
        fail("'\\b' (a word boundary) is not supported");
      case 'B': fail("'\\B' (not a word boundary) is not supported");
      case 'k': fail("backreferences (\\k<name>) are not supported");
      case 'p': case 'P': fail("Unicode property escapes (\\p{...}) are not supported");
      default:
        if (c >= '1' && c <= '9') fail("backreferences (\\" + shown(c) + ") are not supported");
        break;
    }
    fail("'\\" + shown(c) + "' is not an escape a u-flag pattern takes");
  }

  Regex atom_escape() {
    ++at_;  // '\'
    if (at_end()) fail("the pattern ends in '\\'");
    const uint32_t c = text_[at_++];
    if (auto set = class_escape(c)) return Regex::of(std::move(*set));
    const uint32_t character = character_escape(c, false);
    return Regex::of({{character, character}});
  }

  // A class's member: a character (true) or a class escape's set (false, in `set`).
  bool class_atom(uint32_t& character, CharSet& set) {
    if (at_end()) fail("a '[' is not closed");
    const uint32_t c = text_[at_++];
    if (c != '\\') {
      character = c;
      return true;
    }
    if (at_end()) fail("the pattern ends in '\\'");
    const uint32_t escaped = text_[at_++];
    if (auto escape_set = class_escape(escaped)) {
      set = std::move(*escape_set);
      return false;
    }
    character = character_escape(escaped, true);
    return true;
  }

  Regex char_class() {
    ++at_;  // [
    const bool negated = eat('^');
    CharSet set;
    while (true) {
      if (at_end()) fail("a '[' is not closed");
      if (eat(']')) break;
      uint32_t first = 0, last = 0;
      CharSet first_set, last_set;
      const bool first_is_character = class_atom(first, first_set);
      if (peek('-') && at_ + 1 < text_.size() && text_[at_ + 1] != ']') {
        ++at_;  // -
        const bool last_is_character = class_atom(last, last_set);
        if (!first_is_character || !last_is_character) fail("a class range with \\d, \\w or \\s at an end");
        if (first > last) fail("a class range out of order (" + shown(first) + "-" + shown(last) + ")");
        set.push_back({first, last});
      } else if (first_is_character) {
        set.push_back({first, first});
      } else {
        set.insert(set.end(), first_set.begin(), first_set.end());
      }
    }
    set = normalized(std::move(set));
    return Regex::of(negated ? complement(set) : set);
  }

  std::vector<uint32_t> text_;
  size_t at_ = 0;
  uint32_t depth_ = 0;
  std::set<std::vector<uint32_t>> group_names_;
};

}  // namespace

bool contains(const CharSet& set, uint32_t code_point) {
  auto after = std::upper_bound(set.begin(), set.end(), code_point, [](uint32_t c, const CodeRange& r) { return c < r.low; });
  return after != set.begin() && std::prev(after)->high >= code_point;
}

Regex parse_pattern(std::string_view pattern) { return PatternParser(pattern).parse(); }

}  // namespace tilefire::pattern_syntax
