// Lookups (attribute, item, slice), the methods of strings and dicts, and the globals of chat templates,
// with Jinja2's sandboxed meaning: a missing attribute or item is undefined, not an error.
#include <algorithm>
#include <cstring>
#include <limits>

#include "graph/jinja_syntax.h"
#include "graph/unicode.h"

namespace tilefire::jinja {

void expect_argument_count(const Arguments& args, const KeywordArguments& kwargs, size_t least, size_t most, const std::string& method) {
  if (!kwargs.empty()) throw ValueError(method + "() takes no keyword arguments here");
  if (args.size() >= least && args.size() <= most) return;
  const std::string count = least == most ? std::to_string(most)
                            : least == 0  ? "at most " + std::to_string(most)
                                          : std::to_string(least) + " to " + std::to_string(most);
  throw ValueError(method + "() takes " + count + (most == 1 ? " argument" : " arguments"));
}

List iterate(const Value& value) {
  switch (value.type) {
    case Value::Type::undefined: return {};
    case Value::Type::list:
    case Value::Type::tuple:
    case Value::Type::view:
    case Value::Type::range: return *value.items;
    case Value::Type::iterator: {
      List items;
      for (Value item; value.iterator->next(item);) {
        if (items.size() == kMaxListItems) throw ValueError("an iterator gives more than " + std::to_string(kMaxListItems) + " items");
        items.push_back(std::move(item));
      }
      return items;
    }
    case Value::Type::string: {
      const std::u32string points = code_points(value.text);
      if (points.size() > kMaxListItems) throw ValueError("a string of more than " + std::to_string(kMaxListItems) + " characters walked one by one");
      List chars;
      for (char32_t c : points) chars.push_back(Value::of(utf8(std::u32string(1, c))));  // plain str, a Markup's too
      return chars;
    }
    case Value::Type::dict: {
      List keys;
      for (const auto& entry : value.dict->entries) keys.push_back(Value::of(entry.first));
      return keys;
    }
    default: throw ValueError(std::string("'") + type_name(value) + "' object is not iterable");
  }
}

int64_t length(const Value& value) {
  switch (value.type) {
    case Value::Type::undefined: return 0;
    case Value::Type::string: return int64_t(code_points(value.text).size());
    case Value::Type::list:
    case Value::Type::tuple:
    case Value::Type::view:
    case Value::Type::range: return int64_t(value.items->size());
    case Value::Type::dict: return int64_t(value.dict->entries.size());
    default: throw ValueError("object of type '" + type_name(value) + "' has no len()");
  }
}

bool is_python_space(char32_t c) { return unicode::is_white_space(c) || (c >= 0x1c && c <= 0x1f); }

std::string strip(const std::string& text, const std::string* chars, bool left, bool right) {
  const std::u32string points = code_points(text);
  const std::u32string set = chars ? code_points(*chars) : std::u32string();
  const auto stripped = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_python_space(c); };
  size_t begin = 0, end = points.size();
  if (left) {
    while (begin < end && stripped(points[begin])) ++begin;
  }
  if (right) {
    while (end > begin && stripped(points[end - 1])) --end;
  }
  return utf8(points.substr(begin, end - begin));
}

namespace {

// The blocks that hold every character with a case mapping (checked against Python's str.upper, lower,
// title and casefold over all code points, with Garay, new in Unicode 16, added): the scripts with case
// (Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic, Deseret, Osage, Vithkuqi,
// Old Hungarian, Warang Citi, Medefaidrin, Adlam, Garay), letterlike symbols, fullwidth Latin, and the
// non-letters with case: U+0345, Roman numerals, circled and squared letters.
constexpr std::pair<char32_t, char32_t> kCasedBlocks[] = {
    {0xB5, 0xB5},       {0xC0, 0x2AF},      {0x345, 0x345},     {0x370, 0x52F},     {0x531, 0x58F},     {0x10A0, 0x10FF},
    {0x13A0, 0x13FF},   {0x1C80, 0x1CBF},   {0x1D00, 0x1DBF},   {0x1E00, 0x1FFF},   {0x2100, 0x214F},   {0x2160, 0x2188},
    {0x24B6, 0x24E9},   {0x2C00, 0x2D2F},   {0xA640, 0xA69F},   {0xA720, 0xA7FF},   {0xAB30, 0xABBF},   {0xFB00, 0xFB17},
    {0xFF21, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104FF}, {0x10570, 0x105BF}, {0x10C80, 0x10CFF}, {0x10D40, 0x10D8F},
    {0x118A0, 0x118FF}, {0x16E40, 0x16E9F}, {0x1E900, 0x1E95F}, {0x1F130, 0x1F189},
};

bool may_have_case(char32_t c) {
  const bool special = c == 0x345 || (c >= 0x2160 && c <= 0x2188) || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F189);
  if (!special && !unicode::is_letter(c)) return false;
  return std::any_of(std::begin(kCasedBlocks), std::end(kCasedBlocks), [c](const auto& block) { return c >= block.first && c <= block.second; });
}

}  // namespace

