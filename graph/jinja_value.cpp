// Python's meaning of the values a chat template computes with (graph/jinja_value.h).
#include "graph/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "graph/jinja.h"
#include "graph/json_file.h"
#include "graph/unicode.h"
#include "tilefire/errors.h"

namespace tilefire::jinja {

namespace {

uint32_t checked_depth(uint32_t deepest_item) {
  if (deepest_item >= kMaxValueDepth) throw ValueError("a value nests lists and dicts more than " + std::to_string(kMaxValueDepth) + " levels deep");
  return deepest_item + 1;
}

uint32_t depth_of(const List& list) {
  if (list.size() > kMaxListItems) throw ValueError("a list grows past " + std::to_string(kMaxListItems) + " items");
  uint32_t deepest = 0;
  for (const Value& item : list) deepest = std::max(deepest, item.depth);
  return checked_depth(deepest);
}

}  // namespace

Value Value::of(List list, Type type) {
  Value v;
  v.type = type;
  v.depth = depth_of(list);
  v.items = std::make_shared<const List>(std::move(list));
  return v;
}

Value Value::of(std::shared_ptr<Dict> dict, Type type) {
  Value v;
  v.type = type;
  // A namespace counts one level: its attributes can change after it is put in a list, and can hold the
  // namespace itself. The renderer empties every namespace when it is done, so none outlives a render.
  uint32_t deepest = 0;
  if (type == Type::dict) {
    for (const auto& [key, item] : dict->entries) deepest = std::max(deepest, item.depth);
  }
  v.depth = checked_depth(deepest);
  v.dict = std::move(dict);
  return v;
}

Value Value::of(std::shared_ptr<Iterator> iterator, uint32_t source_depth) {
  Value v;
  v.type = Type::iterator;
  v.depth = checked_depth(source_depth);
  v.iterator = std::move(iterator);
  return v;
}

Value Value::view(std::string type_name, List items) {
  Value v = of(std::move(items));
  v.type = Type::view;
  v.text = std::move(type_name);
  return v;
}

__int128 Value::range_length(int64_t start, int64_t stop, int64_t step) {
  const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
  return span > 0 ? (span - 1) / (step > 0 ? __int128(step) : -__int128(step)) + 1 : 0;
}

Value Value::range(int64_t start, int64_t stop, int64_t step) {
  const __int128 count = range_length(start, stop, step);
  if (count > __int128(kMaxListItems)) throw ValueError("a range of more than " + std::to_string(kMaxListItems) + " items");
  List items;
  for (int64_t k = 0; k < int64_t(count); ++k) items.push_back(of(int64_t(start + __int128(k) * step)));
  Value v = of(std::move(items));
  v.type = Type::range;
  v.range_start = start;
  v.range_stop = stop;
  v.range_step = step;
  return v;
}

bool Iterator::next(Value& out) {
  if (start) {
    const std::function<Advance()> code = std::move(start);
    start = nullptr;
    advance = code();
  }
  if (!advance) return false;
  if (advance(out)) return true;
  advance = nullptr;  // exhausted, and what it held is let go
  return false;
}

Value Value::of_function(std::string name, Function function) {
  Value v;
  v.type = Type::function;
  v.text = std::move(name);
  v.function = std::make_shared<const Function>(std::move(function));
  return v;
}

Value Value::of_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return of(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return of(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) throw ValueError("the integer " + std::to_string(u) + " is too large");
      return of(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return of(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return of(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List list;
      list.reserve(json.size());
      for (const auto& item : json) list.push_back(of_json(item));
      return of(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto dict = std::make_shared<Dict>();
      for (const auto& [key, item] : json.items()) dict->set(key, of_json(item));
      return of(std::move(dict));
    }
    default: throw ValueError("a JSON value of an unknown kind");
  }
}

namespace {

// What the parsed value must not hold, found with nlohmann's SAX parser (which keeps no stack of calls):
// integers it would read as floats because they are past 64 bits (it gives the number's text: digits and
// a sign only), and lists and dicts nested deeper than a template's values may be (copying or converting
// a value 100,000 levels deep recurses that deep, past the stack).
struct ChatJsonScan : nlohmann::json_sax<nlohmann::ordered_json> {
  std::string found;  // the integer past 64 bits
  uint32_t depth = 0;
  bool too_deep = false;
  bool open() {
    too_deep = ++depth > kMaxValueDepth;
    return !too_deep;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t& text) override {
    if (text.find_first_not_of("-0123456789") == std::string::npos) found = text;
    return found.empty();
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return --depth, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

}  // namespace

nlohmann::ordered_json parse_variables_json(std::string_view text, const std::string& what) {
  ChatJsonScan scan;
  nlohmann::ordered_json::sax_parse(text, &scan);  // false on a syntax error too: parse names that below
  if (scan.too_deep)
    throw InputError(what + ": lists and dicts nest more than " + std::to_string(kMaxValueDepth) + " levels deep");
  if (!scan.found.empty())
    throw InputError(what + ": the integer " + scan.found + " is past 64 bits (Python's integers have no bound; a chat template's in Tilefire have 64 bits)");
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& error) {
    throw_invalid_json(error, what);
  }
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

std::string type_name(const Value& value) {
  switch (value.type) {
    case Value::Type::undefined: return "Undefined";
    case Value::Type::none: return "NoneType";
    case Value::Type::boolean: return "bool";
    case Value::Type::integer: return "int";
    case Value::Type::real: return "float";
    case Value::Type::string: return "str";
    case Value::Type::list: return "list";
    case Value::Type::tuple: return "tuple";
    case Value::Type::dict: return "dict";
    case Value::Type::namespace_: return value.dict->loop_context ? "LoopContext" : "Namespace";
    case Value::Type::function: return "function";
    case Value::Type::iterator: return value.iterator->type_name;
    case Value::Type::view: return value.text;
    case Value::Type::range: return "range";
  }
  return "?";
}

bool truthy(const Value& value) {
  switch (value.type) {
    case Value::Type::undefined:
    case Value::Type::none: return false;
    case Value::Type::boolean: return value.boolean;
    case Value::Type::integer: return value.integer != 0;
    case Value::Type::real: return value.real != 0;
    case Value::Type::string: return !value.text.empty();
    case Value::Type::list:
    case Value::Type::tuple:
    case Value::Type::view:
    case Value::Type::range: return !value.items->empty();
    case Value::Type::dict: return !value.dict->entries.empty();
    case Value::Type::namespace_:
    case Value::Type::function:
    case Value::Type::iterator: return true;
  }
  return false;
}

std::u32string code_points(const std::string& text) {
  std::u32string out;
  if (const auto bad = unicode::decode_utf8(text, out)) throw ValueError("a string is not UTF-8 at byte " + std::to_string(*bad));
  return out;
}

std::string utf8(const std::u32string& code_points) { return unicode::encode_utf8(code_points); }

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // The shortest digits that read back as `value`, then Python's layout: positional when the exponent is
  // in [-4, 16), else d.ddde+XX.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  const std::string scientific(buffer, result.ptr);
  const size_t e = scientific.find('e');
  std::string digits;
  bool negative = false;
  for (size_t i = 0; i < e; ++i) {
    if (scientific[i] == '-') negative = true;
    else if (scientific[i] != '.') digits += scientific[i];
  }
  const int exponent = std::stoi(scientific.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  const int point = exponent + 1;  // digits before the decimal point
  if (point <= 0) return out + "0." + std::string(size_t(-point), '0') + digits;
  if (size_t(point) >= digits.size()) return out + digits + std::string(size_t(point) - digits.size(), '0') + ".0";
  return out + digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
}

namespace {

// Python's str.isprintable, as far as repr needs it: the C0 and C1 controls, the separators other than the
// space, and the common format characters are escaped; other characters are kept.
bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if (c == U' ') return true;
  if (unicode::is_white_space(c)) return false;
  if ((c >= 0x200b && c <= 0x200f) || (c >= 0x2028 && c <= 0x202e) || (c >= 0x2060 && c <= 0x2064) || c == 0xfeff) return false;
  if (c >= 0xe000 && c <= 0xf8ff) return false;  // private use
  return true;
}

std::string string_repr(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos, has_double = text.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : code_points(text)) {
    char escape[16];
    if (c == char32_t(quote) || c == U'\\') {
      out += '\\';
      out += char(c);
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (!printable(c)) {
      std::snprintf(escape, sizeof escape, c <= 0xff ? "\\x%02x" : c <= 0xffff ? "\\u%04x" : "\\U%08x", unsigned(c));
      out += escape;
    } else {
      unicode::append_utf8(c, out);
    }
  }
  return out + quote;
}

// Python's printing of nested values: a dict met again inside itself (a namespace holding itself) prints
// as {...}, as Python's repr does; a chain of namespaces deeper than kMaxValueDepth is refused, where
// Python runs out of recursion.
class Printer {
 public:
  std::string str(const Value& value) {
    switch (value.type) {
      case Value::Type::undefined: return "";
      case Value::Type::none: return "None";
      case Value::Type::boolean: return value.boolean ? "True" : "False";
      case Value::Type::integer: return std::to_string(value.integer);
      case Value::Type::real: return float_repr(value.real);
      case Value::Type::string: return value.text;
      case Value::Type::list:
      case Value::Type::tuple: return sequence(value);
      case Value::Type::view: return value.text + "(" + sequence(Value::of(*value.items)) + ")";
      case Value::Type::range:
        return "range(" + std::to_string(value.range_start) + ", " + std::to_string(value.range_stop) +
               (value.range_step != 1 ? ", " + std::to_string(value.range_step) : std::string()) + ")";
      case Value::Type::dict: return dict(*value.dict);
      case Value::Type::namespace_:
        if (value.dict->loop_context) return "<LoopContext " + str(*value.dict->find("index")) + "/" + str(*value.dict->find("length")) + ">";
        return "<Namespace " + dict(*value.dict) + ">";
      case Value::Type::function:
        if (value.is_macro()) return "<Macro '" + value.text + "'>";
        throw ValueError("the built-in function " + value.text + " cannot be printed (Python prints its memory address)");
      case Value::Type::iterator:
        throw ValueError("a " + value.iterator->type_name + " object cannot be printed (Python prints its memory address): make it a list with |list");
    }
    return "";
  }
  // Inside a list or dict, a string is quoted (a Markup as Markup('...')) and undefined is Undefined.
  std::string repr(const Value& value) {
    if (value.is_markup()) return "Markup(" + string_repr(value.text) + ")";
    if (value.is_string()) return string_repr(value.text);
    if (value.is_undefined()) return "Undefined";
    return str(value);
  }

 private:
  struct Nested {
    Printer& printer;
    explicit Nested(Printer& p) : printer(p) {
      if (++printer.depth_ > kMaxValueDepth) throw ValueError("a value nests too deep to print (more than " + std::to_string(kMaxValueDepth) + " levels)");
    }
    ~Nested() { --printer.depth_; }
  };

  std::string sequence(const Value& value) {
    const bool tuple = value.type == Value::Type::tuple;
    if (std::find(open_.begin(), open_.end(), value.items.get()) != open_.end()) return tuple ? "(...)" : "[...]";
    const Nested nested(*this);
    open_.push_back(value.items.get());
    std::string out = tuple ? "(" : "[";
    for (size_t i = 0; i < value.items->size(); ++i) {
      if (i) out += ", ";
      out += repr((*value.items)[i]);
    }
    open_.pop_back();
    if (tuple && value.items->size() == 1) out += ",";
    return out + (tuple ? ")" : "]");
  }

  std::string dict(const Dict& dict) {
    if (std::find(open_.begin(), open_.end(), &dict) != open_.end()) return "{...}";
    const Nested nested(*this);
    open_.push_back(&dict);
    std::string out = "{";
    for (size_t i = 0; i < dict.entries.size(); ++i) {
      if (i) out += ", ";
      out += string_repr(dict.entries[i].first) + ": " + repr(dict.entries[i].second);
    }
    open_.pop_back();
    return out + "}";
  }

  std::vector<const void*> open_;  // the dicts and item lists being printed, outermost first
  uint32_t depth_ = 0;
};

}  // namespace

std::string to_repr(const Value& value) { return Printer().repr(value); }

std::string to_str(const Value& value) {
  if (value.is_string()) return value.text;  // the common case, without a Printer
  return Printer().str(value);
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_integer() == b.as_integer();
    return a.as_real() == b.as_real();
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::undefined:
    case Value::Type::none: return true;
    case Value::Type::string: return a.text == b.text;
    case Value::Type::list:
    case Value::Type::tuple:
    case Value::Type::range:  // ranges are equal when they give the same numbers
      return a.items->size() == b.items->size() && std::equal(a.items->begin(), a.items->end(), b.items->begin(), equal);
    case Value::Type::dict: {
      if (a.dict->entries.size() != b.dict->entries.size()) return false;
      for (const auto& [key, item] : a.dict->entries) {
        const Value* other = b.dict->find(key);
        if (!other || !equal(item, *other)) return false;
      }
      return true;
    }
    case Value::Type::namespace_: return a.dict == b.dict;
    case Value::Type::function: return a.function == b.function;
    case Value::Type::iterator: return a.iterator == b.iterator;
    case Value::Type::view: {
      if (a.text != b.text) return false;
      if (a.text == "dict_values") return a.items == b.items;  // Python compares values views by identity
      // Keys and items views compare as sets.
      const auto holds = [](const List& items, const Value& item) { return std::any_of(items.begin(), items.end(), [&](const Value& v) { return equal(v, item); }); };
      return a.items->size() == b.items->size() && std::all_of(a.items->begin(), a.items->end(), [&](const Value& v) { return holds(*b.items, v); });
    }
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_integer() < b.as_integer();
    return a.as_real() < b.as_real();
  }
  if (a.is_string() && b.is_string()) return a.text < b.text;  // UTF-8 byte order is code point order
  if (a.is_sequence() && a.type == b.type) {
    const List &x = a.list(), &y = b.list();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw ValueError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

namespace {

void append_json_string(const std::string& text, bool ensure_ascii, std::string& out) {
  out += '"';
  char escape[16];
  for (char32_t c : code_points(text)) {
    switch (c) {
      case U'"': out += "\\\""; continue;
      case U'\\': out += "\\\\"; continue;
      case U'\n': out += "\\n"; continue;
      case U'\r': out += "\\r"; continue;
      case U'\t': out += "\\t"; continue;
      case U'\b': out += "\\b"; continue;
      case U'\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f && c <= 0xffff)) {
      std::snprintf(escape, sizeof escape, "\\u%04x", unsigned(c));
      out += escape;
    } else if (ensure_ascii && c > 0xffff) {  // a surrogate pair
      const unsigned v = unsigned(c) - 0x10000;
      std::snprintf(escape, sizeof escape, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      out += escape;
    } else {
      unicode::append_utf8(c, out);
    }
  }
  out += '"';
}

void append_json(const Value& value, const JsonStyle& style, int level, std::string& out) {
  const auto newline = [&](int depth) {
    if (out.size() + style.indent.size() * size_t(depth) > kMaxStringBytes) throw ValueError("tojson makes a string past 64 MiB");
    out += '\n';
    for (int i = 0; i < depth; ++i) out += style.indent;
  };
  switch (value.type) {
    case Value::Type::none: out += "null"; return;
    case Value::Type::boolean: out += value.boolean ? "true" : "false"; return;
    case Value::Type::integer: out += std::to_string(value.integer); return;
    case Value::Type::real:
      if (std::isnan(value.real)) out += "NaN";
      else if (std::isinf(value.real)) out += value.real > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(value.real);
      return;
    case Value::Type::string: append_json_string(value.text, style.ensure_ascii, out); return;
    case Value::Type::list:
    case Value::Type::tuple: {
      if (value.items->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < value.items->size(); ++i) {
        if (i) out += style.item_separator;
        if (style.indented) newline(level + 1);
        append_json((*value.items)[i], style, level + 1, out);
      }
      if (style.indented) newline(level);
      out += ']';
      return;
    }
    case Value::Type::dict: {
      if (value.dict->entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.dict->entries) entries.push_back(&entry);
      if (style.sort_keys) std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += style.item_separator;
        if (style.indented) newline(level + 1);
        append_json_string(entries[i]->first, style.ensure_ascii, out);
        out += style.key_separator;
        append_json(entries[i]->second, style, level + 1, out);
      }
      if (style.indented) newline(level);
      out += '}';
      return;
    }
    default: throw ValueError("Object of type " + type_name(value) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& value, const JsonStyle& style) {
  std::string out;
  append_json(value, style, 0, out);
  return out;
}

}  // namespace tilefire::jinja
