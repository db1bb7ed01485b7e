// The number filters of chat templates (graph/jinja_filters.h): int, float, abs, round and sum, with
// Python's results. Python's integers have no bound and Tilefire's have 64 bits, so a result past them is
// an error, never a wrapped or rounded number.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "graph/jinja_filters.h"
#include "graph/unicode.h"

namespace tilefire::jinja {
namespace {

[[noreturn]] void too_large(const char* filter) {
  throw ValueError(std::string(filter) + ": the integer is past 64 bits (Python's integers have no bound; Tilefire's have 64 bits)");
}

// Python's digits with single underscores between them: "1_000" is 1000. Empty when `text` is not that.
std::string without_underscores(const std::string& text, size_t begin) {
  std::string digits;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '_' && i > begin && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(text[i + 1])))
      continue;
    if (!std::isdigit(static_cast<unsigned char>(c))) return "";
    digits += c;
  }
  return digits;
}

enum class Parsed { no, yes, too_large };

// Python's int(text, 10): white space around, a sign, digits with single underscores between them.
Parsed parse_integer(const std::string& given, int64_t& out) {
  const std::string text = strip(given, nullptr, true, true);
  const size_t begin = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  const std::string digits = without_underscores(text, begin);
  if (digits.empty()) return Parsed::no;
  uint64_t magnitude = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  const bool negative = text[0] == '-';
  if (error == std::errc::result_out_of_range || magnitude > uint64_t(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0))
    return Parsed::too_large;
  out = negative ? int64_t(0 - magnitude) : int64_t(magnitude);
  return Parsed::yes;
}

// Python's float(text): [sign] digits [. digits] [e [sign] digits], or inf, infinity, nan; white space
// around it and single underscores between digits allowed. Hexadecimal is not (strtod would take it).
bool parse_real(std::string text, double& out) {
  text = strip(text, nullptr, true, true);
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool between_digits = i > 0 && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (text[i] == '_' && between_digits) continue;
    digits += text[i];
  }
  std::string word;
  for (char c : digits) {
    if (c != '+' && c != '-') word += char(std::tolower(static_cast<unsigned char>(c)));
  }
  const bool special = word == "inf" || word == "infinity" || word == "nan";
  size_t i = 0, mantissa = 0;
  if (i < digits.size() && (digits[i] == '+' || digits[i] == '-')) ++i;
  if (special) {
    if (digits.size() - i != word.size()) return false;  // one sign at most
  } else {
    for (; i < digits.size() && std::isdigit(static_cast<unsigned char>(digits[i])); ++i) ++mantissa;
    if (i < digits.size() && digits[i] == '.') {
      for (++i; i < digits.size() && std::isdigit(static_cast<unsigned char>(digits[i])); ++i) ++mantissa;
    }
    if (mantissa == 0) return false;
    if (i < digits.size() && (digits[i] == 'e' || digits[i] == 'E')) {
      ++i;
      if (i < digits.size() && (digits[i] == '+' || digits[i] == '-')) ++i;
      size_t exponent = 0;
      for (; i < digits.size() && std::isdigit(static_cast<unsigned char>(digits[i])); ++i) ++exponent;
      if (exponent == 0) return false;
    }
    if (i != digits.size()) return false;
  }
  char* end = nullptr;
  out = std::strtod(digits.c_str(), &end);  // HUGE_VAL past the range, as Python's inf
  return end == digits.c_str() + digits.size();
}

// int() and float() of undefined fail in Jinja2 (Undefined's __int__ raises); of a string with digits
// other than ASCII's, Python reads them ("٣" is 3) and Tilefire does not.
void require_defined_number_input(const Value& input, const char* filter) {
  if (input.is_undefined()) throw ValueError(input.text.empty() ? "an undefined value was used" : input.text);
  if (!input.is_string()) return;
  for (unsigned char byte : input.text) {
    if (byte < 0x80) continue;
    for (char32_t c : code_points(input.text)) {
      if (c >= 0x80 && unicode::is_number(c))
        throw ValueError(std::string(filter) + " of a string with non-ASCII digits is not supported (Python reads them; Tilefire reads 0-9)");
    }
    return;
  }
}