void require_ascii_case(const std::string& text, const char* operation) {
  // Only a character that may have a case is refused: emoji, punctuation, CJK, Arabic, ... have none, and
  // Python leaves them as Tilefire does.
  if (std::all_of(text.begin(), text.end(), [](unsigned char byte) { return byte < 0x80; })) return;
  for (char32_t c : code_points(text)) {
    if (c >= 0x80 && may_have_case(c))
      throw ValueError(std::string(operation) + " of text with non-ASCII letters is not supported (Tilefire changes the case of ASCII letters only)");
  }
}

namespace {

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; }
bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

const std::string& string_argument(const Arguments& args, size_t i, const char* method) {
  if (args.size() <= i || !args[i].is_string()) throw ValueError(std::string(method) + "() takes a string argument");
  return args[i].text;
}

std::vector<std::string> split(const std::string& text, const Value* separator, int64_t max_splits) {
  std::vector<std::string> parts;
  if (!separator || separator->is_none()) {  // runs of white space, no empty parts
    const std::u32string points = code_points(text);
    size_t i = 0;
    while (i < points.size()) {
      while (i < points.size() && is_python_space(points[i])) ++i;
      if (i == points.size()) break;
      if (max_splits >= 0 && int64_t(parts.size()) == max_splits) {  // the rest, its trailing white space kept
        parts.push_back(utf8(points.substr(i)));
        break;
      }
      const size_t start = i;
      while (i < points.size() && !is_python_space(points[i])) ++i;
      parts.push_back(utf8(points.substr(start, i - start)));
    }
    return parts;
  }
  if (!separator->is_string()) throw ValueError("split() takes a string separator");
  const std::string& sep = separator->text;
  if (sep.empty()) throw ValueError("empty separator");
  size_t start = 0;
  while (max_splits < 0 || int64_t(parts.size()) < max_splits) {
    const size_t at = text.find(sep, start);
    if (at == std::string::npos) break;
    parts.push_back(text.substr(start, at - start));
    start = at + sep.size();
  }
  parts.push_back(text.substr(start));
  return parts;
}

Value string_list(const std::vector<std::string>& parts) {
  List list;
  for (const std::string& part : parts) list.push_back(Value::of(part));
  return Value::of(std::move(list));
}

bool starts_or_ends(const std::string& text, const Value& affix, bool starts, const char* method) {
  const auto one = [&](const Value& v) {
    if (!v.is_string()) throw ValueError(std::string(method) + "() takes a string or a tuple of strings");
    const std::string& a = v.text;
    return a.size() <= text.size() && (starts ? text.compare(0, a.size(), a) == 0 : text.compare(text.size() - a.size(), a.size(), a) == 0);
  };
  if (affix.type == Value::Type::tuple) return std::any_of(affix.items->begin(), affix.items->end(), one);
  return one(affix);
}

