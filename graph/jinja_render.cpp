// Rendering a parsed chat template: Jinja2's statements, scoping and Python's operators.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "graph/jinja.h"
#include "graph/jinja_syntax.h"
#include "tilefire/errors.h"

namespace tilefire::jinja {

struct RaisedError : RenderError {
  using RenderError::RenderError;
};

namespace {

constexpr size_t kMaxOutputBytes = size_t(64) << 20;  // a template that renders more is stopped
constexpr int kMaxMacroDepth = 100;

[[noreturn]] void undefined_error(const Value& v) { throw ValueError(v.text.empty() ? "an undefined value was used" : v.text); }
void require_defined(const Value& v) {
  if (v.is_undefined()) undefined_error(v);
}

void check_overflow(bool overflowed) {
  if (overflowed) throw ValueError("integer overflow (Tilefire's template integers are 64-bit)");
}

std::string repeat(const std::string& text, int64_t times) {
  if (times <= 0 || text.empty()) return "";
  if (double(text.size()) * double(times) > double(kMaxOutputBytes)) throw ValueError("a repeated string is too long");
  std::string out;
  for (int64_t i = 0; i < times; ++i) out += text;
  return out;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  if (op == "%" && a.is_string()) return percent_format(a, b);  // Python formats an undefined value as ''
  require_defined(b);
  const auto unsupported = [&]() -> Value {
    throw ValueError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (op == "+") {
    // Markup + str escapes the str (markupsafe's __add__ and __radd__).
    if (a.is_string() && b.is_string() && (a.is_markup() || b.is_markup())) return Value::markup(escaped(a).text + escaped(b).text);
    if (a.is_string() && b.is_string()) return Value::of(a.text + b.text);
    if (a.is_sequence() && a.type == b.type) {
      List items = a.list();
      items.insert(items.end(), b.items->begin(), b.items->end());
      return Value::of(std::move(items), a.type);
    }
  }
  if (op == "*") {
    if (a.is_string() && b.is_integral()) return Value::string_like(a, repeat(a.text, b.as_integer()));
    if (b.is_string() && a.is_integral()) return Value::string_like(b, repeat(b.text, a.as_integer()));
    if ((a.is_sequence() && b.is_integral()) || (b.is_sequence() && a.is_integral())) {  // [1] * 3, 3 * [1]
      const Value& sequence = a.is_sequence() ? a : b;
      const int64_t times = a.is_sequence() ? b.as_integer() : a.as_integer();
      List items;
      if (sequence.items->empty()) return Value::of(std::move(items), sequence.type);
      if (double(sequence.items->size()) * double(std::max<int64_t>(0, times)) > double(kMaxListItems)) throw ValueError("a repeated list is too long");
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), sequence.items->begin(), sequence.items->end());
      return Value::of(std::move(items), sequence.type);
    }
  }
  if (!a.is_number() || !b.is_number()) return unsupported();
  const bool integers = a.is_integral() && b.is_integral();
  const int64_t x = a.as_integer(), y = b.as_integer();
  const double p = a.as_real(), q = b.as_real();
  int64_t r = 0;
  if (op == "+" || op == "-" || op == "*") {
    if (!integers) return Value::of(op == "+" ? p + q : op == "-" ? p - q : p * q);
    check_overflow(op == "+" ? __builtin_add_overflow(x, y, &r) : op == "-" ? __builtin_sub_overflow(x, y, &r) : __builtin_mul_overflow(x, y, &r));
    return Value::of(r);
  }
  if (op == "/") {
    if (q == 0) throw ValueError("division by zero");
    return Value::of(p / q);
  }
  if (op == "//" || op == "%") {
    if (integers) {
      if (y == 0) throw ValueError("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) throw ValueError("integer overflow");
      int64_t quotient = x / y, remainder = x % y;
      if (remainder != 0 && ((remainder < 0) != (y < 0))) {  // Python rounds the quotient toward -infinity
        --quotient;
        remainder += y;
      }
      return Value::of(op == "//" ? quotient : remainder);
    }
    if (q == 0) throw ValueError(op == "//" ? "float floor division by zero" : "float modulo");
    // Python's float_divmod: the remainder takes the divisor's sign, the quotient is (p - mod) / q
    // rounded to the nearest integer, and zeros keep their signs.
    double mod = std::fmod(p, q), div = (p - mod) / q;
    if (mod != 0) {
      if ((q < 0) != (mod < 0)) {
        mod += q;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, q);
    }
    if (op == "%") return Value::of(mod);
    if (div == 0) return Value::of(std::copysign(0.0, p / q));
    double floor_div = std::floor(div);
    if (div - floor_div > 0.5) floor_div += 1.0;
    return Value::of(floor_div);
  }
  if (op == "**") {
    if (integers && y >= 0) {
      int64_t result = 1, base = x;
      for (int64_t e = y; e > 0; e >>= 1) {
        if (e & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
        if (e > 1) check_overflow(__builtin_mul_overflow(base, base, &base));
      }
      return Value::of(result);
    }
    if (p == 0 && q < 0) throw ValueError("0.0 cannot be raised to a negative power");
    if (p < 0 && std::isfinite(q) && q != std::floor(q)) throw ValueError("a negative number to a fractional power is a complex number, which chat templates do not support");
    const double power = std::pow(p, q);
    if (std::isinf(power) && std::isfinite(p) && std::isfinite(q)) throw ValueError("(34, 'Numerical result out of range')");
    return Value::of(power);
  }
  return unsupported();
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || equal(a, b);
  if (op == ">=") return less(b, a) || equal(a, b);
  if (op == "in") return contains(b, a);
  return !contains(b, a);  // notin
}

// The variables of one scope: the template's own, a loop iteration's, a macro call's, a set block's.
// Scopes chain to the scope they were made in, and a macro keeps the scope it was defined in, so a macro
// sees the loop variables and the arguments of the macros around it (Python's closures: as they are when
// it is called), never its caller's.
struct Scope {
  std::vector<std::pair<std::string, Value>> variables;
  std::shared_ptr<Scope> parent;
};

class Renderer {
 public:
  Renderer(const Dict& context, const std::tm& now) : context_(context), now_(now), scope_(std::make_shared<Scope>()) {}
  ~Renderer() {
    // Namespaces can hold themselves (ns.self = ns); emptied, each is freed with the last value holding it.
    for (const std::shared_ptr<Dict>& made : namespaces_) made->entries.clear();
  }

  void run(const Node& root, std::string& out) {
    begin_undefined(*scope_, root.undefined_in_body);
    exec(root.body, out);
  }

 private:
  enum class Flow { next, stop_loop, next_iteration };

  // Each statement and expression evaluated counts a level of the C++ stack: past kMaxRenderDepth (a
  // recursive macro over deep expressions) the render stops with an error instead of overflowing it.
  static constexpr int kMaxRenderDepth = 500;
  struct Deeper {
    int& depth;
    explicit Deeper(int& d) : depth(d) {
      if (++depth > kMaxRenderDepth) throw ValueError("the template nests calls and expressions more than " + std::to_string(kMaxRenderDepth) + " deep");
    }
    ~Deeper() { --depth; }
  };

  // Makes a scope the current one for its lifetime.
  class Entered {
   public:
    Entered(std::shared_ptr<Scope>& current, std::shared_ptr<Scope> scope) : current_(current), saved_(std::move(scope)) { std::swap(current_, saved_); }
    ~Entered() { std::swap(current_, saved_); }
    Entered(const Entered&) = delete;
    Entered& operator=(const Entered&) = delete;

   private:
    std::shared_ptr<Scope>& current_;
    std::shared_ptr<Scope> saved_;  // the other scope: the previous one while entered
  };

  [[gnu::noinline]] Flow exec_in(std::shared_ptr<Scope> scope, const Body& body, std::string& out) {
    const Entered entered(scope_, std::move(scope));
    return exec(body, out);
  }
  // A scope inside the current one, beginning with `undefined` (analyze_scopes) as undefined.
  std::shared_ptr<Scope> inner_scope(const std::vector<std::string>& undefined = {}) const {
    auto scope = std::make_shared<Scope>(Scope{{}, scope_});
    begin_undefined(*scope, undefined);
    return scope;
  }
  static void begin_undefined(Scope& scope, const std::vector<std::string>& names) {
    for (const std::string& name : names) scope.variables.emplace_back(name, Value::undefined("'" + name + "' is undefined"));
  }

  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& node : body) {
      const Flow flow = exec(*node, out);
      if (flow != Flow::next) return flow;
      if (out.size() > kMaxOutputBytes) throw RenderError(node->line, "the template renders more than 64 MiB");
    }
    return Flow::next;
  }

