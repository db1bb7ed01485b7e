#pragma once
// The filters of chat templates, over three files: graph/jinja_builtins.cpp (the filter and test tables,
// strings and lists), jinja_numbers.cpp (int, float, abs, round, sum) and jinja_generators.cpp (the
// filters that give a Python iterator: select, reject, selectattr, rejectattr, map, unique, items,
// reverse).
#include <string>
#include <vector>

#include "graph/jinja_syntax.h"

namespace tilefire::jinja {

using Args = const Arguments&;
using Kwargs = const KeywordArguments&;

// A filter's parameters by position or keyword, as Python binds them.
class Parameters {
 public:
  Parameters(const char* filter, Args args, Kwargs kwargs, std::vector<const char*> names);
  const Value* get(size_t i) const { return values_[i]; }
  bool flag(size_t i, bool fallback) const { return values_[i] ? truthy(*values_[i]) : fallback; }
  const Value* string(size_t i) const;  // a string or absent (None is absent); ValueError otherwise

 private:
  const char* filter_;
  std::vector<const Value*> values_;
};

// Jinja2's make_attrgetter: environment.getitem along a dotted path ("function.name", "0"; an integer is
// one index), as the attribute= of filters. With `fallback`, an undefined step becomes it (map's
// default=). Undefined.attr stays an error, as in Jinja2.
Value attribute_path(const Value& item, const Value& attribute, const Value* fallback = nullptr);
// The key the sort-like filters compare: the item or its attribute, lower-cased unless case-sensitive.
Value sort_key(const Value& item, const Value* attribute, bool case_sensitive);

Value filter_int(const Value& input, Args args, Kwargs kwargs);
Value filter_float(const Value& input, Args args, Kwargs kwargs);
Value filter_abs(const Value& input, Args args, Kwargs kwargs);
Value filter_round(const Value& input, Args args, Kwargs kwargs);
Value filter_sum(const Value& input, Args args, Kwargs kwargs);

Value filter_select(const Value& input, Args args, Kwargs kwargs);
Value filter_reject(const Value& input, Args args, Kwargs kwargs);
Value filter_selectattr(const Value& input, Args args, Kwargs kwargs);
Value filter_rejectattr(const Value& input, Args args, Kwargs kwargs);
Value filter_map(const Value& input, Args args, Kwargs kwargs);
Value filter_unique(const Value& input, Args args, Kwargs kwargs);
Value filter_items(const Value& input, Args args, Kwargs kwargs);
Value filter_reverse(const Value& input, Args args, Kwargs kwargs);

}  // namespace tilefire::jinja
