// Python's printf-style formatting (text % values), for the % operator of strings and the format filter
// (graph/jinja_syntax.h, percent_format): %s %r %a %d %i %u %o %x %X %e %E %f %F %g %G %c and %%, with
// mapping keys, the flags # 0 - space +, widths and precisions (* too). The digits of numbers are C's
// printf's, which are Python's for these conversions; signs, prefixes, precisions of integers and padding
// follow Python, where C differs (%#o is 0o10, %.0d of 0 is 0, %05.3d pads with zeros, NaN has no sign).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "graph/jinja_syntax.h"
#include "graph/unicode.h"

namespace tilefire::jinja {
namespace {

struct Spec {
  std::string flags;
  int64_t width = -1, precision = -1;
  char conversion = 0;
};

// Python's ascii(): repr with every character past ASCII escaped.
std::string ascii_repr(const Value& value) {
  std::string out;
  for (char32_t c : code_points(to_repr(value))) {
    char escape[16];
    if (c < 0x80) out += char(c);
    else {
      std::snprintf(escape, sizeof escape, c <= 0xff ? "\\x%02x" : c <= 0xffff ? "\\u%04x" : "\\U%08x", unsigned(c));
      out += escape;
    }
  }
  return out;
}

// A string conversion: the precision cuts and the width pads, by code point.
std::string pad_text(const std::string& text, const Spec& spec) {
  std::u32string points = code_points(text);
  if (spec.precision >= 0 && points.size() > size_t(spec.precision)) points.resize(size_t(spec.precision));
  const size_t width = spec.width > 0 ? size_t(spec.width) : 0;
  if (width > kMaxStringBytes) throw ValueError("a % format's width makes a string past 64 MiB");
  std::u32string padding(width > points.size() ? width - points.size() : 0, U' ');
  return spec.flags.find('-') != std::string::npos ? utf8(points + padding) : utf8(padding + points);
}

// C's printf of one number, without the width (Python pads in its own way, below).
template <typename Number>
std::string printf_body(const std::string& flags, int64_t precision, const char* length, char conversion, Number number) {
  if (precision > 1000) throw ValueError("a % format's precision is too large");
  char format[32];  // %, a flag, .precision, ll, the conversion
  if (precision >= 0) std::snprintf(format, sizeof format, "%%%s.%lld%s%c", flags.c_str(), static_cast<long long>(precision), length, conversion);
  else std::snprintf(format, sizeof format, "%%%s%s%c", flags.c_str(), length, conversion);
  const int size = std::snprintf(nullptr, 0, format, number);
  std::string out(size_t(size), '\0');
  std::snprintf(out.data(), out.size() + 1, format, number);
  return out;
}

bool has(const Spec& spec, char flag) { return spec.flags.find(flag) != std::string::npos; }

// Python's padding of a number to the width: spaces before it, or after it with '-', or with '0' zeros
// between its sign (and 0x prefix) and its digits; an infinity and a NaN too.
std::string pad_number(const std::string& sign_and_prefix, const std::string& digits, const Spec& spec) {
  const size_t width = spec.width > 0 ? size_t(spec.width) : 0;
  if (width > kMaxStringBytes) throw ValueError("a % format's width makes a string past 64 MiB");
  const size_t used = sign_and_prefix.size() + digits.size();
  if (used >= width) return sign_and_prefix + digits;
  if (has(spec, '-')) return sign_and_prefix + digits + std::string(width - used, ' ');
  if (has(spec, '0')) return sign_and_prefix + std::string(width - used, '0') + digits;
  return std::string(width - used, ' ') + sign_and_prefix + digits;
}

std::string sign_of(bool negative, const Spec& spec) { return negative ? "-" : has(spec, '+') ? "+" : has(spec, ' ') ? " " : ""; }

// %d %i %u %o %x %X as Python writes them: the precision is a least number of digits (0 is "0" even at
// .0), # gives 0o, 0x or 0X, and the width pads after the sign and prefix with '0'.
std::string integer_text(int64_t integer, const Spec& spec) {
  const char c = spec.conversion == 'i' || spec.conversion == 'u' ? 'd' : spec.conversion;
  const unsigned long long magnitude = integer < 0 ? 0ull - static_cast<unsigned long long>(integer) : static_cast<unsigned long long>(integer);
  std::string digits = printf_body("", -1, "ll", c, magnitude);
  if (spec.precision > int64_t(kMaxStringBytes)) throw ValueError("a % format's precision is too large");
  if (spec.precision > int64_t(digits.size())) digits.insert(0, size_t(spec.precision) - digits.size(), '0');
  const std::string prefix = c != 'd' && has(spec, '#') ? (c == 'o' ? "0o" : c == 'x' ? "0x" : "0X") : "";
  return pad_number(sign_of(integer < 0, spec) + prefix, digits, spec);
}

// %e %E %f %F %g %G: C's digits (its output for these is Python's), Python's padding; a NaN has no sign.
std::string real_text(double value, const Spec& spec) {
  if (std::isnan(value)) value = std::fabs(value);
  std::string flags;
  if (has(spec, '#')) flags += '#';
  std::string body = printf_body(flags, spec.precision, "", spec.conversion, std::fabs(value));
  return pad_number(sign_of(std::signbit(value), spec), body, spec);
}

std::string convert(const Spec& spec, const Value& value) {
  const char c = spec.conversion;
  switch (c) {
    case 's': return pad_text(to_str(value), spec);
    case 'r': return pad_text(to_repr(value), spec);
    case 'a': return pad_text(ascii_repr(value), spec);
    case 'c': {
      if (value.is_string()) {
        if (code_points(value.text).size() != 1) throw ValueError("%c requires an int or a unicode character, not a string of length " + std::to_string(code_points(value.text).size()));
        return pad_text(value.text, Spec{spec.flags, spec.width, -1, 's'});
      }
      if (!value.is_integral() || value.as_integer() < 0 || value.as_integer() > 0x10FFFF) throw ValueError("%c arg not in range(0x110000)");
      std::string text;
      unicode::append_utf8(char32_t(value.as_integer()), text);
      return pad_text(text, Spec{spec.flags, spec.width, -1, 's'});
    }
    case 'd':
    case 'i':
    case 'u': {
      if (!value.is_number()) throw ValueError("%" + std::string(1, c) + " format: a real number is required, not " + type_name(value));
      int64_t integer = value.as_integer();
      if (value.type == Value::Type::real) {  // Python's int() of it
        if (!std::isfinite(value.real)) throw ValueError("cannot convert float " + std::string(std::isnan(value.real) ? "NaN" : "infinity") + " to integer");
        if (!(std::fabs(value.real) < 9223372036854775808.0)) throw ValueError("% format: the integer is past 64 bits");
        integer = int64_t(std::trunc(value.real));
      }
      return integer_text(integer, spec);
    }
    case 'o':
    case 'x':
    case 'X':
      if (!value.is_integral()) throw ValueError("%" + std::string(1, c) + " format: an integer is required, not " + type_name(value));
      return integer_text(value.as_integer(), spec);
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      if (!value.is_number()) throw ValueError("must be real number, not " + type_name(value));
      return real_text(value.as_real(), spec);
    default: throw ValueError("unsupported format character '" + std::string(1, c) + "' in a % format");
  }
}

}  // namespace

Value percent_format(const Value& format, const Value& values) {
  if (format.is_markup()) throw ValueError("% formatting of escape's or safe's result (a Markup) is not supported in chat templates");
  // Python: a tuple gives the values; a dict is looked up by %(key)s (and is one value to the others);
  // anything else is one value.
  const List positional = values.type == Value::Type::tuple ? *values.items : List{values};
  const Dict* mapping = values.is_mapping() ? values.dict.get() : nullptr;
  size_t next = 0;
  const auto take = [&]() -> const Value& {
    if (next >= positional.size()) throw ValueError("not enough arguments for format string");
    return positional[next++];
  };
  const std::string& text = format.text;
  std::string out;
  bool used_mapping = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) throw ValueError("incomplete format");
    Spec spec;
    const Value* keyed = nullptr;
    if (text[i] == '(') {
      if (!mapping) throw ValueError("format requires a mapping");
      size_t depth = 1, start = ++i;
      while (i < text.size() && depth > 0) {
        if (text[i] == '(') ++depth;
        if (text[i] == ')') --depth;
        ++i;
      }
      if (depth > 0) throw ValueError("incomplete format key");
      const std::string key = text.substr(start, i - 1 - start);
      keyed = mapping->find(key);
      if (!keyed) throw ValueError("KeyError: '" + key + "'");
      used_mapping = true;
      next = positional.size();  // the dict as a positional value is gone once a key is used (Python)
    }
    while (i < text.size() && std::string("#0- +").find(text[i]) != std::string::npos) {
      if (spec.flags.find(text[i]) == std::string::npos) spec.flags += text[i];
      ++i;
    }
    const auto number = [&](int64_t& field) {
      if (i < text.size() && text[i] == '*') {
        const Value& given = take();
        if (!given.is_integral()) throw ValueError("* wants int");
        field = given.as_integer();
        ++i;
        return;
      }
      if (i >= text.size() || !std::isdigit(static_cast<unsigned char>(text[i]))) return;
      field = 0;
      for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
        if (field > int64_t(kMaxStringBytes)) throw ValueError("a % format's width or precision is too large");
        field = field * 10 + (text[i] - '0');
      }
    };
    number(spec.width);
    if (spec.width < -1) {  // *: a negative width left-justifies
      spec.flags += '-';
      spec.width = -spec.width;
    }
    if (i < text.size() && text[i] == '.') {
      ++i;
      spec.precision = 0;
      number(spec.precision);
      if (spec.precision < 0) spec.precision = 0;  // a negative * precision is none, in Python
    }
    while (i < text.size() && (text[i] == 'h' || text[i] == 'l' || text[i] == 'L')) ++i;  // ignored, as Python does
    if (i == text.size()) throw ValueError("incomplete format");
    spec.conversion = text[i];
    if (spec.conversion == '%') {  // %% alone; with a key, flags, a width or a precision Python refuses it
      if (keyed || !spec.flags.empty() || spec.width >= 0 || spec.precision >= 0) throw ValueError("unsupported format character '%' (0x25)");
      out += '%';
      continue;
    }
    out += convert(spec, keyed ? *keyed : take());
    if (out.size() > kMaxStringBytes) throw ValueError("a % format makes a string past 64 MiB");
  }
  if (!mapping && !used_mapping && next < positional.size()) throw ValueError("not all arguments converted during string formatting");
  return Value::of(std::move(out));
}

}  // namespace tilefire::jinja
