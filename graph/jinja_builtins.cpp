// The filters and tests of chat templates: Jinja2's built-ins with their Python meaning, and
// transformers' tojson.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "graph/jinja_filters.h"

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
      {"iterable",
       [](const Value& v, Args) {
         return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping() || v.type == Value::Type::iterator || v.type == Value::Type::view;
       }},
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
    case Value::Type::view:
      return std::any_of(container.items->begin(), container.items->end(), [&](const Value& v) { return equal(v, item); });
    case Value::Type::iterator:  // Python's `in` walks an iterator up to the item
      for (Value v; container.iterator->next(v);) {
        if (equal(v, item)) return true;
      }
      return false;
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