  // A template that runs more than kMaxSteps statements and loop iterations is stopped: a loop nested in
  // a loop over range(100000) would otherwise run for hours (as in Jinja2).
  static constexpr int64_t kMaxSteps = 5'000'000;
  void count_step() {
    if (++steps_ > kMaxSteps) throw ValueError("the template runs more than 5,000,000 statements and loop iterations");
  }

  Flow exec(const Node& node, std::string& out) {
    try {
      const Deeper deeper(depth_);
      count_step();
      switch (node.kind) {
        case Node::Kind::text: out += node.text; return Flow::next;
        case Node::Kind::output: out += to_str(eval(*node.expr)); return Flow::next;
        case Node::Kind::sequence: return exec(node.body, out);
        case Node::Kind::scoped: return exec_in(inner_scope(node.undefined_in_body), node.body, out);
        case Node::Kind::branch:
          for (const auto& [condition, body] : node.branches) {
            if (!condition || truthy(eval(*condition))) return exec(body, out);
          }
          return Flow::next;
        case Node::Kind::loop: return loop(node, out);
        case Node::Kind::assign: assign(node, eval(*node.expr)); return Flow::next;
        case Node::Kind::assign_block: return assign_block(node);
        case Node::Kind::macro: define_macro(node); return Flow::next;
        case Node::Kind::loop_break: return Flow::stop_loop;
        case Node::Kind::loop_continue: return Flow::next_iteration;
      }
    } catch (const TemplateRaised& raised) {
      throw RaisedError(node.line, raised.what());
    } catch (const ValueError& error) {
      throw RenderError(node.line, error.what());
    }
    return Flow::next;
  }