// Python's int() of a float: toward zero; an error past 64 bits (Python's OverflowError for infinity);
// false for NaN (Python's ValueError, which the int filter turns into its default).
bool truncate(double value, int64_t& out, const char* filter) {
  if (std::isnan(value)) return false;
  if (!(std::fabs(value) < 9223372036854775808.0)) too_large(filter);
  out = int64_t(std::trunc(value));
  return true;
}

// Python's round(value, digits) of a float: the decimal nearest the exact binary value, ties to even, read
// back as the nearest float. glibc prints a double's exact decimal expansion, so the rounding is done on it.
double round_decimal(double value, int64_t digits) {
  if (!std::isfinite(value) || value == 0) return value;
  if (digits > 400) return value;                     // finer than any double's last digit
  if (digits < -400) return std::copysign(0.0, value);  // coarser than any double
  std::vector<char> buffer(1500);
  const int length = std::snprintf(buffer.data(), buffer.size(), "%.1100f", std::fabs(value));
  const std::string exact(buffer.data(), size_t(length));
  const size_t point = exact.find('.');
  std::string all = exact.substr(0, point) + exact.substr(point + 1);  // the digits, the point after `point` of them
  const int64_t kept = int64_t(point) + digits;
  if (kept >= int64_t(all.size())) return value;
  if (kept < 0) return std::copysign(0.0, value);
  const char first_dropped = all[size_t(kept)];
  const bool rest_nonzero = all.find_first_not_of('0', size_t(kept) + 1) != std::string::npos;
  const bool last_kept_odd = kept > 0 && (all[size_t(kept) - 1] - '0') % 2 == 1;
  std::string rounded = all.substr(0, size_t(kept));
  if (first_dropped > '5' || (first_dropped == '5' && (rest_nonzero || last_kept_odd))) {
    size_t i = rounded.size();
    while (i > 0 && rounded[i - 1] == '9') rounded[--i] = '0';
    if (i == 0) {
      rounded.insert(rounded.begin(), '1');
    } else {
      ++rounded[i - 1];
    }
  }
  // The rounded digits count units of 10**-digits.
  const std::string text = (rounded.empty() ? "0" : rounded) + "e" + std::to_string(-digits);
  return std::copysign(std::strtod(text.c_str(), nullptr), value);
}

// Python's round(value, digits) of an integer: itself when digits >= 0, else to the nearest multiple of
// 10**-digits, ties to even.
int64_t round_integer(int64_t value, int64_t digits) {
  if (digits >= 0) return value;
  if (digits < -38) return 0;  // |value| < 10**19 <= half of 10**39
  __int128 scale = 1;
  for (int64_t i = 0; i < -digits; ++i) scale *= 10;
  const __int128 x = value;
  __int128 quotient = x / scale, remainder = x % scale;  // toward zero
  const __int128 twice = 2 * (remainder < 0 ? -remainder : remainder);
  if (twice > scale || (twice == scale && quotient % 2 != 0)) quotient += x < 0 ? -1 : 1;
  const __int128 result = quotient * scale;
  if (result > std::numeric_limits<int64_t>::max() || result < std::numeric_limits<int64_t>::min()) too_large("round");
  return int64_t(result);
}

}  // namespace

// Jinja2's do_int: int(text, 10) for a string, int(value) otherwise, then int(float(value)) ("42.23" is
// 42), then the default.
Value filter_int(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("int", args, kwargs, {"default", "base"});
  const Value fallback = p.get(0) ? *p.get(0) : Value::of(int64_t(0));
  require_defined_number_input(input, "int");
  if (p.get(1) && !(p.get(1)->is_integral() && p.get(1)->as_integer() == 10)) throw ValueError("int with a base other than 10 is not supported");
  int64_t result = 0;
  if (input.is_integral()) return Value::of(input.as_integer());
  if (input.type == Value::Type::real) return truncate(input.real, result, "int") ? Value::of(result) : fallback;
  if (!input.is_string()) return fallback;
  switch (parse_integer(input.text, result)) {
    case Parsed::yes: return Value::of(result);
    case Parsed::too_large: too_large("int");
    case Parsed::no: break;
  }
  // int(float(text)): infinity's OverflowError is caught here, as NaN's ValueError is.
  double parsed = 0;
  if (parse_real(input.text, parsed) && !std::isinf(parsed) && truncate(parsed, result, "int")) return Value::of(result);
  return fallback;
}