Value string_method(const std::string& text, const std::string& name) {
  using Args = const Arguments&;
  using Kwargs = const KeywordArguments&;
  const auto method = [&](Function f) { return Value::of_function("str." + name, std::move(f)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return method([text, left, right](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 0, 1, "strip");
      if (!args.empty() && !args[0].is_none() && !args[0].is_string()) throw ValueError("strip arg must be None or str");
      return Value::of(strip(text, args.empty() || args[0].is_none() ? nullptr : &args[0].text, left, right));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return method([text, starts](Args args, Kwargs kwargs) {
      const char* name = starts ? "startswith" : "endswith";
      expect_argument_count(args, kwargs, 1, 3, name);
      if (args.size() == 1) return Value::of(starts_or_ends(text, args[0], starts, name));
      // text[start:end], as Python bounds it (a start past the end matches nothing, "" included).
      const std::u32string points = code_points(text);
      const int64_t n = int64_t(points.size());
      int64_t start = 0, end = 0;
      adjust_indices(args, 1, n, start, end);
      if (start > end) {  // nothing matches, and Python checks each affix's type on the way
        for (const Value& affix : args[0].type == Value::Type::tuple ? *args[0].items : List{args[0]}) {
          if (!affix.is_string()) throw ValueError(std::string(name) + "() takes a string or a tuple of strings");
        }
        return Value::of(false);
      }
      return Value::of(starts_or_ends(utf8(points.substr(size_t(start), size_t(end - start))), args[0], starts, name));
    });
  }
  if (name == "split") {
    return method([text](Args args, Kwargs kwargs) {
      const SplitArguments given = split_arguments(args, kwargs, "split");
      return string_list(split(text, given.separator, given.max_splits));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return method([text, name](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 0, 0, name.c_str());
      require_ascii_case(text, name.c_str());
      std::string out = text;
      for (size_t i = 0; i < out.size(); ++i) {
        if (name == "upper") out[i] = ascii_upper(out[i]);
        else if (name == "lower") out[i] = ascii_lower(out[i]);
        else if (name == "capitalize") out[i] = i == 0 ? ascii_upper(out[i]) : ascii_lower(out[i]);
        else out[i] = i > 0 && ascii_letter(text[i - 1]) ? ascii_lower(out[i]) : ascii_upper(out[i]);  // str.title
      }
      return Value::of(out);
    });
  }
  if (name == "replace") {
    return method([text](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 2, 3, "replace");
      const std::string& old = string_argument(args, 0, "replace");
      const std::string& replacement = string_argument(args, 1, "replace");
      if (args.size() > 2 && !args[2].is_integral()) throw ValueError("replace() takes an integer count");
      int64_t count = args.size() > 2 ? args[2].as_integer() : -1;
      std::string out;
      if (old.empty()) {  // Python inserts the replacement before every character and at the end
        const std::u32string points = code_points(text);
        for (size_t i = 0; i <= points.size(); ++i) {
          if (count != 0) {
            out += replacement;
            --count;
          }
          if (i < points.size()) unicode::append_utf8(points[i], out);
        }
        return Value::of(out);
      }
      size_t start = 0;
      while (count != 0) {
        const size_t at = text.find(old, start);
        if (at == std::string::npos) break;
        out += text.substr(start, at - start) + replacement;
        start = at + old.size();
        --count;
      }
      return Value::of(out + text.substr(start));
    });
  }
  if (name == "find" || name == "count") {
    const bool find = name == "find";
    return method([text, find](Args args, Kwargs kwargs) {
      // str.find(sub[, start[, end]]) and str.count: positions in code points, bounds as a slice's.
      expect_argument_count(args, kwargs, 1, 3, find ? "find" : "count");
      const std::u32string haystack = code_points(text);
      const std::u32string needle = code_points(string_argument(args, 0, find ? "find" : "count"));
      const int64_t n = int64_t(haystack.size());
      int64_t start = 0, end = 0;
      adjust_indices(args, 1, n, start, end);
      if (start > end) return Value::of(int64_t(find ? -1 : 0));
      const std::u32string window = haystack.substr(size_t(start), size_t(end - start));
      if (find) {
        const size_t at = window.find(needle);
        return Value::of(at == std::u32string::npos ? int64_t(-1) : start + int64_t(at));
      }
      if (needle.empty()) return Value::of(int64_t(window.size() + 1));
      int64_t count = 0;
      for (size_t at = window.find(needle); at != std::u32string::npos; at = window.find(needle, at + needle.size())) ++count;
      return Value::of(count);
    });
  }
  if (name == "join") {
    return method([text](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 1, 1, "join");
      std::string out;
      const List items = iterate(args[0]);
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string()) throw ValueError("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) + " found");
        if (i) out += text;
        out += items[i].text;
      }
      return Value::of(out);
    });
  }
  return more_string_methods(text, name);
}

