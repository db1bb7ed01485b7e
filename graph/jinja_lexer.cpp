// The lexer of chat templates: Jinja2's, with the settings transformers uses (trim_blocks, lstrip_blocks).
#include <cctype>
#include <cstdint>

#include "graph/jinja_syntax.h"
#include "graph/unicode.h"
#include "tilefire/errors.h"

namespace tilefire::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Where Python white space (str.isspace: what Jinja2's `-` strips and its regexes' \s match) ends that
// starts at text[from].
size_t skip_python_space(std::string_view text, size_t from) { return unicode::run_end(text, from, is_python_space); }

// Where the Python white space that ends text[begin, end) begins (str.rstrip()).
size_t rstrip_python_space(std::string_view text, size_t begin, size_t end) {
  return unicode::run_start(text, begin, end, is_python_space);
}
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Jinja2 reads the source with every line break as "\n" and without its last trailing newline
// (keep_trailing_newline is off).
std::string normalise_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin) : src_(normalise_newlines(source)), origin_(origin) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = next_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(std::move(text), pos_);
        pos_ = tag;
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char control = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (control == '-') {
        text.resize(rstrip_python_space(text, 0, text.size()));
      } else if (kind != '{' && control != '+') {
        lstrip_block(text, pos_, tag);
      }
      emit_text(std::move(text), pos_);
      pos_ = tag + 2 + ((control == '-' || control == '+') ? 1 : 0);
      if (kind == '#') {
        comment(tag);
      } else {
        tag_tokens(kind == '%', tag);
      }
    }
    tokens_.push_back({Token::Type::end, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& message) const {
    throw InputError(origin_ + ": line " + std::to_string(line_at(at)) + ": " + message);
  }

  int line_at(size_t at) const {
    if (at < line_pos_) {  // an earlier position (an error at a tag's start): count again
      line_pos_ = 0;
      line_ = 1;
    }
    while (line_pos_ < at && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }

  size_t next_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // lstrip_blocks: white space (Python's, but for "\n") between the start of a line and a block or
  // comment tag goes.
  void lstrip_block(std::string& text, size_t text_start, size_t tag) const {
    const size_t newline = src_.rfind('\n', tag == 0 ? 0 : tag - 1);
    const size_t line = newline == std::string::npos || newline < text_start ? text_start : newline + 1;
    if (line == text_start && !(text_start == 0 || src_[text_start - 1] == '\n')) return;  // not at a line's start
    if (skip_python_space(std::string_view(src_).substr(0, tag), line) == tag) text.resize(line - text_start);
  }

  void emit_text(std::string text, size_t at) {
    if (strip_next_) {
      text.erase(0, skip_python_space(text, 0));
      strip_next_ = false;
    }
    if (!text.empty()) tokens_.push_back({Token::Type::text, std::move(text), line_at(at)});
  }

  // After a block or comment tag: "-" strips the whitespace that follows; otherwise trim_blocks drops one
  // newline, unless the tag ends with "+".
  void after_tag(char control) {
    if (control == '-') {
      strip_next_ = true;
    } else if (control != '+' && trim_blocks_here_ && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  void comment(size_t tag) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(tag, "a comment {# is not closed");
    const char control = end > pos_ ? src_[end - 1] : '\0';
    pos_ = end + 2;
    trim_blocks_here_ = true;
    after_tag(control == '-' || control == '+' ? control : '\0');
  }

  void tag_tokens(bool block, size_t tag) {
    const size_t first_token = tokens_.size();
    tokens_.push_back({block ? Token::Type::block_begin : Token::Type::variable_begin, "", line_at(tag)});
    int depth = 0;  // brackets open: "}}" inside a dict literal does not end the tag
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) fail(tag, std::string("a tag ") + (block ? "{%" : "{{") + " is not closed");
      const char end_char = block ? '%' : '}';
      if (depth == 0) {
        for (const char control : {'\0', '-', '+'}) {
          const size_t at = pos_ + (control ? 1 : 0);
          if (control && (pos_ >= src_.size() || src_[pos_] != control)) continue;
          if (at + 1 < src_.size() && src_[at] == end_char && src_[at + 1] == '}') {
            if (control == '+' && !block) continue;
            pos_ = at + 2;
            tokens_.push_back({block ? Token::Type::block_end : Token::Type::variable_end, "", line_at(at)});
            const bool raw_begins = block && tokens_.size() == first_token + 3 && tokens_[first_token + 1].type == Token::Type::name &&
                                    tokens_[first_token + 1].value == "raw";
            if (raw_begins && control == '+') fail(tag, "{% raw +%} is not a raw block in Jinja2 (it reads it as an unknown tag 'raw')");
            trim_blocks_here_ = block && !raw_begins;  // Jinja2 keeps the newline after {% raw %}
            after_tag(control);
            if (raw_begins) {
              tokens_.resize(first_token);
              raw(tag);
            }
            return;
          }
        }
      }
      const char c = src_[pos_];
      if (c == '\'' || c == '"') {
        string_literal(c);
      } else if (is_digit(c)) {
        number();
      } else if (is_name_start(c)) {
        const size_t start = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        tokens_.push_back({Token::Type::name, src_.substr(start, pos_ - start), line_at(start)});
      } else {
        static const char* const operators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                                ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        const char* matched = nullptr;
        for (const char* op : operators) {
          if (src_.compare(pos_, std::char_traits<char>::length(op), op) == 0) {
            matched = op;
            break;
          }
        }
        if (!matched) {
          if (static_cast<unsigned char>(c) >= 0x80) {  // a whole character, not its first byte
            size_t end = pos_ + 1;
            while (end < src_.size() && (static_cast<unsigned char>(src_[end]) & 0xC0) == 0x80 && end - pos_ < 4) ++end;
            fail(pos_, "unexpected character '" + src_.substr(pos_, end - pos_) + "' in a tag (names are ASCII letters, digits and _ here)");
          }
          fail(pos_, std::string("unexpected character '") + c + "' in a tag");
        }
        const std::string op = matched;
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back({Token::Type::op, op, line_at(pos_)});
        pos_ += op.size();
      }
    }
  }

  // {% raw %} ... {% endraw %}: the text between, untouched.
  void raw(size_t tag) {
    size_t search = pos_;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) fail(tag, "{% raw %} has no {% endraw %}");
      size_t p = open + 2;
      const char control = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : '\0';
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      char end_control = '\0';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_control = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) fail(open, "a malformed {% endraw %}");
      std::string text = src_.substr(pos_, open - pos_);
      if (control == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (control != '+') {
        lstrip_block(text, pos_, open);
      }
      emit_text(std::move(text), pos_);
      pos_ = p + 2;
      trim_blocks_here_ = true;
      after_tag(end_control);
      return;
    }
  }

  // Jinja2's number tokens: a float first ((\d+_)*\d+ then a fraction, an exponent or both; never right
  // after a '.', so that a.0.1 is a[0][1]), else an integer (0b, 0o or 0x digits, a decimal without a
  // leading zero, or zeros). Underscores go between digits; the token's text has them taken out.
  void number() {
    const size_t start = pos_;
    const auto digit_run = [&](size_t p, bool (*digit)(char)) {  // the end of (_?digit)+ or digit(_?digit)*
      size_t q = p;
      while (q < src_.size() && (digit(src_[q]) || (src_[q] == '_' && q > p && q + 1 < src_.size() && digit(src_[q + 1])))) ++q;
      return q;
    };
    const auto decimal = [](char c) { return c >= '0' && c <= '9'; };
    size_t end = start;
    bool real = false;
    if (start == 0 || src_[start - 1] != '.') {
      const size_t whole = digit_run(start, decimal);
      size_t p = whole;
      const bool fraction = p + 1 < src_.size() && src_[p] == '.' && decimal(src_[p + 1]);
      if (fraction) p = digit_run(p + 1, decimal);
      size_t exponent_end = p;
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && decimal(src_[q])) exponent_end = digit_run(q, decimal);
      }
      if (fraction || exponent_end > p) {
        real = true;
        end = exponent_end;
      }
    }
    if (!real) {
      const char prefix = start + 1 < src_.size() ? char(std::tolower(static_cast<unsigned char>(src_[start + 1]))) : '\0';
      bool (*digit)(char) = nullptr;
      if (src_[start] == '0' && prefix == 'b') digit = [](char c) { return c == '0' || c == '1'; };
      if (src_[start] == '0' && prefix == 'o') digit = [](char c) { return c >= '0' && c <= '7'; };
      if (src_[start] == '0' && prefix == 'x') digit = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
      size_t first = start + 2;
      if (first < src_.size() && src_[first] == '_') ++first;  // 0x_1F: an underscore may follow the prefix
      if (digit && first < src_.size() && digit(src_[first])) {
        end = digit_run(first, digit);
      } else if (src_[start] == '0') {
        end = digit_run(start, [](char c) { return c == '0'; });
      } else {
        end = digit_run(start, decimal);
      }
    }
    pos_ = end;
    std::string text;
    for (size_t i = start; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back({real ? Token::Type::real : Token::Type::integer, text, line_at(start)});
  }

  // A string literal with Python's escapes (Jinja2 decodes it with "unicode-escape"); an unknown escape
  // keeps its backslash.
  void string_literal(char quote) {
    const size_t start = pos_++;
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) fail(start, "a string literal is not closed");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos_ >= src_.size()) fail(start, "a string literal is not closed");
      const char e = src_[pos_++];
      auto hex = [&](int count) {
        uint32_t v = 0;
        for (int i = 0; i < count; ++i) {
          if (pos_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos_]))) fail(start, "a truncated \\x, \\u or \\U escape");
          const char h = src_[pos_++];
          v = v * 16 + uint32_t(is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) fail(start, "an escape names no character");
        unicode::append_utf8(char32_t(v), value);
      };
      switch (e) {
        case '\n': break;  // a line continuation
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'n': value += '\n'; break;
        case 'r': value += '\r'; break;
        case 't': value += '\t'; break;
        case 'v': value += '\v'; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        case 'N': fail(start, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = uint32_t(e - '0');
            for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++i) v = v * 8 + uint32_t(src_[pos_++] - '0');
            unicode::append_utf8(char32_t(v), value);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    tokens_.push_back({Token::Type::string, std::move(value), line_at(start)});
  }

  std::string src_;
  const std::string& origin_;
  size_t pos_ = 0;
  mutable size_t line_pos_ = 0;  // line_ counted up to here
  mutable int line_ = 1;
  bool strip_next_ = false;
  bool trim_blocks_here_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const std::string& origin) { return Lexer(source, origin).run(); }

}  // namespace tilefire::jinja
