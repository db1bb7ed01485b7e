// The string methods past the common ones (graph/jinja_syntax.h, more_string_methods): rsplit,
// splitlines, partition, rpartition, removeprefix, removesuffix, rfind, index, rindex, center, ljust,
// rjust, zfill, swapcase, casefold and the is...() tests, with Python's results. Where Python's answer
// needs Unicode data Tilefire does not have (which digits are decimal, which letters are numerals), the
// method refuses rather than guess.
#include <algorithm>

#include "graph/jinja_syntax.h"
#include "graph/unicode.h"

namespace tilefire::jinja {
namespace {

using Args = const Arguments&;
using Kwargs = const KeywordArguments&;

const std::string& text_argument(Args args, size_t i, const std::string& method) {
  if (!args[i].is_string()) throw ValueError(method + "() argument must be str, not " + type_name(args[i]));
  return args[i].text;
}

int64_t integer_argument(Args args, size_t i, const std::string& method) {
  if (!args[i].is_integral()) throw ValueError("'" + type_name(args[i]) + "' object cannot be interpreted as an integer (" + method + ")");
  return args[i].as_integer();
}

Value texts(const std::vector<std::u32string>& parts) {
  List list;
  for (const std::u32string& part : parts) list.push_back(Value::of(utf8(part)));
  return Value::of(std::move(list));
}

// str.rsplit: from the right; without a separator at runs of white space, the rest keeping its own.
Value rsplit(const std::u32string& text, Args args, Kwargs kwargs) {
  const SplitArguments given = split_arguments(args, kwargs, "rsplit");
  const Value* separator = given.separator;
  int64_t splits = given.max_splits;
  std::vector<std::u32string> parts;
  if (!separator || separator->is_none()) {
    size_t end = text.size();
    while (true) {
      while (end > 0 && is_python_space(text[end - 1])) --end;
      if (end == 0) break;
      if (splits == 0) {
        parts.push_back(text.substr(0, end));
        break;
      }
      size_t start = end;
      while (start > 0 && !is_python_space(text[start - 1])) --start;
      parts.push_back(text.substr(start, end - start));
      end = start;
      if (splits > 0) --splits;
    }
  } else {
    if (!separator->is_string()) throw ValueError("rsplit() takes a string separator");
    const std::u32string sep = code_points(separator->text);
    if (sep.empty()) throw ValueError("empty separator");
    size_t end = text.size();
    while (splits != 0) {
      if (end < sep.size()) break;
      const size_t at = text.rfind(sep, end - sep.size());
      if (at == std::u32string::npos) break;
      parts.push_back(text.substr(at + sep.size(), end - at - sep.size()));
      end = at;
      if (splits > 0) --splits;
    }
    parts.push_back(text.substr(0, end));
  }
  std::reverse(parts.begin(), parts.end());
  return texts(parts);
}

// str.splitlines: at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028 and U+2029.
Value splitlines(const std::u32string& text, bool keep_ends) {
  std::vector<std::u32string> lines;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const char32_t c = text[i];
    const bool boundary = c == U'\n' || c == U'\r' || c == U'\v' || c == U'\f' || (c >= 0x1c && c <= 0x1e) || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) {
      ++i;
      continue;
    }
    size_t after = i + 1;
    if (c == U'\r' && after < text.size() && text[after] == U'\n') ++after;
    lines.push_back(text.substr(start, (keep_ends ? after : i) - start));
    start = i = after;
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return texts(lines);
}

// The position of `needle` in text[start:end], from the left or the right; -1 when absent.
int64_t locate(const std::u32string& text, Args args, bool from_right) {
  const std::u32string needle = code_points(text_argument(args, 0, from_right ? "rfind" : "find"));
  int64_t start = 0, end = 0;
  adjust_indices(args, 1, int64_t(text.size()), start, end);
  if (start > end || end - start < int64_t(needle.size())) return -1;
  const std::u32string window = text.substr(size_t(start), size_t(end - start));
  const size_t at = from_right ? window.rfind(needle) : window.find(needle);
  return at == std::u32string::npos ? -1 : start + int64_t(at);
}

// center, ljust, rjust: padded to `width` code points with one fill character.
Value justify(const std::u32string& text, Args args, Kwargs kwargs, const std::string& method) {
  expect_argument_count(args, kwargs, 1, 2, method);
  const int64_t width = integer_argument(args, 0, method);
  if (width > int64_t(kMaxStringBytes)) throw ValueError(method + "()'s width makes a string past 64 MiB");
  char32_t fill = U' ';
  if (args.size() > 1) {
    const std::u32string given = code_points(text_argument(args, 1, method));
    if (given.size() != 1) throw ValueError("The fill character must be exactly one character long");
    fill = given[0];
  }
  if (width <= int64_t(text.size())) return Value::of(utf8(text));
  const int64_t margin = width - int64_t(text.size());
  int64_t left = 0;
  if (method == "center") left = margin / 2 + (margin & width & 1);  // CPython's pad()
  else if (method == "rjust") left = margin;
  return Value::of(utf8(std::u32string(size_t(left), fill) + text + std::u32string(size_t(margin - left), fill)));
}

// The is...() tests: false for the empty string. A non-ASCII number (and, with refuse_letters, a letter)
// is refused where Python's answer depends on its numeric type.
bool all_of_text(const std::u32string& text, const std::string& method, bool (*test)(char32_t), bool refuse_other_numbers, bool refuse_letters) {
  if (text.empty()) return false;
  for (char32_t c : text) {
    if (c >= 0x80 && ((refuse_other_numbers && unicode::is_number(c)) || (refuse_letters && unicode::is_letter(c))))
      throw ValueError(method + "() of text with non-ASCII numbers or letters is not supported (Tilefire lacks the Unicode numeric types)");
    if (!test(c)) return false;
  }
  return true;
}

bool ascii_digit(char32_t c) { return c >= U'0' && c <= U'9'; }

}  // namespace