Value dict_method(const std::shared_ptr<Dict>& dict, const std::string& name) {
  using Args = const Arguments&;
  using Kwargs = const KeywordArguments&;
  if (name == "items" || name == "keys" || name == "values") {
    return Value::of_function("dict." + name, [dict, name](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 0, 0, name.c_str());
      List out;
      for (const auto& [key, value] : dict->entries) {
        if (name == "items") out.push_back(Value::of(List{Value::of(key), value}, Value::Type::tuple));
        else out.push_back(name == "keys" ? Value::of(key) : value);
      }
      return Value::view("dict_" + name, std::move(out));
    });
  }
  if (name == "get") {
    return Value::of_function("dict.get", [dict](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 1, 2, "get");
      require_hashable(args[0]);
      const Value* found = args[0].is_string() ? dict->find(args[0].text) : nullptr;
      return found ? *found : args.size() > 1 ? args[1] : Value::none();
    });
  }
  if (name == "copy") {  // the sandbox's dicts do not change: a copy is the same dict
    return Value::of_function("dict.copy", [dict](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 0, 0, "copy");
      return Value::of(dict);
    });
  }
  return Value::undefined("'dict object' has no attribute '" + name + "'");
}

// The attributes a Python dict has besides the methods above: `d.update` is the method (which the
// sandbox turns into undefined), never the item "update".
bool is_other_dict_attribute(const std::string& name) {
  static const char* const names[] = {"clear", "fromkeys", "pop", "popitem", "setdefault", "update", "__class__",
                                      "__class_getitem__", "__contains__", "__delattr__", "__delitem__", "__dir__", "__doc__",
                                      "__eq__", "__format__", "__ge__", "__getattribute__", "__getitem__", "__getstate__", "__gt__",
                                      "__hash__", "__init__", "__init_subclass__", "__ior__", "__iter__", "__le__", "__len__", "__lt__",
                                      "__ne__", "__new__", "__or__", "__reduce__", "__reduce_ex__", "__repr__", "__reversed__",
                                      "__ror__", "__setattr__", "__setitem__", "__sizeof__", "__str__", "__subclasshook__"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

}  // namespace

void require_hashable(const Value& value) {
  if (value.type == Value::Type::list || value.type == Value::Type::dict || value.type == Value::Type::view)
    throw ValueError("unhashable type: '" + type_name(value) + "'");
  if (value.type == Value::Type::tuple) {
    for (const Value& item : *value.items) require_hashable(item);
  }
}

Value method_of(const Value& object, const std::string& name) {
  if (object.is_markup()) {
    // Markup's methods escape their arguments and give Markup; Tilefire does not run them.
    return Value::of_function("Markup." + name, [name](const Arguments&, const KeywordArguments&) -> Value {
      throw ValueError("the method " + name + "() of escape's or safe's result (a Markup) is not supported in chat templates");
    });
  }
  if (object.is_string()) return string_method(object.text, name);
  if (object.is_mapping()) return dict_method(object.dict, name);
  return Value::undefined(std::string("'") + type_name(object) + " object' has no attribute '" + name + "'");
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) throw ValueError(object.text.empty() ? "undefined value" : object.text);
  if (object.type == Value::Type::range) {
    if (name == "start") return Value::of(object.range_start);
    if (name == "stop") return Value::of(object.range_stop);
    if (name == "step") return Value::of(object.range_step);
  }
  if (object.is_number()) {  // the number attributes of Python's int and float (a bool is an int)
    if (name == "real") return object.is_integral() ? Value::of(object.as_integer()) : object;
    if (name == "imag") return object.is_integral() ? Value::of(int64_t(0)) : Value::of(0.0);
    if (object.is_integral() && name == "numerator") return Value::of(object.as_integer());
    if (object.is_integral() && name == "denominator") return Value::of(int64_t(1));
  }
  if (object.is_mapping()) {
    const Value method = method_of(object, name);
    if (!method.is_undefined()) return method;
    if (is_other_dict_attribute(name)) return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe");
  }
  if (object.is_mapping() || object.type == Value::Type::namespace_) {
    if (const Value* found = object.dict->find(name)) return *found;
    return Value::undefined(std::string("'") + (object.is_mapping() ? std::string("dict") : type_name(object)) + " object' has no attribute '" + name + "'");
  }
  return method_of(object, name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) throw ValueError(object.text.empty() ? "undefined value" : object.text);
  if ((object.is_mapping() || object.type == Value::Type::namespace_) && key.is_string()) {
    if (const Value* found = object.dict->find(key.text)) return *found;
  }
  if ((object.is_sequence() || object.type == Value::Type::range || object.is_string()) && key.is_integral()) {
    int64_t index = key.as_integer();
    if (!object.is_string()) {
      const int64_t n = int64_t(object.items->size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return (*object.items)[size_t(index)];
    } else {
      const std::u32string points = code_points(object.text);
      const int64_t n = int64_t(points.size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return Value::string_like(object, utf8(std::u32string(1, points[size_t(index)])));
    }
    return Value::undefined(type_name(object) + " index " + std::to_string(key.as_integer()) + " out of range");
  }
  if (key.is_string()) return get_attribute(object, key.text);
  return Value::undefined(std::string("'") + type_name(object) + " object' has no item " + to_repr(key));
}

Value slice(const Value& object, const Value* start, const Value* stop, const Value* step) {
  // Jinja2 slices with Python's own subscript (not the environment's getitem, which would give undefined):
  // what cannot be sliced is an error.
  if (object.is_undefined()) throw ValueError(object.text.empty() ? "undefined value" : object.text);
  if (!object.is_sequence() && !object.is_string() && object.type != Value::Type::range)
    throw ValueError("'" + type_name(object) + "' object is not subscriptable");
  const auto bound = [](const Value* v) -> const Value* { return v && !v->is_none() ? v : nullptr; };
  start = bound(start), stop = bound(stop), step = bound(step);
  for (const Value* v : {start, stop, step}) {
    if (v && !v->is_integral()) throw ValueError("slice indices must be integers or None");
  }
  // Python's PySlice_Unpack and PySlice_AdjustIndices, then the items start, start + step, ... counted
  // rather than stepped to, so that no index overflows.
  const int64_t stride = step ? std::max(step->as_integer(), -std::numeric_limits<int64_t>::max()) : 1;
  if (stride == 0) throw ValueError("slice step cannot be zero");
  const std::u32string points = object.is_string() ? code_points(object.text) : std::u32string();
  const int64_t n = object.is_string() ? int64_t(points.size()) : int64_t(object.items->size());
  const auto adjust = [&](const Value* v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = v->as_integer();
    if (i < 0) {
      i = i < -n ? (stride < 0 ? -1 : 0) : i + n;
    } else if (i >= n) {
      i = stride < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t first = adjust(start, stride < 0 ? n - 1 : 0), last = adjust(stop, stride < 0 ? -1 : n);
  int64_t count = 0;
  if (stride > 0 && first < last) count = (last - first - 1) / stride + 1;
  if (stride < 0 && last < first) count = (first - last - 1) / (-stride) + 1;
  if (object.type == Value::Type::range) {  // a range's slice is a range (Python's compute_slice)
    const __int128 step = __int128(object.range_step) * stride, begin = object.range_start + __int128(first) * object.range_step;
    const __int128 end = object.range_start + __int128(last) * object.range_step;
    if (step > std::numeric_limits<int64_t>::max() || step < std::numeric_limits<int64_t>::min() || end > std::numeric_limits<int64_t>::max() ||
        end < std::numeric_limits<int64_t>::min())
      throw ValueError("a range's slice is past 64 bits");
    return Value::range(int64_t(begin), int64_t(end), int64_t(step));
  }
  std::u32string text;
  List items;
  for (int64_t k = 0; k < count; ++k) {
    const size_t i = size_t(first + k * stride);  // within [0, n): |k * stride| < n
    if (object.is_string()) text += points[i];
    else items.push_back((*object.items)[i]);
  }
  return object.is_string() ? Value::string_like(object, utf8(text)) : Value::of(std::move(items), object.type);
}

Value global_function(const std::string& name, const std::tm& now, std::vector<std::shared_ptr<Dict>>& namespaces) {
  using Args = const Arguments&;
  using Kwargs = const KeywordArguments&;
  if (name == "range") {
    return Value::of_function("range", [](Args args, Kwargs kwargs) {
      if (args.empty() || args.size() > 3 || !kwargs.empty()) throw ValueError("range() takes 1 to 3 integer arguments");
      for (const Value& a : args) {
        if (!a.is_integral()) throw ValueError("range() takes integers");
      }
      const int64_t start = args.size() > 1 ? args[0].as_integer() : 0;
      const int64_t stop = args.size() > 1 ? args[1].as_integer() : args[0].as_integer();
      const int64_t step = args.size() > 2 ? args[2].as_integer() : 1;
      if (step == 0) throw ValueError("range() arg 3 must not be zero");
      // Jinja2's sandbox refuses more than 100,000 items (MAX_RANGE).
      if (Value::range_length(start, stop, step) > 100000) throw ValueError("range too big, maximum size for range is 100000");
      return Value::range(start, stop, step);
    });
  }
  if (name == "dict" || name == "namespace") {
    const bool is_namespace = name == "namespace";
    return Value::of_function(name, [is_namespace, made = &namespaces](Args args, Kwargs kwargs) {
      auto dict = std::make_shared<Dict>();
      if (is_namespace) made->push_back(dict);
      const char* what = is_namespace ? "namespace" : "dict";
      if (args.size() > 1) throw ValueError(std::string(what) + "() takes at most 1 positional argument");
      for (const Value& a : args) {
        if (a.is_mapping()) {
          for (const auto& [key, value] : a.dict->entries) dict->set(key, value);
          continue;
        }
        // Python's dict(pairs): each item a key and a value.
        const List pairs = iterate(a);
        for (size_t i = 0; i < pairs.size(); ++i) {
          const List pair = iterate(pairs[i]);
          if (pair.size() != 2) throw ValueError(std::string(what) + "() sequence element #" + std::to_string(i) + " has length " + std::to_string(pair.size()) + "; 2 is required");
          require_hashable(pair[0]);
          if (!pair[0].is_string()) throw ValueError("dict keys other than strings are not supported in chat templates");
          dict->set(pair[0].text, pair[1]);
        }
      }
      for (const auto& [key, value] : kwargs) dict->set(key, value);
      return Value::of(std::move(dict), is_namespace ? Value::Type::namespace_ : Value::Type::dict);
    });
  }
  if (name == "raise_exception") {
    return Value::of_function("raise_exception", [](Args args, Kwargs) -> Value {
      throw TemplateRaised(args.empty() ? std::string() : to_str(args[0]));
    });
  }
  if (name == "strftime_now") {
    return Value::of_function("strftime_now", [now](Args args, Kwargs kwargs) {
      expect_argument_count(args, kwargs, 1, 1, "strftime_now");
      // Python's datetime.strftime handles %z, %Z and %f itself: the offset and zone of transformers'
      // naive datetime.now() are empty; its microseconds Tilefire does not have.
      std::string format;
      const std::string& given = string_argument(args, 0, "strftime_now");
      for (size_t i = 0; i < given.size(); ++i) {
        if (given[i] != '%' || i + 1 == given.size()) {
          format += given[i];
          continue;
        }
        const char field = given[++i];
        if (field == 'f') throw ValueError("strftime_now's %f (microseconds) is not supported in chat templates");
        if (field != 'z' && field != 'Z') format += {'%', field};
      }
      if (format.empty()) return Value::of("");
      std::vector<char> buffer(format.size() * 16 + 256);
      const size_t n = std::strftime(buffer.data(), buffer.size(), format.c_str(), &now);
      if (n == 0) throw ValueError("strftime_now() could not format '" + format + "'");
      return Value::of(std::string(buffer.data(), n));
    });
  }
  return Value::undefined(std::string("'") + name + "' is undefined");
}

}  // namespace tilefire::jinja
