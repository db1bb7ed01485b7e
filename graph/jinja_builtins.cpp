// The filters and tests of chat templates: Jinja2's built-ins with their Python meaning, and
// transformers' tojson.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "graph/jinja_filters.h"
#include "graph/unicode.h"

namespace tilefire::jinja {

Parameters::Parameters(const char* filter, Args args, Kwargs kwargs, std::vector<const char*> names) : filter_(filter) {
  if (args.size() > names.size()) throw ValueError(std::string(filter) + " takes at most " + std::to_string(names.size()) + " arguments");
  values_.resize(names.size());
  for (size_t i = 0; i < args.size(); ++i) values_[i] = &args[i];
  for (const auto& [key, value] : kwargs) {
    const auto it = std::find_if(names.begin(), names.end(), [&](const char* n) { return key == n; });
    if (it == names.end()) throw ValueError(std::string(filter) + " got an unexpected keyword argument '" + key + "'");
    values_[size_t(it - names.begin())] = &value;
  }
}

const Value* Parameters::string(size_t i) const {
  if (values_[i] && !values_[i]->is_none() && !values_[i]->is_string()) throw ValueError(std::string(filter_) + " takes a string here");
  return values_[i] && !values_[i]->is_none() ? values_[i] : nullptr;
}

Value attribute_path(const Value& item, const Value& attribute, const Value* fallback) {
  // Jinja2's _prepare_attribute_parts: None is no step, a string splits at its dots (a part of digits is
  // an index), anything else is one step.
  std::vector<Value> parts;
  if (attribute.is_string()) {
    size_t start = 0;
    while (true) {
      const size_t dot = attribute.text.find('.', start);
      const std::string part = attribute.text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      int64_t index = 0;
      if (!digits) parts.push_back(Value::of(part));
      else if (std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc()) parts.push_back(Value::of(index));
      else parts.push_back(Value::undefined("index " + part + " out of range"));  // past 64 bits: no item has it
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else if (!attribute.is_none()) {
    parts.push_back(attribute);
  }
  Value value = item;
  for (const Value& part : parts) {
    value = get_item(value, part);
    if (fallback && value.is_undefined()) value = *fallback;
  }
  return value;
}

Value sort_key(const Value& item, const Value* attribute, bool case_sensitive) {
  Value key = attribute ? attribute_path(item, *attribute) : item;
  if (!case_sensitive && key.is_string()) {
    require_ascii_case(key.text, "case-insensitive comparison");
    for (char& c : key.text) c = char(std::tolower(static_cast<unsigned char>(c)));
  }
  return key;
}

namespace {

Value to_string_value(const Value& v) { return v.is_string() ? v : Value::of(to_str(v)); }  // a Markup stays one

// ---- filters ----

Value filter_tojson(const Value& input, Args args, Kwargs kwargs) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> json.dumps
  const Parameters p("tojson", args, kwargs, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  style.ensure_ascii = p.flag(0, false);
  if (const Value* indent = p.get(1); indent && !indent->is_none()) {
    style.indented = true;
    if (indent->is_string()) style.indent = indent->text;
    else if (indent->is_integral() && indent->as_integer() > int64_t(kMaxStringBytes)) throw ValueError("tojson's indent makes a string past 64 MiB");
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
  return Value::string_like(input, strip(to_str(input), chars ? &chars->text : nullptr, true, true));
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

// Jinja2's do_first: next(iter(value)), which takes one item from an iterator.
Value filter_first(const Value& input, Args args, Kwargs kwargs) {
  Parameters("first", args, kwargs, {});
  Value item;
  if (input.type == Value::Type::iterator) return input.iterator->next(item) ? item : Value::undefined("No first item, sequence was empty.");
  const List items = iterate(input);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

// Jinja2's do_last: next(iter(reversed(value))); an iterator is not reversible.
Value filter_last(const Value& input, Args args, Kwargs kwargs) {
  Parameters("last", args, kwargs, {});
  if (input.type == Value::Type::iterator) throw ValueError("'" + type_name(input) + "' object is not reversible");
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
    out += to_str(attribute ? attribute_path(items[i], *attribute) : items[i]);
  }
  return Value::of(out);
}

// The lower, upper, capitalize and title filters.
Value change_case(const Value& input, Args args, Kwargs kwargs, const char* name) {
  Parameters(name, args, kwargs, {});
  std::string text = to_str(input);
  require_ascii_case(text, name);
  const std::string op = name;
  if (op == "title") {  // Jinja2: words begin after '-', Python's white space, '(', '{', '[' or '<'; a plain str
    std::string out;
    bool word_start = true;
    for (char32_t c : code_points(text)) {
      if (c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<' || is_python_space(c)) {
        word_start = true;
      } else {
        if (c < 0x80) c = char32_t(word_start ? std::toupper(int(c)) : std::tolower(int(c)));
        word_start = false;
      }
      unicode::append_utf8(c, out);
    }
    return Value::of(out);
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const bool upper = op == "upper" || (op == "capitalize" && i == 0);
    text[i] = upper ? char(std::toupper(static_cast<unsigned char>(text[i]))) : char(std::tolower(static_cast<unsigned char>(text[i])));
  }
  return Value::string_like(input, std::move(text));
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

Value filter_sort(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("sort", args, kwargs, {"reverse", "case_sensitive", "attribute"});
  List items = iterate(input);
  if (p.get(0) && !p.get(0)->is_integral()) throw ValueError("sort's reverse must be a boolean or an integer, not '" + type_name(*p.get(0)) + "'");
  const bool reverse = p.flag(0, false), case_sensitive = p.flag(1, false);
  // Jinja2's make_multi_attrgetter: attribute="role,name" sorts by each, and the key is a list even of
  // one (so that equal keys of undefined compare equal instead of failing).
  std::vector<Value> attributes;
  if (p.get(2) && p.get(2)->is_string()) {
    const std::string& names = p.get(2)->text;
    for (size_t start = 0;;) {
      const size_t comma = names.find(',', start);
      attributes.push_back(Value::of(names.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    attributes.push_back(p.get(2) ? *p.get(2) : Value::none());
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    List key;
    for (const Value& attribute : attributes) key.push_back(sort_key(item, &attribute, case_sensitive));
    keyed.emplace_back(Value::of(std::move(key)), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) { return reverse ? less(b.first, a.first) : less(a.first, b.first); });
  items.clear();
  for (auto& [key, item] : keyed) items.push_back(std::move(item));
  return Value::of(std::move(items));
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
  if (!input.is_string()) throw ValueError("indent takes a string, not '" + type_name(input) + "'");  // Jinja2: s += "\n"
  std::vector<std::u32string> lines = split_lines(code_points(input.text) + U"\n");
  std::u32string prefix = U"    ";
  if (const Value* width = p.get(0)) {
    if (!width->is_string() && !width->is_integral()) throw ValueError("indent's width must be an integer or a string, not '" + type_name(*width) + "'");
    const int64_t spaces = width->is_integral() ? std::max<int64_t>(0, width->as_integer()) : 0;
    if (double(width->is_string() ? width->text.size() : size_t(spaces)) * double(lines.size()) > double(kMaxStringBytes))
      throw ValueError("indent's width makes a string past 64 MiB");
    prefix = width->is_string() ? code_points(width->text) : std::u32string(size_t(spaces), U' ');
  }
  const bool first = p.flag(1, false), blank = p.flag(2, false);
  std::u32string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += U"\n";
    if (i > 0 && (blank || !lines[i].empty())) out += prefix;
    out += lines[i];
  }
  if (first) out = prefix + out;
  return Value::string_like(input, utf8(out));
}

Value filter_wordcount(const Value& input, Args args, Kwargs kwargs) {
  Parameters("wordcount", args, kwargs, {});
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : code_points(to_str(input))) {  // Jinja2's \w+: letters, numbers and _ (not marks, not symbols)
    const bool word_char = c == U'_' || unicode::is_letter(c) || unicode::is_number(c);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::of(words);
}

// safe and escape give a Markup (markupsafe's): a string that escape leaves alone, that escapes what `+`
// joins to it, and that prints in a list as Markup('...').
Value filter_safe(const Value& input, Args args, Kwargs kwargs) {
  Parameters("safe", args, kwargs, {});
  return Value::markup(to_str(input));
}

Value filter_escape(const Value& input, Args args, Kwargs kwargs) {
  Parameters("escape", args, kwargs, {});
  return escaped(input);
}

}  // namespace

Value escaped(const Value& input) {
  if (input.is_markup()) return input;
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
  return Value::markup(out);
}

namespace {

// Jinja2's do_format: str(value) % args, or % kwargs as a dict; not both.
Value filter_format(const Value& input, Args args, Kwargs kwargs) {
  if (!args.empty() && !kwargs.empty()) throw ValueError("format can't handle positional and keyword arguments at the same time");
  if (kwargs.empty()) return percent_format(to_string_value(input), Value::of(List(args), Value::Type::tuple));
  auto dict = std::make_shared<Dict>();
  for (const auto& [key, value] : kwargs) dict->set(key, value);
  return percent_format(to_string_value(input), Value::of(std::move(dict)));
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
      {"escape", filter_escape},     {"e", filter_escape},          {"attr", filter_attr},       {"format", filter_format},
  };
  return table;
}

// ---- tests ----

// Jinja2's test_lower and test_upper: str(value).islower() / .isupper(), for any value.
bool test_lower_or_upper(const Value& v, bool lower) {
  const std::string text = to_str(v);
  require_ascii_case(text, lower ? "the test 'lower'" : "the test 'upper'");
  bool cased = false;
  for (char c : text) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      cased = true;
      if (lower ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c))) return false;
    }
  }
  return cased;
}

// Python's value % divisor == 0 (odd: == 1) for the number tests: integers, or floats (3.0 is odd).
double python_modulo(const Value& v, const Value& divisor, const char* test) {
  if (!v.is_number() || !divisor.is_number()) throw ValueError(std::string("the test '") + test + "' takes numbers");
  if (v.is_integral() && divisor.is_integral()) {
    const int64_t x = v.as_integer(), y = divisor.as_integer();
    if (y == 0) throw ValueError("integer modulo by zero");
    if (y == -1) return 0;
    const int64_t r = x % y;
    return double(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
  }
  const double y = divisor.as_real();
  if (y == 0) throw ValueError("float modulo");
  double m = std::fmod(v.as_real(), y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return m;
}

const Value& argument(Args args) { return args[0]; }  // the count is checked before a test runs

const std::map<std::string, Test, std::less<>>& tests() {
  using T = Test;
  static const std::map<std::string, Test, std::less<>> table = {
      {"defined", T{[](const Value& v, Args) { return !v.is_undefined(); }, 0, "defined"}},
      {"undefined", T{[](const Value& v, Args) { return v.is_undefined(); }, 0, "undefined"}},
      {"none", T{[](const Value& v, Args) { return v.is_none(); }, 0, "none"}},
      {"boolean", T{[](const Value& v, Args) { return v.type == Value::Type::boolean; }, 0, "boolean"}},
      {"true", T{[](const Value& v, Args) { return v.type == Value::Type::boolean && v.boolean; }, 0, "true"}},
      {"false", T{[](const Value& v, Args) { return v.type == Value::Type::boolean && !v.boolean; }, 0, "false"}},
      {"integer", T{[](const Value& v, Args) { return v.type == Value::Type::integer; }, 0, "integer"}},
      {"float", T{[](const Value& v, Args) { return v.type == Value::Type::real; }, 0, "float"}},
      {"number", T{[](const Value& v, Args) { return v.is_number(); }, 0, "number"}},
      {"string", T{[](const Value& v, Args) { return v.is_string(); }, 0, "string"}},
      {"mapping", T{[](const Value& v, Args) { return v.is_mapping(); }, 0, "mapping"}},
      {"escaped", T{[](const Value& v, Args) { return v.is_markup(); }, 0, "escaped"}},
      // Jinja2's Undefined iterates (as empty), has a length and is callable: these tests say yes to it.
      {"iterable", T{[](const Value& v, Args) {
         return v.is_undefined() || v.is_string() || v.has_items() || v.is_mapping() || v.type == Value::Type::iterator;
       }, 0, "iterable"}},
      // A length and items by index: not an iterator or a dict view.
      {"sequence", T{[](const Value& v, Args) {
         return v.is_undefined() || v.is_string() || v.is_sequence() || v.type == Value::Type::range || v.is_mapping();
       }, 0, "sequence"}},
      {"callable", T{[](const Value& v, Args) { return v.is_undefined() || v.type == Value::Type::function; }, 0, "callable"}},
      {"filter", T{[](const Value& v, Args) { return v.is_string() && find_filter(v.text) != nullptr; }, 0, "filter"}},
      {"test", T{[](const Value& v, Args) { return v.is_string() && find_test(v.text) != nullptr; }, 0, "test"}},
      {"sameas", T{[](const Value& v, Args a) {
         const Value& o = argument(a);
         if (v.type != o.type || v.is_markup() != o.is_markup()) return false;
         if (v.has_items()) return v.items == o.items;
         if (v.is_mapping() || v.type == Value::Type::namespace_) return v.dict == o.dict;
         if (v.type == Value::Type::iterator) return v.iterator == o.iterator;
         return equal(v, o);
       }, 1, "sameas"}},
      {"lower", T{[](const Value& v, Args) { return test_lower_or_upper(v, true); }, 0, "lower"}},
      {"upper", T{[](const Value& v, Args) { return test_lower_or_upper(v, false); }, 0, "upper"}},
      {"odd", T{[](const Value& v, Args) { return python_modulo(v, Value::of(int64_t(2)), "odd") == 1; }, 0, "odd"}},
      {"even", T{[](const Value& v, Args) { return python_modulo(v, Value::of(int64_t(2)), "even") == 0; }, 0, "even"}},
      {"divisibleby", T{[](const Value& v, Args a) { return python_modulo(v, argument(a), "divisibleby") == 0; }, 1, "divisibleby"}},
      {"eq", T{[](const Value& v, Args a) { return equal(v, argument(a)); }, 1, "eq"}},
      {"equalto", T{[](const Value& v, Args a) { return equal(v, argument(a)); }, 1, "equalto"}},
      {"==", T{[](const Value& v, Args a) { return equal(v, argument(a)); }, 1, "=="}},
      {"ne", T{[](const Value& v, Args a) { return !equal(v, argument(a)); }, 1, "ne"}},
      {"!=", T{[](const Value& v, Args a) { return !equal(v, argument(a)); }, 1, "!="}},
      {"lt", T{[](const Value& v, Args a) { return less(v, argument(a)); }, 1, "lt"}},
      {"lessthan", T{[](const Value& v, Args a) { return less(v, argument(a)); }, 1, "lessthan"}},
      {"<", T{[](const Value& v, Args a) { return less(v, argument(a)); }, 1, "<"}},
      {"le", T{[](const Value& v, Args a) { return !less(argument(a), v); }, 1, "le"}},
      {"<=", T{[](const Value& v, Args a) { return !less(argument(a), v); }, 1, "<="}},
      {"gt", T{[](const Value& v, Args a) { return less(argument(a), v); }, 1, "gt"}},
      {"greaterthan", T{[](const Value& v, Args a) { return less(argument(a), v); }, 1, "greaterthan"}},
      {">", T{[](const Value& v, Args a) { return less(argument(a), v); }, 1, ">"}},
      {"ge", T{[](const Value& v, Args a) { return !less(v, argument(a)); }, 1, "ge"}},
      {">=", T{[](const Value& v, Args a) { return !less(v, argument(a)); }, 1, ">="}},
      {"in", T{[](const Value& v, Args a) { return contains(argument(a), v); }, 1, "in"}},
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
    case Value::Type::view:
    case Value::Type::range:
      return std::any_of(container.items->begin(), container.items->end(), [&](const Value& v) { return equal(v, item); });
    case Value::Type::iterator:  // Python's `in` walks an iterator up to the item
      for (Value v; container.iterator->next(v);) {
        if (equal(v, item)) return true;
      }
      return false;
    case Value::Type::dict:
      require_hashable(item);
      return item.is_string() && container.dict->find(item.text) != nullptr;
    default: throw ValueError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

FilterFunction find_filter(std::string_view name) {
  const auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

const Test* find_test(std::string_view name) {
  const auto it = tests().find(name);
  return it == tests().end() ? nullptr : &it->second;
}

bool Test::operator()(const Value& input, const Arguments& args) const {
  if (args.size() != arguments)
    throw ValueError(std::string("the test '") + name + "' takes " + (arguments ? "one argument" : "no arguments") + ", not " + std::to_string(args.size()));
  return function(input, args);
}

}  // namespace tilefire::jinja
