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
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
  std::vector<std::string> ops;
  bool negated = false;            // test: "is not"
  FilterFunction filter = nullptr;  // resolved when parsed
  TestFunction test = nullptr;
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
};

// The name that holds a set block's text while its filters run ({% set x | trim %}): it has a space, so
// no template can write it.
inline constexpr const char* kSetBlockText = "set block";

// The statement tree of a template. InputError "ORIGIN: line N: ..." for a syntax error, a tag Tilefire
// does not run (include, extends, block, import, filter, call, ...) or an unknown filter or test.
NodePtr parse(const std::vector<Token>& tokens, const std::string& origin);

// The built-ins (graph/jinja_builtins.cpp), looked up when a template is parsed.
FilterFunction find_filter(std::string_view name);
TestFunction find_test(std::string_view name);
// A method of a string, list or dict bound to it ("strip", "items", ...); undefined when it has none.
Value method_of(const Value& object, const std::string& name);
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
// Python's slice object[start:stop:step]; null bounds are absent.
Value slice(const Value& object, const Value* start, const Value* stop, const Value* step);

}  // namespace tilefire::jinja
