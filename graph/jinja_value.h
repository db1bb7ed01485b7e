#pragma once
// The values a chat template computes with, with Python's meaning: Jinja2 runs on Python objects, and a
// template's output depends on how Python prints, compares and measures them (None prints "None", strings
// are measured and sliced by code point, dicts keep their keys in order, 1 == 1.0 == True).
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tilefire::jinja {

// A failure while rendering, at a line of the template; Template turns it into an InputError.
struct RenderError : std::runtime_error {
  RenderError(int line, const std::string& message) : std::runtime_error(message), line(line) {}
  int line;
};
// A failure of a built-in, before the line is known (the evaluator adds it).
struct ValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Value;
struct Dict;
struct Iterator;
using List = std::vector<Value>;
using Arguments = std::vector<Value>;
using KeywordArguments = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(const Arguments&, const KeywordArguments&)>;

// How deep lists, tuples, dicts, views and iterators may nest in one another. Python fails near 1000 levels
// (its recursion limit) when it prints or compares them; Tilefire refuses a value deeper than this when it
// is made, so that printing, comparing and freeing it never recurse past the stack.
inline constexpr uint32_t kMaxValueDepth = 400;
// How large one value may grow: a template that builds more (doubling a string in a loop) is stopped
// before it takes gigabytes; its output is held to the same bound.
inline constexpr size_t kMaxStringBytes = size_t(64) << 20;
inline constexpr size_t kMaxListItems = size_t(1) << 20;

struct Value {
  // iterator: a Python iterator (the generators of select, map, unique and items, reverse's iterators);
  // view: a dict's items(), keys() or values(), a snapshot (the sandbox's dicts do not change).
  // range: Python's range object (range(0, 3) prints so; its items are in `items`, its bounds below).
  enum class Type { undefined, none, boolean, integer, real, string, list, tuple, dict, namespace_, function, iterator, view, range };
  Type type = Type::undefined;
  bool boolean = false;  // boolean; for string, a Markup (escape's and safe's results); for function, a macro
  uint32_t depth = 0;  // containers: 1 + the depth of the deepest value they hold (a namespace counts 1)
  int64_t integer = 0;
  double real = 0;
  // string; for undefined, why it is undefined ("'x' is undefined"); for function, its name; for view, its
  // Python type ("dict_items", "dict_keys", "dict_values")
  std::string text;
  std::shared_ptr<const List> items;  // list, tuple, view
  std::shared_ptr<Dict> dict;         // dict, namespace (a namespace's attributes can be set)
  std::shared_ptr<const Function> function;
  std::shared_ptr<Iterator> iterator;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // range

  static Value undefined(std::string why) { Value v; v.text = std::move(why); return v; }
  static Value none() { Value v; v.type = Type::none; return v; }
  static Value of(bool b) { Value v; v.type = Type::boolean; v.boolean = b; return v; }
  static Value of(int64_t i) { Value v; v.type = Type::integer; v.integer = i; return v; }
  static Value of(double d) { Value v; v.type = Type::real; v.real = d; return v; }
  static Value of(std::string s) {
    if (s.size() > kMaxStringBytes) throw ValueError("a string grows past 64 MiB");
    Value v;
    v.type = Type::string;
    v.text = std::move(s);
    return v;
  }
  static Value markup(std::string s) { Value v = of(std::move(s)); v.boolean = true; return v; }
  // A string made from `model`'s: a Markup when that is one (its slices, case changes, repeats, ...).
  static Value string_like(const Value& model, std::string s) { return model.is_markup() ? markup(std::move(s)) : of(std::move(s)); }
  static Value of(const char* s) { return of(std::string(s)); }
  static Value of(List list, Type type = Type::list);
  static Value of(std::shared_ptr<Dict> dict, Type type = Type::dict);
  static Value of(std::shared_ptr<Iterator> iterator, uint32_t source_depth);  // source_depth: what it walks
  static Value view(std::string type_name, List items);
  static Value range(int64_t start, int64_t stop, int64_t step);  // step != 0; at most kMaxListItems items
  // Python's len(range(start, stop, step)), step != 0, in 128 bits (stop - start can pass 64).
  static __int128 range_length(int64_t start, int64_t stop, int64_t step);
  static Value of_function(std::string name, Function function);
  static Value of_json(const nlohmann::ordered_json& json);

  bool is_undefined() const { return type == Type::undefined; }
  bool is_none() const { return type == Type::none; }
  bool is_string() const { return type == Type::string; }
  bool is_sequence() const { return type == Type::list || type == Type::tuple; }
  bool is_mapping() const { return type == Type::dict; }
  bool is_markup() const { return type == Type::string && boolean; }
  bool is_macro() const { return type == Type::function && boolean; }
  bool has_items() const { return is_sequence() || type == Type::view || type == Type::range; }  // items holds them
  bool is_number() const { return type == Type::integer || type == Type::real || type == Type::boolean; }
  bool is_integral() const { return type == Type::integer || type == Type::boolean; }  // Python's int (bool is one)
  int64_t as_integer() const { return type == Type::boolean ? int64_t(boolean) : integer; }
  double as_real() const { return type == Type::real ? real : double(as_integer()); }
  const List& list() const { return *items; }
};

// A Python dict with string keys: insertion order, a key set again keeps its place. Also the attributes of
// a namespace, and of a loop's `loop` object (which a template cannot assign to).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  bool loop_context = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

// A Python iterator: walked once, each item it gives is gone from it; always true, without a length.
// A generator's code runs when its first item is asked for (a wrong argument of select fails then, not
// when the filter is applied), as Python runs a generator's.
struct Iterator {
  using Advance = std::function<bool(Value& next)>;  // the next item; false when there is none
  std::string type_name;                             // "generator", "list_reverseiterator", ...
  std::function<Advance()> start;                    // a generator's code, until it has run
  Advance advance;
  bool next(Value& out);
};

// Python's type name of a value, for messages ("str", "int", "list", "dict", "NoneType").
std::string type_name(const Value& value);
// Python's bool(value): empty strings and containers, 0, None and undefined are false.
bool truthy(const Value& value);
// str(value) as Jinja2 prints it: undefined is empty, None "None", True "True", floats as Python's repr,
// lists and dicts as Python's repr.
std::string to_str(const Value& value);
// repr(value): strings quoted and escaped as Python does.
std::string to_repr(const Value& value);
// Python's repr of a float: the shortest digits that read back the same, "1.0", "1e+20", "1.5e-07".
std::string float_repr(double value);
// Python's ==, with Jinja2's undefined (equal only to undefined).
bool equal(const Value& a, const Value& b);
// Python's <, for numbers, strings and sequences; ValueError otherwise.
bool less(const Value& a, const Value& b);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter calls it.
// indent: none (one line), an integer or a string. ValueError for what JSON cannot hold (undefined, a
// function).
struct JsonStyle {
  bool ensure_ascii = false;
  bool indented = false;
  std::string indent;  // per level, when indented
  std::string item_separator = ", ", key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonStyle& style);

// What `for x in value` walks in Python: a list's or tuple's items, a string's characters, a dict's keys;
// nothing for undefined (Jinja2's Undefined iterates as empty). ValueError for what is not iterable.
List iterate(const Value& value);
// len(value) (a string's code points); Jinja2's Undefined has length 0. ValueError for what has none.
int64_t length(const Value& value);
// Python's str.isspace for one character: White_Space and the separators U+001C..U+001F.
bool is_python_space(char32_t c);
// str.strip / lstrip / rstrip: `chars` null strips Python's white space, else the characters it holds.
std::string strip(const std::string& text, const std::string* chars, bool left, bool right);
// The text of `value` with only ASCII letters changed, for the case filters and methods. ValueError when
// it holds a non-ASCII character: Python changes their case too, and a wrong case must not pass silently.
void require_ascii_case(const std::string& text, const char* operation);

// A template's raise_exception(message).
struct TemplateRaised : ValueError {
  using ValueError::ValueError;
};

// Code points of a UTF-8 string (Python indexes, measures and slices strings by code point). ValueError
// when the bytes are not UTF-8.
std::u32string code_points(const std::string& text);
std::string utf8(const std::u32string& code_points);

}  // namespace tilefire::jinja