SplitArguments split_arguments(const Arguments& args, const KeywordArguments& kwargs, const char* method) {
  SplitArguments given;
  given.separator = args.empty() ? nullptr : &args[0];
  const Value* limit = args.size() > 1 ? &args[1] : nullptr;
  for (const auto& [key, value] : kwargs) {
    if (key == "sep") given.separator = &value;
    else if (key == "maxsplit") limit = &value;
    else throw ValueError(std::string(method) + "() got an unexpected keyword argument '" + key + "'");
  }
  if (args.size() > 2) throw ValueError(std::string(method) + "() takes at most 2 arguments");
  if (limit && !limit->is_integral()) throw ValueError(std::string(method) + "() takes an integer maxsplit");
  given.max_splits = limit ? limit->as_integer() : -1;
  return given;
}

void adjust_indices(const Arguments& args, size_t first, int64_t length, int64_t& start, int64_t& end) {
  const auto bound = [&](size_t i, int64_t fallback) {
    if (args.size() <= i || args[i].is_none()) return fallback;
    if (!args[i].is_integral()) throw ValueError("slice indices must be integers or None or have an __index__ method");
    const int64_t v = args[i].as_integer();
    return v < 0 ? std::max<int64_t>(0, v + length) : v;
  };
  start = bound(first, 0);
  end = std::min(bound(first + 1, length), length);
}

