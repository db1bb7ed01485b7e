// The filters and tests of chat templates: Jinja2's built-ins with their Python meaning, and
// transformers' tojson.
#include <algorithm>
#include <cmath>
#include <map>

#include "graph/jinja_syntax.h"

namespace tilefire::jinja {
namespace {

using Args = const Arguments&;
using Kwargs = const KeywordArguments&;

// A filter's parameters by position or keyword, as Python binds them.
class Parameters {
 public:
  Parameters(const char* filter, Args args, Kwargs kwargs, std::vector<const char*> names) : filter_(filter) {
    if (args.size() > names.size()) throw ValueError(std::string(filter) + " takes at most " + std::to_string(names.size()) + " arguments");
    values_.resize(names.size());
    for (size_t i = 0; i < args.size(); ++i) values_[i] = &args[i];
    for (const auto& [key, value] : kwargs) {
      const auto it = std::find_if(names.begin(), names.end(), [&](const char* n) { return key == n; });
      if (it == names.end()) throw ValueError(std::string(filter) + " got an unexpected keyword argument '" + key + "'");
      values_[size_t(it - names.begin())] = &value;
    }
  }
  const Value* get(size_t i) const { return values_[i]; }
  bool flag(size_t i, bool fallback) const { return values_[i] ? truthy(*values_[i]) : fallback; }
  const Value* string(size_t i) const {
    if (values_[i] && !values_[i]->is_none() && !values_[i]->is_string()) throw ValueError(std::string(filter_) + " takes a string here");
    return values_[i] && !values_[i]->is_none() ? values_[i] : nullptr;
  }

