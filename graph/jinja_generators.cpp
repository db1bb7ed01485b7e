// The filters that give a Python iterator (graph/jinja_filters.h). In Jinja2, select, reject, selectattr,
// rejectattr, map, unique and items are generators and reverse gives a reverse iterator: each is walked
// once, is true even when it gives nothing (`{% if messages | selectattr(...) %}` is always taken), has no
// length, and runs its code only when its first item is asked for. Templates depend on all of these,
// knowingly or not, so Tilefire's filters give the same kind of value.
#include <algorithm>
#include <optional>

#include "graph/jinja_filters.h"

namespace tilefire::jinja {
namespace {

// Walks `value` as Python's `for item in value` does: an iterator one item at a time (what is taken is
// gone from it), anything else over its items.
Iterator::Advance walk(const Value& value) {
  if (value.type == Value::Type::iterator) return [iterator = value.iterator](Value& out) { return iterator->next(out); };
  std::shared_ptr<const List> items = value.has_items() ? value.items : std::make_shared<const List>(iterate(value));
  return [items, i = size_t(0)](Value& out) mutable {
    if (i == items->size()) return false;
    out = (*items)[i++];
    return true;
  };
}

// A generator over `source`, whose code runs when its first item is asked for.
Value generator(const Value& source, std::function<Iterator::Advance()> code) {
  auto iterator = std::make_shared<Iterator>();
  iterator->type_name = "generator";
  iterator->start = std::move(code);
  return Value::of(std::move(iterator), source.depth);
}

// Jinja2's select_or_reject: `if value:`, then the items whose (attribute's) test result is `keep`; the
// test is named by the first argument (after the attribute), else the item's truth is tested.
Value select_or_reject(const Value& input, Args given_args, Kwargs given_kwargs, bool keep, bool by_attribute, const char* filter) {
  return generator(input, [input, args = Arguments(given_args), kwargs = KeywordArguments(given_kwargs), keep, by_attribute, filter]() -> Iterator::Advance {
    if (!truthy(input)) return nullptr;
    size_t offset = 0;
    Value attribute;
    if (by_attribute) {
      if (args.empty()) throw ValueError(std::string(filter) + ": missing parameter for attribute name");
      attribute = args[0];
      offset = 1;
    }
    const Test* test = nullptr;
    Arguments test_args;
    if (args.size() > offset) {
      if (!args[offset].is_string()) throw ValueError(std::string(filter) + " takes the name of a test");
      test = find_test(args[offset].text);
      if (!test) throw ValueError("no test named '" + args[offset].text + "'");
      test_args.assign(args.begin() + long(offset) + 1, args.end());
    }
    if (!kwargs.empty()) throw ValueError(std::string(filter) + ": keyword arguments of tests are not supported in chat templates");
    return [source = walk(input), test, test_args, attribute, by_attribute, keep](Value& out) mutable {
      for (Value item; source(item);) {
        const Value subject = by_attribute ? attribute_path(item, attribute) : item;
        if ((test ? (*test)(subject, test_args) : truthy(subject)) == keep) {
          out = std::move(item);
          return true;
        }
      }
      return false;
    };
  });
}

// An iterator over items already known: what reverse gives for a list, tuple, dict or view.
Value reverse_iterator(const Value& input, std::string type_name) {
  List items = iterate(input);
  std::reverse(items.begin(), items.end());
  auto iterator = std::make_shared<Iterator>();
  iterator->type_name = std::move(type_name);
  iterator->advance = walk(Value::of(std::move(items)));
  return Value::of(std::move(iterator), input.depth);
}

}  // namespace

Value filter_select(const Value& input, Args args, Kwargs kwargs) { return select_or_reject(input, args, kwargs, true, false, "select"); }
Value filter_reject(const Value& input, Args args, Kwargs kwargs) { return select_or_reject(input, args, kwargs, false, false, "reject"); }
Value filter_selectattr(const Value& input, Args args, Kwargs kwargs) { return select_or_reject(input, args, kwargs, true, true, "selectattr"); }
Value filter_rejectattr(const Value& input, Args args, Kwargs kwargs) { return select_or_reject(input, args, kwargs, false, true, "rejectattr"); }

// Jinja2's map: `if value:`, then each item through a filter (map('upper')) or an attribute
// (map(attribute='role', default='-')).
Value filter_map(const Value& input, Args given_args, Kwargs given_kwargs) {
  return generator(input, [input, args = Arguments(given_args), kwargs = KeywordArguments(given_kwargs)]() -> Iterator::Advance {
    if (!truthy(input)) return nullptr;
    std::function<Value(const Value&)> apply;
    const auto attribute = std::find_if(kwargs.begin(), kwargs.end(), [](const auto& kw) { return kw.first == "attribute"; });
    if (args.empty() && attribute != kwargs.end()) {
      std::optional<Value> fallback;
      for (const auto& [key, value] : kwargs) {
        if (key == "default") {
          if (!value.is_none()) fallback = value;  // Jinja2: default=None is no default
        } else if (key != "attribute") {
          throw ValueError("map: unexpected keyword argument '" + key + "'");
        }
      }
      apply = [path = attribute->second, fallback](const Value& item) { return attribute_path(item, path, fallback ? &*fallback : nullptr); };
    } else {
      if (args.empty()) throw ValueError("map requires a filter argument");
      if (!args[0].is_string()) throw ValueError("map takes the name of a filter");
      const FilterFunction filter = find_filter(args[0].text);
      if (!filter) throw ValueError("No filter named '" + args[0].text + "'.");
      apply = [filter, rest = Arguments(args.begin() + 1, args.end()), kwargs](const Value& item) { return filter(item, rest, kwargs); };
    }
    return [source = walk(input), apply](Value& out) mutable {
      Value item;
      if (!source(item)) return false;
      out = apply(item);
      return true;
    };
  });
}

// Jinja2's do_unique: the items whose key (the item or its attribute, lower-cased unless case_sensitive)
// was not seen before. Its parameters are bound when it is called, as a Python generator function's are.
Value filter_unique(const Value& input, Args args, Kwargs kwargs) {
  const Parameters p("unique", args, kwargs, {"case_sensitive", "attribute"});
  const bool case_sensitive = p.flag(0, false);
  const std::optional<Value> attribute = p.get(1) ? std::optional<Value>(*p.get(1)) : std::nullopt;
  return generator(input, [input, case_sensitive, attribute]() -> Iterator::Advance {
    return [source = walk(input), seen = List(), case_sensitive, attribute](Value& out) mutable {
      for (Value item; source(item);) {
        Value key = sort_key(item, attribute ? &*attribute : nullptr, case_sensitive);
        require_hashable(key);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& k) { return equal(k, key); })) {
          seen.push_back(std::move(key));
          out = std::move(item);
          return true;
        }
      }
      return false;
    };
  });
}