Value more_string_methods(const std::string& text, const std::string& name) {
  const auto method = [&](Function f) { return Value::of_function("str." + name, std::move(f)); };
  if (name == "rsplit") return method([text](Args args, Kwargs kwargs) { return rsplit(code_points(text), args, kwargs); });
  if (name == "splitlines") {
    return method([text](Args args, Kwargs kwargs) {
      bool keep_ends = false;
      if (!args.empty()) keep_ends = truthy(args[0]);
      for (const auto& [key, value] : kwargs) {
        if (key != "keepends") throw ValueError("splitlines() got an unexpected keyword argument '" + key + "'");
        keep_ends = truthy(value);
      }
      if (args.size() > 1) throw ValueError("splitlines() takes at most 1 argument");
      return splitlines(code_points(text), keep_ends);
    });
  }
  if (name == "partition" || name == "rpartition") {
    const bool right = name == "rpartition";
    return method([text, right, name](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 1, 1, name);
      const std::string& sep = text_argument(args, 0, name);
      if (sep.empty()) throw ValueError("empty separator");
      const size_t at = right ? text.rfind(sep) : text.find(sep);  // UTF-8 finds whole characters
      List parts;
      if (at == std::string::npos) parts = right ? List{Value::of(""), Value::of(""), Value::of(text)} : List{Value::of(text), Value::of(""), Value::of("")};
      else parts = {Value::of(text.substr(0, at)), Value::of(sep), Value::of(text.substr(at + sep.size()))};
      return Value::of(std::move(parts), Value::Type::tuple);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return method([text, prefix, name](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 1, 1, name);
      const std::string& affix = text_argument(args, 0, name);
      if (prefix && text.compare(0, affix.size(), affix) == 0) return Value::of(text.substr(affix.size()));
      if (!prefix && affix.size() <= text.size() && text.compare(text.size() - affix.size(), affix.size(), affix) == 0 && !affix.empty())
        return Value::of(text.substr(0, text.size() - affix.size()));
      return Value::of(text);
    });
  }
  if (name == "rfind" || name == "index" || name == "rindex") {
    return method([text, name](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 1, 3, name);
      const int64_t at = locate(code_points(text), args, name != "index");
      if (at < 0 && name != "rfind") throw ValueError("substring not found");
      return Value::of(at);
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    return method([text, name](Args args, Kwargs kwargs) { return justify(code_points(text), args, kwargs, name); });
  }
  if (name == "zfill") {
    return method([text](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 1, 1, "zfill");
      std::u32string points = code_points(text);
      const int64_t width = integer_argument(args, 0, "zfill");
      if (width > int64_t(kMaxStringBytes)) throw ValueError("zfill()'s width makes a string past 64 MiB");
      if (width <= int64_t(points.size())) return Value::of(text);
      const size_t sign = !points.empty() && (points[0] == U'+' || points[0] == U'-') ? 1 : 0;
      points.insert(sign, std::u32string(size_t(width) - points.size(), U'0'));
      return Value::of(utf8(points));
    });
  }
  if (name == "swapcase" || name == "casefold") {
    return method([text, name](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 0, 0, name);
      require_ascii_case(text, name.c_str());
      std::string out = text;
      for (char& c : out) {
        if (c >= 'a' && c <= 'z' && name == "swapcase") c = char(c - 32);
        else if (c >= 'A' && c <= 'Z') c = char(c + 32);
      }
      return Value::of(out);
    });
  }
  if (name == "isalpha" || name == "isspace" || name == "isalnum" || name == "isdigit" || name == "isdecimal" || name == "isnumeric" ||
      name == "islower" || name == "isupper") {
    return method([text, name](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 0, 0, name);
      const std::u32string points = code_points(text);
      if (name == "isalpha") return Value::of(all_of_text(points, name, unicode::is_letter, false, false));
      if (name == "isspace") return Value::of(all_of_text(points, name, is_python_space, false, false));
      if (name == "isalnum") return Value::of(all_of_text(points, name, [](char32_t c) { return unicode::is_letter(c) || unicode::is_number(c); }, false, false));
      // A letter may be a numeral (三 is numeric); a non-ASCII number may be a digit or not.
      if (name == "isnumeric") return Value::of(all_of_text(points, name, ascii_digit, true, true));
      if (name == "isdigit" || name == "isdecimal") return Value::of(all_of_text(points, name, ascii_digit, true, false));
      require_ascii_case(text, name.c_str());  // islower, isupper: cased characters all of one case, one at least
      const bool lower = name == "islower";
      bool cased = false;
      for (char c : text) {
        if (!std::isalpha(static_cast<unsigned char>(c))) continue;
        cased = true;
        if (lower ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c))) return Value::of(false);
      }
      return Value::of(cased);
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

}  // namespace tilefire::jinja