 private:
  const char* filter_;
  std::vector<const Value*> values_;
};

// Jinja2's environment.getitem along a dotted path ("function.name", "0"), as the attribute= of filters.
Value attribute_path(const Value& item, const std::string& path) {
  Value value = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    value = value.is_undefined() ? value : get_item(value, digits ? Value::of(int64_t(std::stoll(part))) : Value::of(part));
    if (dot == std::string::npos) return value;
    start = dot + 1;
  }
}

Value to_string_value(const Value& v) { return Value::of(to_str(v)); }

// ---- filters ----

Value filter_tojson(const Value& input, Args args, Kwargs kwargs) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> json.dumps
  const Parameters p("tojson", args, kwargs, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  style.ensure_ascii = p.flag(0, false);
  if (const Value* indent = p.get(1); indent && !indent->is_none()) {
    style.indented = true;
    if (indent->is_string()) style.indent = indent->text;
    else if (indent->is_integral()) style.indent = std::string(size_t(std::max<int64_t>(0, indent->as_integer())), ' ');
    else throw ValueError("tojson's indent must be an integer or a string");
    style.item_separator = ",";
  }
  if (const Value* separators = p.get(2); separators && !separators->is_none()) {
    if (!separators->is_sequence() || separators->items->size() != 2 || !(*separators->items)[0].is_string() || !(*separators->items)[1].is_string())
      throw ValueError("tojson's separators must be two strings");
    style.item_separator = (*separators->items)[0].text;
    style.key_separator = (*separators->items)[1].text;
  }
  style.sort_keys = p.flag(3, false);
  if (input.is_undefined()) throw ValueError("Object of type Undefined is not JSON serializable");
  return Value::of(to_json(input, style));
}

Value filter_trim(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("trim", args, kwargs, {"chars"});
  const Value* chars = p.string(0);
  return Value::of(strip(to_str(input), chars ? &chars->text : nullptr, true, true));
}

Value filter_length(const Value& input, Args args, Kwargs kwargs) {
  Parameters("length", args, kwargs, {});
  return Value::of(length(input));
}

Value filter_list(const Value& input, Args args, Kwargs kwargs) {
  Parameters("list", args, kwargs, {});
  return Value::of(iterate(input));
}

Value filter_string(const Value& input, Args args, Kwargs kwargs) {
  Parameters("string", args, kwargs, {});
  return to_string_value(input);
}

Value filter_first(const Value& input, Args args, Kwargs kwargs) {
  Parameters("first", args, kwargs, {});
  const List items = iterate(input);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value filter_last(const Value& input, Args args, Kwargs kwargs) {
  Parameters("last", args, kwargs, {});
  const List items = iterate(input);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value filter_join(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("join", args, kwargs, {"d", "attribute"});
  const std::string separator = p.get(0) ? to_str(*p.get(0)) : "";
  const Value* attribute = p.get(1);
  std::string out;
  const List items = iterate(input);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += to_str(attribute && !attribute->is_none() ? attribute_path(items[i], to_str(*attribute)) : items[i]);
  }
  return Value::of(out);
}

// The lower, upper, capitalize and title filters.
Value change_case(const Value& input, Args args, Kwargs kwargs, const char* name) {
  Parameters(name, args, kwargs, {});
  std::string text = to_str(input);
  require_ascii_case(text, name);
  const std::string op = name;
  if (op == "title") {  // Jinja2: words begin after '-', white space, '(', '{', '[' or '<'
    bool word_start = true;
    for (char& c : text) {
      const bool boundary = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '(' ||
                            c == '{' || c == '[' || c == '<';
      if (boundary) {
        word_start = true;
        continue;
      }
      c = word_start ? char(std::toupper(static_cast<unsigned char>(c))) : char(std::tolower(static_cast<unsigned char>(c)));
      word_start = false;
    }
    return Value::of(text);
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const bool upper = op == "upper" || (op == "capitalize" && i == 0);
    text[i] = upper ? char(std::toupper(static_cast<unsigned char>(text[i]))) : char(std::tolower(static_cast<unsigned char>(text[i])));
  }
  return Value::of(text);
}

Value filter_replace(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("replace", args, kwargs, {"old", "new", "count"});
  if (!p.get(0) || !p.get(1)) throw ValueError("replace takes the old and the new text");
  Arguments call_args = {Value::of(to_str(*p.get(0))), Value::of(to_str(*p.get(1)))};
  if (p.get(2) && !p.get(2)->is_none()) call_args.push_back(*p.get(2));
  return (*method_of(Value::of(to_str(input)), "replace").function)(call_args, {});
}

Value filter_default(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("default", args, kwargs, {"default_value", "boolean"});
  const bool replace = input.is_undefined() || (p.flag(1, false) && !truthy(input));
  return replace ? (p.get(0) ? *p.get(0) : Value::of("")) : input;
}

// Python's float() of a string: [sign] digits [. digits] [e [sign] digits], or inf, infinity, nan; white
// space around it and single underscores between digits allowed. Hexadecimal is not (strtod would take it).
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
  if (!special) {
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
  size_t used = 0;
  try {
    out = std::stod(digits, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == digits.size();
}

Value filter_int(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("int", args, kwargs, {"default", "base"});
  const Value fallback = p.get(0) ? *p.get(0) : Value::of(int64_t(0));
  if (p.get(1) && !(p.get(1)->is_integral() && p.get(1)->as_integer() == 10)) throw ValueError("int with a base other than 10 is not supported");
  if (input.is_integral()) return Value::of(input.as_integer());
  if (input.type == Value::Type::real) {
    if (!std::isfinite(input.real) || std::fabs(input.real) > 9.2e18) return fallback;
    return Value::of(int64_t(std::trunc(input.real)));
  }
  if (input.is_string()) {
    double parsed = 0;
    if (parse_real(input.text, parsed) && std::isfinite(parsed) && std::fabs(parsed) < 9.2e18) return Value::of(int64_t(std::trunc(parsed)));
  }
  return fallback;
}

Value filter_float(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("float", args, kwargs, {"default"});
  if (input.is_number()) return Value::of(input.as_real());
  double parsed = 0;
  if (input.is_string() && parse_real(input.text, parsed)) return Value::of(parsed);
  return p.get(0) ? *p.get(0) : Value::of(0.0);
}

Value filter_abs(const Value& input, Args args, Kwargs kwargs) {
  Parameters("abs", args, kwargs, {});
  if (input.is_integral()) return Value::of(input.as_integer() < 0 ? -input.as_integer() : input.as_integer());
  if (input.type == Value::Type::real) return Value::of(std::fabs(input.real));
  throw ValueError("bad operand type for abs(): '" + type_name(input) + "'");
}

Value filter_round(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("round", args, kwargs, {"precision", "method"});
  if (!input.is_number()) throw ValueError("round takes a number");
  const int64_t precision = p.get(0) ? p.get(0)->as_integer() : 0;
  const std::string method = p.get(1) ? to_str(*p.get(1)) : "common";
  if (method == "common" && input.is_integral()) return Value::of(input.as_integer());  // Python's round(int, n) is an int
  const double scale = std::pow(10.0, double(precision));
  const double x = input.as_real() * scale;
  double r;
  if (method == "common") r = std::nearbyint(x);  // Python's round: half to even
  else if (method == "floor") r = std::floor(x);
  else if (method == "ceil") r = std::ceil(x);
  else throw ValueError("method must be common, ceil or floor");
  return Value::of(r / scale);
}

Value filter_reverse(const Value& input, Args args, Kwargs kwargs) {
  Parameters("reverse", args, kwargs, {});
  if (input.is_string()) {
    std::u32string points = code_points(input.text);
    std::reverse(points.begin(), points.end());
    return Value::of(utf8(points));
  }
  List items = iterate(input);
  std::reverse(items.begin(), items.end());
  return Value::of(std::move(items));
}

// The key the sort-like filters compare: the item or its attribute, lower-cased unless case-sensitive.
Value sort_key(const Value& item, const Value* attribute, bool case_sensitive) {
  Value key = attribute && !attribute->is_none() ? attribute_path(item, to_str(*attribute)) : item;
  if (!case_sensitive && key.is_string()) {
    require_ascii_case(key.text, "case-insensitive comparison");
    for (char& c : key.text) c = char(std::tolower(static_cast<unsigned char>(c)));
  }
  return key;
}

Value filter_sort(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("sort", args, kwargs, {"reverse", "case_sensitive", "attribute"});
  List items = iterate(input);
  const bool reverse = p.flag(0, false), case_sensitive = p.flag(1, false);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) keyed.emplace_back(sort_key(item, p.get(2), case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) { return reverse ? less(b.first, a.first) : less(a.first, b.first); });
  items.clear();
  for (auto& [key, item] : keyed) items.push_back(std::move(item));
  return Value::of(std::move(items));
}

Value filter_unique(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("unique", args, kwargs, {"case_sensitive", "attribute"});
  List out, keys;
  for (const Value& item : iterate(input)) {
    const Value key = sort_key(item, p.get(1), p.flag(0, false));
    if (std::none_of(keys.begin(), keys.end(), [&](const Value& k) { return equal(k, key); })) {
      keys.push_back(key);
      out.push_back(item);
    }
  }
  return Value::of(std::move(out));
}

Value filter_items(const Value& input, Args args, Kwargs kwargs) {
  Parameters("items", args, kwargs, {});
  if (input.is_undefined()) return Value::of(List{});
  if (!input.is_mapping()) throw ValueError("Can only get item pairs from a mapping.");
  return (*method_of(input, "items").function)({}, {});
}

Value filter_dictsort(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("dictsort", args, kwargs, {"case_sensitive", "by", "reverse"});
  if (!input.is_mapping()) throw ValueError("dictsort takes a dict");
  const bool by_value = p.get(1) && to_str(*p.get(1)) == "value";
  if (p.get(1) && !by_value && to_str(*p.get(1)) != "key") throw ValueError("You can only sort by either \"key\" or \"value\"");
  List pairs = (*method_of(input, "items").function)({}, {}).list();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& pair : pairs) keyed.emplace_back(sort_key(pair.list()[by_value ? 1 : 0], nullptr, p.flag(0, false)), pair);
  const bool reverse = p.flag(2, false);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) { return reverse ? less(b.first, a.first) : less(a.first, b.first); });
  List out;
  for (auto& [key, pair] : keyed) out.push_back(std::move(pair));
  return Value::of(std::move(out));
}