  // {% set x %}...{% endset %}: the body has a scope of its own; a break or continue in it leaves before
  // the assignment.
  [[gnu::noinline]] Flow assign_block(const Node& node) {
    std::string captured;
    const Flow flow = exec_in(inner_scope(node.undefined_in_body), node.body, captured);
    if (flow != Flow::next) return flow;
    if (!node.filter) {
      assign(node, Value::of(std::move(captured)));
      return Flow::next;
    }
    // {% set x | filters %}: the filters are applied to the body's text, bound to kSetBlockText.
    auto scope = inner_scope();
    scope->variables.emplace_back(kSetBlockText, Value::of(std::move(captured)));
    Value filtered;
    {
      const Entered entered(scope_, std::move(scope));
      filtered = eval(*node.filter);
    }
    assign(node, std::move(filtered));
    return Flow::next;
  }

  void set(const std::string& name, Value value) {
    for (auto& [key, existing] : scope_->variables) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    scope_->variables.emplace_back(name, std::move(value));
  }

  void bind(const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) return set(targets[0], value);
    const List items = iterate(value);
    if (items.size() != targets.size()) {
      throw ValueError(items.size() < targets.size() ? "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " + std::to_string(items.size()) + ")"
                                                     : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    }
    for (size_t i = 0; i < targets.size(); ++i) set(targets[i], items[i]);
  }

  [[gnu::noinline]] void assign(const Node& node, Value value) {
    if (node.attribute.empty()) return bind(node.targets, value);
    const Value target = lookup(node.targets[0]);
    if (target.type != Value::Type::namespace_ || target.dict->loop_context) throw ValueError("cannot assign attribute on non-namespace object");
    target.dict->set(node.attribute, std::move(value));
  }

  Value lookup(const std::string& name) {
    for (const Scope* scope = scope_.get(); scope; scope = scope->parent.get()) {
      for (const auto& [key, value] : scope->variables) {
        if (key == name) return value;
      }
    }
    if (const Value* found = context_.find(name)) return *found;
    return global_function(name, now_, namespaces_);
  }