Value filter_float(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("float", args, kwargs, {"default"});
  require_defined_number_input(input, "float");
  if (input.is_number()) return Value::of(input.as_real());
  double parsed = 0;
  if (input.is_string() && parse_real(input.text, parsed)) return Value::of(parsed);
  return p.get(0) ? *p.get(0) : Value::of(0.0);
}

Value filter_abs(const Value& input, Args args, Kwargs kwargs) {
  Parameters("abs", args, kwargs, {});
  if (input.is_integral()) {
    if (input.as_integer() == std::numeric_limits<int64_t>::min()) too_large("abs");
    return Value::of(input.as_integer() < 0 ? -input.as_integer() : input.as_integer());
  }
  if (input.type == Value::Type::real) return Value::of(std::fabs(input.real));
  throw ValueError("bad operand type for abs(): '" + type_name(input) + "'");
}

// Jinja2's do_round: round(value, precision) for "common"; math.floor or math.ceil of value * 10**precision,
// over 10**precision, for the others.
Value filter_round(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("round", args, kwargs, {"precision", "method"});
  if (!input.is_number()) throw ValueError("round takes a number, not '" + type_name(input) + "'");
  if (p.get(0) && !p.get(0)->is_integral()) throw ValueError("round's precision must be an integer");
  const int64_t precision = p.get(0) ? p.get(0)->as_integer() : 0;
  const std::string method = p.get(1) ? to_str(*p.get(1)) : "common";
  if (method != "common" && method != "floor" && method != "ceil") throw ValueError("method must be common, ceil or floor");
  if (method == "common") return input.is_integral() ? Value::of(round_integer(input.as_integer(), precision)) : Value::of(round_decimal(input.real, precision));
  // Python: 10**precision is an exact integer for precision >= 0 (the quotient then rounds once, which a
  // double division does while it is exact, up to 10**22), a float for precision < 0.
  if (precision > 22) throw ValueError("round with floor or ceil and a precision past 22 is not supported");
  if (input.is_integral() && precision >= 0) return Value::of(double(input.as_integer()));  // floor(n * 10**p) / 10**p
  const double scale = precision >= 0 ? std::strtod(("1e" + std::to_string(precision)).c_str(), nullptr) : std::pow(10.0, double(precision));
  if (scale == 0) throw ValueError("float division by zero");  // 10**precision underflowed
  const double scaled = input.as_real() * scale;
  if (std::isnan(scaled)) throw ValueError("cannot convert float NaN to integer");
  if (std::isinf(scaled)) throw ValueError("cannot convert float infinity to integer");
  return Value::of((method == "floor" ? std::floor(scaled) : std::ceil(scaled)) / scale);
}

Value filter_sum(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("sum", args, kwargs, {"attribute", "start"});
  Value total = p.get(1) ? *p.get(1) : Value::of(int64_t(0));
  for (const Value& item : iterate(input)) {
    const Value v = p.get(0) && !p.get(0)->is_none() ? attribute_path(item, *p.get(0)) : item;
    if (!total.is_number() || !v.is_number()) throw ValueError("sum takes numbers");
    if (total.is_integral() && v.is_integral()) {
      int64_t sum = 0;
      if (__builtin_add_overflow(total.as_integer(), v.as_integer(), &sum)) too_large("sum");
      total = Value::of(sum);
    } else {
      total = Value::of(total.as_real() + v.as_real());
    }
  }
  return total;
}

}  // namespace tilefire::jinja