// select / reject / selectattr / rejectattr: keep the items whose (attribute's) test result is `keep`.
Value select_items(const Value& input, Args args, const Value* attribute, bool keep, const char* filter) {
  TestFunction test = nullptr;
  Arguments test_args;
  if (!args.empty()) {
    if (!args[0].is_string()) throw ValueError(std::string(filter) + " takes the name of a test");
    test = find_test(args[0].text);
    if (!test) throw ValueError("no test named '" + args[0].text + "'");
    test_args.assign(args.begin() + 1, args.end());
  }
  List out;
  for (const Value& item : iterate(input)) {
    const Value subject = attribute ? attribute_path(item, to_str(*attribute)) : item;
    const bool result = test ? test(subject, test_args) : truthy(subject);
    if (result == keep) out.push_back(item);
  }
  return Value::of(std::move(out));
}

Value filter_select(const Value& input, Args args, Kwargs kwargs) {
  if (!kwargs.empty()) throw ValueError("select takes no keyword arguments");
  return select_items(input, args, nullptr, true, "select");
}
Value filter_reject(const Value& input, Args args, Kwargs kwargs) {
  if (!kwargs.empty()) throw ValueError("reject takes no keyword arguments");
  return select_items(input, args, nullptr, false, "reject");
}
Value filter_selectattr(const Value& input, Args args, Kwargs kwargs) {
  if (!kwargs.empty() || args.empty()) throw ValueError("selectattr takes an attribute and an optional test");
  return select_items(input, Arguments(args.begin() + 1, args.end()), &args[0], true, "selectattr");
}
Value filter_rejectattr(const Value& input, Args args, Kwargs kwargs) {
  if (!kwargs.empty() || args.empty()) throw ValueError("rejectattr takes an attribute and an optional test");
  return select_items(input, Arguments(args.begin() + 1, args.end()), &args[0], false, "rejectattr");
}

