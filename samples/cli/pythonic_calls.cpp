#include "pythonic_calls.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace tilefire::cli {
namespace {

using nlohmann::json;

bool is_identifier_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `code` as UTF-8 (a surrogate or a code point past U+10FFFF: none, as Python's literal would not
// encode to UTF-8 either).
bool append_utf8(std::string& out, uint32_t code) {
  if ((code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return false;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return true;
}

// A recursive-descent reader of the call list. Each read_ function returns false where the text is not
// what it reads; `at_` is then of no use, since the whole text is then no call.
class PythonicReader {
 public:
  PythonicReader(std::string_view text, int most_nesting) : text_(text), most_nesting_(most_nesting) {}

  std::optional<json> calls() {
    json list = json::array();
    skip_whitespace();
    const bool read = take('[') && read_items(']', [&] {
                        json call;
                        if (!read_call(call)) return false;
                        list.push_back(std::move(call));
                        return true;
                      });
    if (!read) return std::nullopt;
    skip_whitespace();
    if (at_ != text_.size() || list.empty()) return std::nullopt;
    return list;
  }

 private:
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  bool take(char c) {
    if (peek() != c || at_ >= text_.size()) return false;
    ++at_;
    return true;
  }
  // Items up to `close` (at_ past the opening bracket), each read by read_item() and followed by a comma
  // but for the last, which may have one too; `last_comma` says whether it did.
  template <typename ReadItem>
  bool read_items(char close, ReadItem read_item, bool* last_comma = nullptr) {
    bool comma = false;
    skip_space();
    while (!take(close)) {
      if (!read_item()) return false;
      skip_space();
      comma = take(',');
      if (comma) {
        skip_space();
      } else if (peek() != close) {
        return false;
      }
    }
    if (last_comma) *last_comma = comma;
    return true;
  }

  // Around the list: whitespace alone (no comment, no line continued).
  void skip_whitespace() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) ++at_;
  }
  // Inside brackets Python lets lines break anywhere (a backslash before the break too), and a comment
  // runs to the line's end.
  void skip_space() {
    while (at_ < text_.size()) {
      if (text_[at_] == '\\' && at_ + 1 < text_.size() && text_[at_ + 1] == '\n') {
        at_ += 2;
      } else if (text_[at_] == '#') {
        while (at_ < text_.size() && text_[at_] != '\n' && text_[at_] != '\r') ++at_;
      } else if (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\f') {
        ++at_;
      } else {
        break;
      }
    }
  }
  bool read_identifier(std::string& name) {
    if (!is_identifier_start(peek())) return false;
    const size_t begin = at_;
    while (at_ < text_.size() && is_identifier_char(text_[at_])) ++at_;
    name = std::string(text_.substr(begin, at_ - begin));
    return true;
  }

  // name(key=value, ...): {"name": name, "arguments": {key: value, ...}}. Tool names may hold '-', which a
  // Python name cannot; a model that was shown such a tool writes it as given, so '-' is read in names.
  bool read_call(json& call) {
    const size_t begin = at_;
    while (at_ < text_.size() && (is_identifier_char(text_[at_]) || text_[at_] == '-')) ++at_;
    if (at_ == begin) return false;
    call = {{"name", std::string(text_.substr(begin, at_ - begin))}, {"arguments", json::object()}};
    skip_space();
    if (!take('(')) return false;
    json& arguments = call["arguments"];
    return read_items(')', [&] {
      std::string key;
      if (!read_identifier(key) || arguments.contains(key)) return false;  // a keyword given twice is Python's SyntaxError
      skip_space();
      if (!take('=')) return false;  // a positional argument: no name to pass it by
      skip_space();
      json value;
      if (!read_value(value, 1)) return false;
      arguments[key] = std::move(value);
      return true;
    });
  }

  bool read_value(json& value, int depth) {
    if (depth > most_nesting_) return false;
    const char c = peek();
    if (c == '\'' || c == '"' || string_prefix() > 0) return read_strings(value);
    if (c == '[' || c == '(') return read_sequence(value, depth, c == '[' ? ']' : ')');
    if (c == '{') return read_dict(value, depth);
    if (c == '-' || c == '+' || c == '.' || std::isdigit(static_cast<unsigned char>(c))) return read_number(value);
    std::string name;
    if (!read_identifier(name)) return false;
    if (name == "True" || name == "False") {
      value = name == "True";
    } else if (name == "None") {
      value = nullptr;
    } else {
      return false;  // a name or a call: not a literal
    }
    return true;
  }

  // [a, b] and (a, b): JSON lists. A tuple of one needs its comma; (a) is a, as in Python.
  bool read_sequence(json& value, int depth, char close) {
    ++at_;
    value = json::array();
    bool comma = false;
    const bool read = read_items(
        close,
        [&] {
          json item;
          if (!read_value(item, depth + 1)) return false;
          value.push_back(std::move(item));
          return true;
        },
        &comma);
    if (read && close == ')' && value.size() == 1 && !comma) {
      json only = std::move(value[0]);  // moved, not copied: (((x))) costs no more than x
      value = std::move(only);
    }
    return read;
  }

  bool read_dict(json& value, int depth) {
    ++at_;
    value = json::object();
    return read_items('}', [&] {
      json key;
      if (!read_value(key, depth + 1) || !key.is_string()) return false;  // a JSON object's keys are strings
      skip_space();
      if (!take(':')) return false;
      skip_space();
      json item;
      if (!read_value(item, depth + 1)) return false;
      value[key.get<std::string>()] = std::move(item);  // a later key wins, as in Python
      return true;
    });
  }

  // Python's int and float literals, with a sign, as JSON numbers: decimal ones written out for nlohmann
  // ("1." as "1.0", ".5" as "0.5", without underscores or leading zeros), which reads an int past 64
  // bits as a float (as a JSON parser would); 0x, 0o and 0b ints within 64 bits. A float that overflows
  // to infinity has no JSON number and is no call; so is a complex number.
  bool read_number(json& value) {
    bool negative = false;
    if (peek() == '-' || peek() == '+') {
      negative = text_[at_++] == '-';
      skip_space();  // "- 1" is -1 to Python
    }
    if (peek() == '0' && at_ + 1 < text_.size() && text_[at_ + 1] != '\0' && std::strchr("xXoObB", text_[at_ + 1]))
      return read_based_int(value, negative);
    std::string number = negative ? "-" : "";
    // Digits, each underscore between two of them left out: the count of digits.
    auto digits = [&] {
      size_t count = 0;
      while (at_ < text_.size()) {
        if (std::isdigit(static_cast<unsigned char>(text_[at_]))) {
          number += text_[at_++];
          ++count;
        } else if (text_[at_] == '_' && count > 0 && at_ + 1 < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_ + 1]))) {
          ++at_;
        } else {
          break;
        }
      }
      return count;
    };
    const size_t whole_begin = number.size();
    const size_t whole = digits();
    const std::string whole_digits = number.substr(whole_begin);
    bool is_float = false;
    if (take('.')) {
      is_float = true;
      if (whole == 0) number += '0';
      number += '.';
      if (digits() == 0) {
        if (whole == 0) return false;  // "." alone
        number += '0';
      }
    } else if (whole == 0) {
      return false;
    }
    if (peek() == 'e' || peek() == 'E') {
      is_float = true;
      number += text_[at_++];
      if (peek() == '-' || peek() == '+') number += text_[at_++];
      if (digits() == 0) return false;
    }
    if (is_identifier_char(peek())) return false;  // 2j, 1_ and the like
    // Python refuses an int of several digits that begins with 0 (01), unless all are zeros (00).
    if (!is_float && whole > 1 && whole_digits[0] == '0' && whole_digits.find_first_not_of('0') != std::string::npos) return false;
    // JSON allows no leading zeros: strip them from the whole part.
    const size_t sign = negative ? 1 : 0;
    size_t zeros = sign;
    while (zeros + 1 < number.size() && number[zeros] == '0' && std::isdigit(static_cast<unsigned char>(number[zeros + 1]))) ++zeros;
    number.erase(sign, zeros - sign);
    value = json::parse(number, nullptr, false);
    return !value.is_discarded() && (!value.is_number_float() || std::isfinite(value.get<double>()));
  }

  // 0x1F, 0o17, 0b101 (underscores between digits, or after the prefix), within 64 bits.
  bool read_based_int(json& value, bool negative) {
    const char base_letter = static_cast<char>(std::tolower(static_cast<unsigned char>(text_[at_ + 1])));
    const unsigned base = base_letter == 'x' ? 16 : base_letter == 'o' ? 8 : 2;
    at_ += 2;
    uint64_t magnitude = 0;
    size_t count = 0;
    while (at_ < text_.size()) {
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text_[at_])));
      const int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
      if (c == '_' && at_ + 1 < text_.size() && std::isxdigit(static_cast<unsigned char>(text_[at_ + 1]))) {
        ++at_;
        continue;
      }
      if (digit < 0 || static_cast<unsigned>(digit) >= base) break;
      if (magnitude > (UINT64_MAX - static_cast<uint64_t>(digit)) / base) return false;  // past 64 bits
      magnitude = magnitude * base + static_cast<uint64_t>(digit);
      ++count;
      ++at_;
    }
    if (count == 0 || is_identifier_char(peek())) return false;
    if (!negative) {
      value = magnitude;
    } else if (magnitude <= static_cast<uint64_t>(INT64_MAX) + 1) {
      value = magnitude == static_cast<uint64_t>(INT64_MAX) + 1 ? INT64_MIN : -static_cast<int64_t>(magnitude);
    } else {
      return false;
    }
    return true;
  }

  // The length of a string's prefix at at_ that makes it a str (u, r, in either case), 0 for none. A
  // bytes or f-string's prefix (b, f, ...) is none: those are no JSON string, or no literal.
  size_t string_prefix() const {
    if (at_ + 1 >= text_.size() || (text_[at_ + 1] != '\'' && text_[at_ + 1] != '"')) return 0;
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(text_[at_])));
    return p == 'u' || p == 'r' ? 1 : 0;
  }

  // One string literal or several side by side ('a' "b" is 'ab', as Python joins them).
  bool read_strings(json& value) {
    std::string joined;
    do {
      if (!read_string(joined)) return false;
      skip_space();
    } while (peek() == '\'' || peek() == '"' || string_prefix() > 0);
    value = std::move(joined);
    return true;
  }

  bool read_string(std::string& out) {
    // A raw string keeps its backslashes: one before a quote keeps the quote from ending it, and stays.
    const bool raw = string_prefix() > 0 && std::tolower(static_cast<unsigned char>(text_[at_])) == 'r';
    at_ += string_prefix();
    const char quote = text_[at_];
    const bool triple = text_.substr(at_, 3) == std::string(3, quote);
    at_ += triple ? 3 : 1;
    while (true) {
      if (at_ >= text_.size()) return false;
      const char c = text_[at_];
      if (c == quote && (!triple || text_.substr(at_, 3) == std::string(3, quote))) {
        at_ += triple ? 3 : 1;
        return true;
      }
      if ((c == '\n' || c == '\r') && !triple) return false;  // a quoted string ends on its line
      if (c != '\\') {
        out += c;
        ++at_;
        continue;
      }
      if (raw) {
        if (at_ + 1 >= text_.size()) return false;
        out += text_.substr(at_, 2);
        at_ += 2;
        continue;
      }
      if (!read_escape(out)) return false;
    }
  }

  // A backslash's escape (at_ on the backslash). An escape Python does not know keeps its backslash.
  bool read_escape(std::string& out) {
    if (at_ + 1 >= text_.size()) return false;
    const char e = text_[at_ + 1];
    at_ += 2;
    switch (e) {
      case '\n': return true;  // a line continued
      case '\\': out += '\\'; return true;
      case '\'': out += '\''; return true;
      case '"': out += '"'; return true;
      case 'n': out += '\n'; return true;
      case 't': out += '\t'; return true;
      case 'r': out += '\r'; return true;
      case 'b': out += '\b'; return true;
      case 'f': out += '\f'; return true;
      case 'v': out += '\v'; return true;
      case 'a': out += '\a'; return true;
      case 'x': return read_hex(out, 2);
      case 'u': return read_hex(out, 4);
      case 'U': return read_hex(out, 8);
      case 'N': return false;  // a character by its Unicode name: no table of names here, so no call
      default: break;
    }
    if (e >= '0' && e <= '7') {  // octal: up to three digits
      uint32_t code = static_cast<uint32_t>(e - '0');
      for (int k = 0; k < 2 && at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '7'; ++k) code = code * 8 + static_cast<uint32_t>(text_[at_++] - '0');
      return append_utf8(out, code);
    }
    out += '\\';
    out += e;
    return true;
  }

  bool read_hex(std::string& out, int count) {
    if (at_ + static_cast<size_t>(count) > text_.size()) return false;
    uint32_t code = 0;
    for (int k = 0; k < count; ++k) {
      const char h = text_[at_++];
      if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
      code = code * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
    }
    return append_utf8(out, code);
  }

  std::string_view text_;
  int most_nesting_;
  size_t at_ = 0;
};

}  // namespace

std::optional<json> pythonic_calls(std::string_view text, int most_nesting) {
  if (text.find('\r') == std::string_view::npos) return PythonicReader(text, most_nesting).calls();
  // Python reads its source's line ends as "\n", in strings too: "\r\n" and a lone "\r" alike.
  std::string lines;
  lines.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      lines += text[i];
    } else if (i + 1 >= text.size() || text[i + 1] != '\n') {
      lines += '\n';
    }
  }
  return PythonicReader(lines, most_nesting).calls();
}

}  // namespace tilefire::cli
