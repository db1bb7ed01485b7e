#pragma once
// The parsed form of a chat template (graph/jinja.h): the lexer's tokens, the expression tree and the
// statement tree. graph/jinja_lexer.cpp and jinja_parser.cpp build it; jinja_render.cpp walks it.
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/jinja_value.h"

namespace tilefire::jinja {

// ---- tokens ----------------------------------------------------------------------------------------

struct Token {
  enum class Type { text, block_begin, block_end, variable_begin, variable_end, name, string, integer, real, op, end };
  Type type;
  std::string value;  // text; name; a string literal's value; an operator's spelling; a number's digits
  int line = 1;
};

// The tokens of a template as Jinja2 with trim_blocks and lstrip_blocks makes them: newlines normalised to
// "\n", one trailing newline dropped, whitespace control (-, +) and {% raw %} applied, comments removed.
// InputError "ORIGIN: line N: ..." for an unclosed tag, comment or string.
std::vector<Token> lex(std::string_view source, const std::string& origin);

// ---- expressions -----------------------------------------------------------------------------------

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

using FilterFunction = Value (*)(const Value& input, const Arguments& args, const KeywordArguments& kwargs);
using TestFunction = bool (*)(const Value& input, const Arguments& args);
// A test and how many arguments it takes besides the value (Python refuses more or fewer).
struct Test {
  TestFunction function;
  size_t arguments;
  const char* name;
  bool operator()(const Value& input, const Arguments& args) const;  // ValueError for the wrong count
};

struct Expr {
  enum class Kind {
    literal,    // literal
    name,       // name
    attribute,  // args[0].name
    item,       // args[0][args[1]]
    slice,      // args[0][args[1]:args[2]:args[3]], each bound null when absent
    call,       // args[0](args[1..], kwargs)
    filter,     // args[0] | name(args[1..], kwargs)
    test,       // args[0] is [not] name(args[1..])
    negate,     // -args[0]
    plus,       // +args[0]
    binary,     // args[0] name args[1], name one of + - * / // % **
    concat,     // args[0] ~ args[1] ~ ...
    compare,    // args[0] ops[0] args[1] ops[1] args[2] ... (== != < > <= >= in notin)
    logical_and,
    logical_or,
    logical_not,
    condition,  // args[1] if args[0] else args[2] (args[2] null: undefined)
    list,
    tuple,
    dict,       // kwargs-like pairs in dict_items
  };
  Kind kind;
  int line = 0;
  int depth = 1;  // of the tree under it: the parser refuses a tree deeper than it can walk and free
  // Jinja2 folds it when it compiles the template: no names, calls or context filters (map, select, ...)
  // under it. Its value is then written into the generated Python as its repr, which matters in one
  // place: a negative number as the base of ** (see the renderer).
  bool constant = false;
  // A constant whose parent is not one (or a statement's expression, but what {{ }} prints): Jinja2
  // writes its value into the generated Python as code, where an infinity or NaN is a NameError ('inf').
  bool folded = false;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
  std::vector<std::string> ops;
  bool negated = false;            // test: "is not"
  FilterFunction filter = nullptr;  // resolved when parsed
  const Test* test = nullptr;
};

// ---- statements ------------------------------------------------------------------------------------

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    text,        // text
    output,      // {{ expr }}
    branch,      // {% if %}: branches (a null condition is the else)
    loop,        // {% for targets in expr if filter %} body {% else %} else_body
    assign,      // {% set targets = expr %}, or {% set targets[0].attribute = expr %}
    assign_block,  // {% set targets[0] %} body {% endset %}
    macro,       // {% macro name(params) %} body
    loop_break,
    loop_continue,
    sequence,    // body (the template itself)
    scoped,      // body in a scope of its own ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;  // text; macro name
  std::string attribute;  // assign to a namespace's attribute
  ExprPtr expr;
  ExprPtr filter;  // loop: the condition of `for x in y if ...`; assign_block: its filters, over kSetBlockText
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // a null default: none given
  // The names the scope of the body (the template's, a loop iteration's, a macro call's, a set block's, a
  // {% generation %}'s) or of a loop's else begins with as undefined (analyze_scopes).
  std::vector<std::string> undefined_in_body, undefined_in_else;
  bool body_reads_loop = true;  // loop: whether the body (its macros too) names `loop` (analyze_scopes)
};

// The name that holds a set block's text while its filters run ({% set x | trim %}): it has a space, so
// no template can write it.
inline constexpr const char* kSetBlockText = "set block";

// The statement tree of a template. InputError "ORIGIN: line N: ..." for a syntax error, a tag Tilefire
// does not run (include, extends, block, import, filter, call, ...) or an unknown filter or test.
NodePtr parse(const std::vector<Token>& tokens, const std::string& origin);

// Marks, in each scope of a parsed template, the names it begins with as undefined: the names it assigns
// before (or without) reading them, which Jinja2 makes its own variables for the whole scope and the
// scopes nested in it (graph/jinja_scopes.cpp).
void analyze_scopes(Node& root);

// The built-ins (graph/jinja_builtins.cpp), looked up when a template is parsed.
FilterFunction find_filter(std::string_view name);
const Test* find_test(std::string_view name);
// A method of a string, list or dict bound to it ("strip", "items", ...); undefined when it has none.
Value method_of(const Value& object, const std::string& name);
// The less common string methods (graph/jinja_string_methods.cpp); undefined for another name.
Value more_string_methods(const std::string& text, const std::string& name);
// A method's call takes no keyword arguments and `least` to `most` positional ones; ValueError naming the
// method otherwise.
void expect_argument_count(const Arguments& args, const KeywordArguments& kwargs, size_t least, size_t most, const std::string& method);
// str.split's and rsplit's (sep=None, maxsplit=-1), by position or keyword; separator null when absent.
struct SplitArguments {
  const Value* separator = nullptr;
  int64_t max_splits = -1;
};
SplitArguments split_arguments(const Arguments& args, const KeywordArguments& kwargs, const char* method);
// Python's ADJUST_INDICES for str.find-like bounds args[first] and args[first + 1] over `length` code
// points: negative ones count from the end, the end is clamped to the length, the start is not (a start
// past the end finds nothing, not even "").
void adjust_indices(const Arguments& args, size_t first, int64_t length, int64_t& start, int64_t& end);
// The globals: range, dict, namespace, raise_exception, strftime_now; undefined for another name. Each
// namespace made is added to `namespaces`, which the renderer empties when it is done: a namespace can
// hold itself, and would otherwise never be freed.
Value global_function(const std::string& name, const std::tm& now, std::vector<std::shared_ptr<Dict>>& namespaces);
// Jinja2's attribute lookup (obj.name: the attribute, else the item) and item lookup (obj[key]: the item,
// else for a string key the attribute), undefined when neither exists. ValueError on undefined.
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
// Python's `item in container`: a substring, an item of a sequence, a key of a dict; false in undefined.
bool contains(const Value& container, const Value& item);
// Python's `text % values` (graph/jinja_format.cpp): a tuple gives the values, a dict the %(key)s ones,
// anything else is the one value. ValueError as Python's TypeError, ValueError and KeyError.
Value percent_format(const Value& text, const Value& values);
// markupsafe's escape(value): a Markup with & < > " ' escaped; a Markup is returned as it is.
Value escaped(const Value& value);
// Python's hash() of a dict key or set member: lists, dicts and views have none (ValueError).
void require_hashable(const Value& value);
// Python's slice object[start:stop:step]; null bounds are absent.
Value slice(const Value& object, const Value* start, const Value* stop, const Value* step);

}  // namespace tilefire::jinja