Value filter_map(const Value& input, Args args, Kwargs kwargs) {
  List out;
  const List items = iterate(input);
  if (args.empty()) {  // map(attribute="x", default=...)
    const Value *attribute = nullptr, *fallback = nullptr;
    for (const auto& [key, value] : kwargs) {
      if (key == "attribute") attribute = &value;
      else if (key == "default") fallback = &value;
      else throw ValueError("map got an unexpected keyword argument '" + key + "'");
    }
    if (!attribute) throw ValueError("map takes a filter name or attribute=");
    for (const Value& item : items) {
      Value v = attribute_path(item, to_str(*attribute));
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::of(std::move(out));
  }
  if (!args[0].is_string()) throw ValueError("map takes the name of a filter");
  const FilterFunction filter = find_filter(args[0].text);
  if (!filter) throw ValueError("no filter named '" + args[0].text + "'");
  const Arguments rest(args.begin() + 1, args.end());
  for (const Value& item : items) out.push_back(filter(item, rest, kwargs));
  return Value::of(std::move(out));
}

Value filter_sum(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("sum", args, kwargs, {"attribute", "start"});
  Value total = p.get(1) ? *p.get(1) : Value::of(int64_t(0));
  for (const Value& item : iterate(input)) {
    const Value v = p.get(0) && !p.get(0)->is_none() ? attribute_path(item, to_str(*p.get(0))) : item;
    if (!total.is_number() || !v.is_number()) throw ValueError("sum takes numbers");
    total = total.is_integral() && v.is_integral() ? Value::of(total.as_integer() + v.as_integer()) : Value::of(total.as_real() + v.as_real());
  }
  return total;
}

Value extreme(const Value& input, Args args, Kwargs kwargs, bool largest) {
  const Parameters p(largest ? "max" : "min", args, kwargs, {"case_sensitive", "attribute"});
  const List items = iterate(input);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  size_t best = 0;
  Value best_key = sort_key(items[0], p.get(1), p.flag(0, false));
  for (size_t i = 1; i < items.size(); ++i) {
    const Value key = sort_key(items[i], p.get(1), p.flag(0, false));
    if (largest ? less(best_key, key) : less(key, best_key)) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}
Value filter_min(const Value& input, Args args, Kwargs kwargs) { return extreme(input, args, kwargs, false); }
Value filter_max(const Value& input, Args args, Kwargs kwargs) { return extreme(input, args, kwargs, true); }

// str.splitlines: the line boundaries Python knows, each dropped.
std::vector<std::u32string> split_lines(const std::u32string& text) {
  std::vector<std::u32string> lines;
  std::u32string line;
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool boundary = c == U'\n' || c == U'\r' || c == U'\v' || c == U'\f' || (c >= 0x1c && c <= 0x1e) || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) {
      line += c;
      continue;
    }
    if (c == U'\r' && i + 1 < text.size() && text[i + 1] == U'\n') ++i;
    lines.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

Value filter_indent(const Value& input, Args args, Kwargs kwargs) {
  // Jinja2's do_indent: a newline is added, then the lines are re-joined with the indentation; without
  // `blank`, empty lines are not indented.
  const Parameters p("indent", args, kwargs, {"width", "first", "blank"});
  std::u32string prefix = U"    ";
  if (const Value* width = p.get(0)) prefix = width->is_string() ? code_points(width->text) : std::u32string(size_t(std::max<int64_t>(0, width->as_integer())), U' ');
  const bool first = p.flag(1, false), blank = p.flag(2, false);
  std::vector<std::u32string> lines = split_lines(code_points(to_str(input)) + U"\n");
  std::u32string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += U"\n";
    if (i > 0 && (blank || !lines[i].empty())) out += prefix;
    out += lines[i];
  }
  if (first) out = prefix + out;
  return Value::of(utf8(out));
}

Value filter_wordcount(const Value& input, Args args, Kwargs kwargs) {
  Parameters("wordcount", args, kwargs, {});
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : code_points(to_str(input))) {
    const bool word_char = c == U'_' || (c < 0x80 ? std::isalnum(int(c)) != 0 : !is_python_space(c));
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::of(words);
}

Value filter_safe(const Value& input, Args args, Kwargs kwargs) {
  Parameters("safe", args, kwargs, {});
  return to_string_value(input);
}

Value filter_escape(const Value& input, Args args, Kwargs kwargs) {
  Parameters("escape", args, kwargs, {});
  std::string out;
  for (char c : to_str(input)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::of(out);
}

Value filter_attr(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("attr", args, kwargs, {"name"});
  if (!p.get(0) || !p.get(0)->is_string()) throw ValueError("attr takes a name");
  if (input.is_undefined()) throw ValueError(input.text);
  if (input.is_mapping()) return method_of(input, p.get(0)->text);  // attr() never reads items
  if (input.type == Value::Type::namespace_) return get_attribute(input, p.get(0)->text);
  return method_of(input, p.get(0)->text);
}

const std::map<std::string, FilterFunction, std::less<>>& filters() {
  static const std::map<std::string, FilterFunction, std::less<>> table = {
      {"tojson", filter_tojson},     {"trim", filter_trim},         {"length", filter_length},   {"count", filter_length},
      {"list", filter_list},         {"string", filter_string},     {"first", filter_first},     {"last", filter_last},
      {"join", filter_join},
      {"lower", [](const Value& input, Args args, Kwargs kwargs) { return change_case(input, args, kwargs, "lower"); }},
      {"upper", [](const Value& input, Args args, Kwargs kwargs) { return change_case(input, args, kwargs, "upper"); }},
      {"capitalize", [](const Value& input, Args args, Kwargs kwargs) { return change_case(input, args, kwargs, "capitalize"); }},
      {"title", [](const Value& input, Args args, Kwargs kwargs) { return change_case(input, args, kwargs, "title"); }},
      {"replace", filter_replace},   {"default", filter_default},   {"d", filter_default},
      {"int", filter_int},           {"float", filter_float},       {"abs", filter_abs},         {"round", filter_round},
      {"reverse", filter_reverse},   {"sort", filter_sort},         {"unique", filter_unique},   {"items", filter_items},
      {"dictsort", filter_dictsort}, {"select", filter_select},     {"reject", filter_reject},   {"selectattr", filter_selectattr},
      {"rejectattr", filter_rejectattr}, {"map", filter_map},       {"sum", filter_sum},         {"min", filter_min},
      {"max", filter_max},           {"indent", filter_indent},     {"wordcount", filter_wordcount}, {"safe", filter_safe},
      {"escape", filter_escape},     {"e", filter_escape},          {"attr", filter_attr},
  };
  return table;
}

// ---- tests ----

const Value& argument(Args args, const char* test) {
  if (args.empty()) throw ValueError(std::string("the test '") + test + "' takes an argument");
  return args[0];
}

bool test_lower_or_upper(const Value& v, bool lower) {
  if (!v.is_string()) return false;
  require_ascii_case(v.text, lower ? "the test 'lower'" : "the test 'upper'");
  bool cased = false;
  for (char c : v.text) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      cased = true;
      if (lower ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c))) return false;
    }
  }
  return cased;
}