  [[gnu::noinline]] Flow loop(const Node& node, std::string& out) {
    List items = iterate(eval(*node.expr));
    if (node.filter) {
      const Entered entered(scope_, inner_scope());
      List kept;
      for (const Value& item : items) {
        bind(node.targets, item);
        if (truthy(eval(*node.filter))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto position = std::make_shared<int64_t>(0);
    const Value cycle = Value::of_function("loop.cycle", [position](const Arguments& args, const KeywordArguments&) {
      if (args.empty()) throw ValueError("no items for cycling given");
      return args[size_t(*position) % args.size()];
    });
    // Jinja2 runs the else when no iteration reached the end of its body: none ran, or each left by a
    // break or a continue.
    bool an_iteration_ended = false;
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      count_step();
      *position = i;
      // Each iteration has its own variables: a {% set %} in the body does not carry to the next one.
      const std::shared_ptr<Scope> iteration = inner_scope(node.undefined_in_body);
      if (node.body_reads_loop) iteration->variables.emplace_back("loop", loop_info(items, i, cycle));
      const Entered entered(scope_, iteration);
      bind(node.targets, items[size_t(i)]);
      const Flow flow = exec(node.body, out);
      if (flow == Flow::stop_loop) break;
      if (flow == Flow::next) an_iteration_ended = true;
    }
    if (!an_iteration_ended && !node.else_body.empty()) return exec_in(inner_scope(node.undefined_in_else), node.else_body, out);
    return Flow::next;
  }

  // The `loop` object of iteration i of a loop over `items`.
  [[gnu::noinline]] static Value loop_info(const List& items, int64_t i, const Value& cycle) {
    const int64_t n = int64_t(items.size());
    auto info = std::make_shared<Dict>();
    info->loop_context = true;
    info->entries = {{"index", Value::of(i + 1)},
                     {"index0", Value::of(i)},
                     {"revindex", Value::of(n - i)},
                     {"revindex0", Value::of(n - i - 1)},
                     {"first", Value::of(i == 0)},
                     {"last", Value::of(i == n - 1)},
                     {"length", Value::of(n)},
                     {"depth", Value::of(int64_t(1))},
                     {"depth0", Value::of(int64_t(0))},
                     {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item")},
                     {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item")},
                     {"cycle", cycle}};
    return Value::of(std::move(info), Value::Type::namespace_);
  }

  [[gnu::noinline]] void define_macro(const Node& node) {
    const Node* macro = &node;
    // The macro keeps its scope weakly: the scope holds the macro, and a strong hold would never be freed.
    std::weak_ptr<Scope> defined_in = scope_;
    Value function = Value::of_function(node.text, [this, macro, defined_in](const Arguments& args, const KeywordArguments& kwargs) {
      return call_macro(*macro, defined_in.lock(), args, kwargs);
    });
    function.boolean = true;  // a macro: printed as <Macro 'name'>
    set(node.text, std::move(function));
  }

  Value call_macro(const Node& macro, std::shared_ptr<Scope> defined_in, const Arguments& args, const KeywordArguments& kwargs) {
    if (!defined_in)
      throw ValueError("macro '" + macro.text + "' is called after the loop or macro that defined it has ended, which chat templates do not support");
    if (macro_depth_ >= kMaxMacroDepth) throw ValueError("macros call each other more than " + std::to_string(kMaxMacroDepth) + " deep");
    if (args.size() > macro.params.size()) throw ValueError("macro '" + macro.text + "' takes not more than " + std::to_string(macro.params.size()) + " argument(s)");
    for (const auto& [key, value] : kwargs) {
      const auto param = std::find_if(macro.params.begin(), macro.params.end(), [&](const auto& p) { return p.first == key; });
      if (param == macro.params.end() || size_t(param - macro.params.begin()) < args.size())  // unknown, or given by position too
        throw ValueError("macro '" + macro.text + "' takes no keyword argument '" + key + "'");
    }
    ++macro_depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{macro_depth_};
    auto call = std::make_shared<Scope>(Scope{{}, std::move(defined_in)});
    begin_undefined(*call, macro.undefined_in_body);
    const Entered entered(scope_, std::move(call));
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [name, default_value] = macro.params[i];
      const auto given = std::find_if(kwargs.begin(), kwargs.end(), [&](const auto& kw) { return kw.first == name; });
      if (i < args.size()) set(name, args[i]);
      else if (given != kwargs.end()) set(name, given->second);
      else if (default_value) set(name, eval(*default_value));
      else set(name, Value::undefined("parameter '" + name + "' was not provided"));
    }
    std::string out;
    exec(macro.body, out);
    return Value::of(std::move(out));
  }

  // Jinja2 writes a folded constant into its generated Python as its repr: an infinity or NaN there is
  // the name inf or nan, which Python does not know.
  static void check_folded(const Value& v) {
    if (v.type == Value::Type::real && !std::isfinite(v.real))
      throw ValueError(std::string("name '") + (std::isnan(v.real) ? "nan" : "inf") + "' is not defined (Jinja2 writes this constant into its generated code as a name)");
    if (v.has_items()) {
      for (const Value& item : *v.items) check_folded(item);
    }
    if (v.is_mapping()) {
      for (const auto& [key, item] : v.dict->entries) check_folded(item);
    }
  }

  Value eval(const Expr& e) {
    try {
      const Deeper deeper(depth_);
      if (e.folded) {
        Value value = evaluate(e);
        check_folded(value);
        return value;
      }
      return evaluate(e);
    } catch (const TemplateRaised& raised) {
      throw RaisedError(e.line, raised.what());
    } catch (const ValueError& error) {
      throw RenderError(e.line, error.what());
    }
  }

  // The cases of evaluate() and exec() that need many locals have functions of their own, kept out of line,
  // so that the frames every level of nesting takes stay small (under AddressSanitizer, too).
  Value evaluate(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.literal;
      case Expr::Kind::name: return lookup(e.name);
      case Expr::Kind::attribute:
      case Expr::Kind::item: return evaluate_lookup(e);
      case Expr::Kind::slice: return evaluate_slice(e);
      case Expr::Kind::call: return evaluate_call(e);
      case Expr::Kind::filter:
      case Expr::Kind::test: return evaluate_filter_or_test(e);
      case Expr::Kind::negate:
      case Expr::Kind::plus: return evaluate_sign(e);
      case Expr::Kind::binary: return evaluate_binary(e);
      case Expr::Kind::concat: return evaluate_concat(e);
      case Expr::Kind::compare: return evaluate_comparison(e);
      case Expr::Kind::logical_and:
      case Expr::Kind::logical_or:
      case Expr::Kind::logical_not:
      case Expr::Kind::condition: return evaluate_logic(e);
      case Expr::Kind::list:
      case Expr::Kind::tuple:
      case Expr::Kind::dict: return evaluate_display(e);
    }
    throw ValueError("an expression of an unknown kind");
  }

  [[gnu::noinline]] Value evaluate_lookup(const Expr& e) {  // a.name, a[key]
    const Value object = eval(*e.args[0]);
    if (e.kind == Expr::Kind::attribute) return get_attribute(object, e.name);
    return get_item(object, eval(*e.args[1]));
  }

  [[gnu::noinline]] Value evaluate_binary(const Expr& e) {
    const Value left = eval(*e.args[0]);
    const Value right = eval(*e.args[1]);
    // Jinja2 writes a folded constant base as its repr without parentheses: `-2 ** i` (or `(1 - 3) ** i`)
    // becomes Python's -2 ** i, which is -(2 ** i). Its results are kept.
    if (e.name == "**" && e.args[0]->constant && !e.args[1]->constant && left.is_number() && left.type != Value::Type::boolean &&
        (left.is_integral() ? left.as_integer() < 0 : std::signbit(left.real) && !std::isnan(left.real))) {
      if (left.is_integral()) check_overflow(left.as_integer() == std::numeric_limits<int64_t>::min());
      const Value magnitude = left.is_integral() ? Value::of(-left.as_integer()) : Value::of(-left.real);
      const Value power = arithmetic("**", magnitude, right);
      if (power.is_integral()) {
        check_overflow(power.as_integer() == std::numeric_limits<int64_t>::min());
        return Value::of(-power.as_integer());
      }
      return Value::of(-power.as_real());
    }
    return arithmetic(e.name, left, right);
  }

  [[gnu::noinline]] Value evaluate_concat(const Expr& e) {
    std::string text;
    for (const ExprPtr& part : e.args) text += to_str(eval(*part));
    return Value::of(std::move(text));
  }

  [[gnu::noinline]] Value evaluate_logic(const Expr& e) {  // and, or, not, a if b else c
    Value first = eval(*e.args[0]);
    switch (e.kind) {
      case Expr::Kind::logical_and: return truthy(first) ? eval(*e.args[1]) : first;
      case Expr::Kind::logical_or: return truthy(first) ? first : eval(*e.args[1]);
      case Expr::Kind::logical_not: return Value::of(!truthy(first));
      default:  // condition: args[0] is the test
        if (truthy(first)) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the condition was false and there is no else");
    }
  }

  [[gnu::noinline]] Value evaluate_slice(const Expr& e) {
    const Value target = eval(*e.args[0]);
    Value bounds[3];
    for (int i = 0; i < 3; ++i) bounds[i] = e.args[size_t(i) + 1] ? eval(*e.args[size_t(i) + 1]) : Value::none();
    return slice(target, &bounds[0], &bounds[1], &bounds[2]);
  }

  [[gnu::noinline]] Value evaluate_call(const Expr& e) {
    const Value callee = eval(*e.args[0]);
    require_defined(callee);
    if (callee.type != Value::Type::function) throw ValueError(std::string("'") + type_name(callee) + "' object is not callable");
    Arguments args;
    KeywordArguments kwargs;
    arguments(e, args, kwargs);
    return (*callee.function)(args, kwargs);
  }

  [[gnu::noinline]] Value evaluate_filter_or_test(const Expr& e) {
    const Value input = eval(*e.args[0]);
    Arguments args;
    KeywordArguments kwargs;
    arguments(e, args, kwargs);
    if (e.kind == Expr::Kind::filter) return e.filter(input, args, kwargs);
    return Value::of((*e.test)(input, args) != e.negated);
  }

  [[gnu::noinline]] Value evaluate_sign(const Expr& e) {
    const Value v = eval(*e.args[0]);
    require_defined(v);
    if (!v.is_number()) throw ValueError("bad operand type for unary " + std::string(e.kind == Expr::Kind::negate ? "-" : "+") + ": '" + type_name(v) + "'");
    if (e.kind == Expr::Kind::plus) return v.is_integral() ? Value::of(v.as_integer()) : v;
    if (v.is_integral()) {
      check_overflow(v.as_integer() == std::numeric_limits<int64_t>::min());
      return Value::of(-v.as_integer());
    }
    return Value::of(-v.real);
  }

  [[gnu::noinline]] Value evaluate_comparison(const Expr& e) {
    Value left = eval(*e.args[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.args[i + 1]);
      if (!compare(e.ops[i], left, right)) return Value::of(false);
      left = std::move(right);
    }
    return Value::of(true);
  }

  [[gnu::noinline]] Value evaluate_display(const Expr& e) {  // [a, b], (a, b), {k: v}
    if (e.kind == Expr::Kind::dict) {
      auto dict = std::make_shared<Dict>();
      for (const auto& [key, value] : e.dict_items) {
        const Value k = eval(*key);
        if (!k.is_string()) throw ValueError("dict keys other than strings are not supported in chat templates");
        dict->set(k.text, eval(*value));
      }
      return Value::of(std::move(dict));
    }
    List items;
    for (const ExprPtr& item : e.args) items.push_back(eval(*item));
    return Value::of(std::move(items), e.kind == Expr::Kind::list ? Value::Type::list : Value::Type::tuple);
  }

  // A call's, filter's or test's arguments: args[1..] and the keywords.
  void arguments(const Expr& e, Arguments& args, KeywordArguments& kwargs) {
    for (size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
    for (const auto& [key, value] : e.kwargs) kwargs.emplace_back(key, eval(*value));
  }

  const Dict& context_;
  const std::tm now_;
  std::shared_ptr<Scope> scope_;  // the current scope; its chain ends at the template's own
  std::vector<std::shared_ptr<Dict>> namespaces_;
  int macro_depth_ = 0;
  int depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

Template::Template(std::string_view source, std::string origin) : origin_(std::move(origin)) { root_ = parse(lex(source, origin_), origin_); }
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context, const std::tm& now) const {
  if (!context.is_object()) throw InputError(origin_ + ": the variables of a template must be a JSON object");
  Value variables;
  try {
    variables = Value::of_json(context);
  } catch (const ValueError& error) {
    throw InputError(origin_ + ": the template's variables: " + error.what());
  }
  std::string out;
  try {
    Renderer(*variables.dict, now).run(*root_, out);
  } catch (const std::bad_alloc&) {
    throw InputError(origin_ + ": the template needs more memory than this machine gives it");
  } catch (const std::length_error&) {
    throw InputError(origin_ + ": the template builds a value larger than a string or list can be");
  } catch (const RaisedError& raised) {
    throw InputError(origin_ + ": line " + std::to_string(raised.line) + ": the template raised an error: " + raised.what());
  } catch (const RenderError& error) {
    throw InputError(origin_ + ": line " + std::to_string(error.line) + ": " + error.what());
  }
  return out;
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  return render(context, local);
}

}  // namespace tilefire::jinja