// Jinja2's do_items: nothing for undefined, a dict's (key, value) pairs, an error (when walked) otherwise.
Value filter_items(const Value& input, Args args, Kwargs kwargs) {
  Parameters("items", args, kwargs, {});
  return generator(input, [input]() -> Iterator::Advance {
    if (input.is_undefined()) return nullptr;
    if (!input.is_mapping()) throw ValueError("Can only get item pairs from a mapping.");
    return walk((*method_of(input, "items").function)({}, {}));
  });
}

// Jinja2's do_reverse: a string reversed; else Python's reversed(value), an iterator; what has no
// reversed() (an iterator) as a list, reversed.
Value filter_reverse(const Value& input, Args args, Kwargs kwargs) {
  Parameters("reverse", args, kwargs, {});
  switch (input.type) {
    case Value::Type::string: {
      std::u32string points = code_points(input.text);
      std::reverse(points.begin(), points.end());
      return Value::string_like(input, utf8(points));
    }
    case Value::Type::list: return reverse_iterator(input, "list_reverseiterator");
    case Value::Type::tuple:
    case Value::Type::undefined: return reverse_iterator(input, "reversed");
    case Value::Type::dict: return reverse_iterator(input, "dict_reversekeyiterator");
    case Value::Type::view:
      return reverse_iterator(input, input.text == "dict_items" ? "dict_reverseitemiterator" : input.text == "dict_keys" ? "dict_reversekeyiterator" : "dict_reversevalueiterator");
    case Value::Type::range: return reverse_iterator(input, "range_iterator");
    case Value::Type::iterator: {
      List items = iterate(input);
      std::reverse(items.begin(), items.end());
      return Value::of(std::move(items));
    }
    default: throw ValueError("reverse: argument must be iterable");
  }
}

}  // namespace tilefire::jinja