int64_t integer_of(const Value& v, const char* test) {
  if (!v.is_integral()) throw ValueError(std::string("the test '") + test + "' takes an integer");
  return v.as_integer();
}

const std::map<std::string, TestFunction, std::less<>>& tests() {
  static const std::map<std::string, TestFunction, std::less<>> table = {
      {"defined", [](const Value& v, Args) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, Args) { return v.is_undefined(); }},
      {"none", [](const Value& v, Args) { return v.is_none(); }},
      {"boolean", [](const Value& v, Args) { return v.type == Value::Type::boolean; }},
      {"true", [](const Value& v, Args) { return v.type == Value::Type::boolean && v.boolean; }},
      {"false", [](const Value& v, Args) { return v.type == Value::Type::boolean && !v.boolean; }},
      {"integer", [](const Value& v, Args) { return v.type == Value::Type::integer; }},
      {"float", [](const Value& v, Args) { return v.type == Value::Type::real; }},
      {"number", [](const Value& v, Args) { return v.is_number(); }},
      {"string", [](const Value& v, Args) { return v.is_string(); }},
      {"mapping", [](const Value& v, Args) { return v.is_mapping(); }},
      // Jinja2's Undefined iterates (as empty), has a length and is callable: these tests say yes to it.
      {"iterable", [](const Value& v, Args) { return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping(); }},
      {"sequence", [](const Value& v, Args) { return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping(); }},
      {"callable", [](const Value& v, Args) { return v.is_undefined() || v.type == Value::Type::function; }},
      {"sameas",
       [](const Value& v, Args a) {
         const Value& o = argument(a, "sameas");
         if (v.type != o.type) return false;
         if (v.is_sequence()) return v.items == o.items;
         if (v.is_mapping() || v.type == Value::Type::namespace_) return v.dict == o.dict;
         return equal(v, o);
       }},
      {"lower", [](const Value& v, Args) { return test_lower_or_upper(v, true); }},
      {"upper", [](const Value& v, Args) { return test_lower_or_upper(v, false); }},
      {"odd", [](const Value& v, Args) { return integer_of(v, "odd") % 2 != 0; }},
      {"even", [](const Value& v, Args) { return integer_of(v, "even") % 2 == 0; }},
      {"divisibleby",
       [](const Value& v, Args a) {
         const int64_t d = integer_of(argument(a, "divisibleby"), "divisibleby");
         if (d == 0) throw ValueError("integer division or modulo by zero");
         return integer_of(v, "divisibleby") % d == 0;
       }},
      {"eq", [](const Value& v, Args a) { return equal(v, argument(a, "eq")); }},
      {"equalto", [](const Value& v, Args a) { return equal(v, argument(a, "equalto")); }},
      {"==", [](const Value& v, Args a) { return equal(v, argument(a, "==")); }},
      {"ne", [](const Value& v, Args a) { return !equal(v, argument(a, "ne")); }},
      {"!=", [](const Value& v, Args a) { return !equal(v, argument(a, "!=")); }},
      {"lt", [](const Value& v, Args a) { return less(v, argument(a, "lt")); }},
      {"lessthan", [](const Value& v, Args a) { return less(v, argument(a, "lessthan")); }},
      {"<", [](const Value& v, Args a) { return less(v, argument(a, "<")); }},
      {"le", [](const Value& v, Args a) { return !less(argument(a, "le"), v); }},
      {"<=", [](const Value& v, Args a) { return !less(argument(a, "<="), v); }},
      {"gt", [](const Value& v, Args a) { return less(argument(a, "gt"), v); }},
      {"greaterthan", [](const Value& v, Args a) { return less(argument(a, "greaterthan"), v); }},
      {">", [](const Value& v, Args a) { return less(argument(a, ">"), v); }},
      {"ge", [](const Value& v, Args a) { return !less(v, argument(a, "ge")); }},
      {">=", [](const Value& v, Args a) { return !less(v, argument(a, ">=")); }},
      {"in", [](const Value& v, Args a) { return contains(argument(a, "in"), v); }},
  };
  return table;
}

}  // namespace

bool contains(const Value& container, const Value& item) {
  switch (container.type) {
    case Value::Type::undefined: return false;
    case Value::Type::string:
      if (!item.is_string()) throw ValueError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.text.find(item.text) != std::string::npos;
    case Value::Type::list:
    case Value::Type::tuple:
      return std::any_of(container.items->begin(), container.items->end(), [&](const Value& v) { return equal(v, item); });
    case Value::Type::dict: return item.is_string() && container.dict->find(item.text) != nullptr;
    default: throw ValueError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

FilterFunction find_filter(std::string_view name) {
  const auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

TestFunction find_test(std::string_view name) {
  const auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

}  // namespace tilefire::jinja
