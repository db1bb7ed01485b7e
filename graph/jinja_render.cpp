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
  if (times <= 0) return "";
  if (double(text.size()) * double(times) > double(kMaxOutputBytes)) throw ValueError("a repeated string is too long");
  std::string out;
  for (int64_t i = 0; i < times; ++i) out += text;
  return out;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  const auto unsupported = [&]() -> Value {
    throw ValueError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::of(a.text + b.text);
    if (a.is_sequence() && a.type == b.type) {
      List items = a.list();
      items.insert(items.end(), b.items->begin(), b.items->end());
      return Value::of(std::move(items), a.type);
    }
  }
  if (op == "*") {
    if (a.is_string() && b.is_integral()) return Value::of(repeat(a.text, b.as_integer()));
    if (b.is_string() && a.is_integral()) return Value::of(repeat(b.text, a.as_integer()));
    if (a.is_sequence() && b.is_integral()) {
      if (double(a.items->size()) * double(std::max<int64_t>(0, b.as_integer())) > 1e7) throw ValueError("a repeated list is too long");
      List items;
      for (int64_t i = 0; i < b.as_integer(); ++i) items.insert(items.end(), a.items->begin(), a.items->end());
      return Value::of(std::move(items), a.type);
    }
  }
  if (op == "%" && a.is_string()) throw ValueError("string formatting with % is not supported in chat templates");
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
    if (q == 0) throw ValueError("float division by zero");
    if (op == "//") return Value::of(std::floor(p / q));
    double m = std::fmod(p, q);
    if (m != 0 && ((m < 0) != (q < 0))) m += q;
    return Value::of(m);
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
    return Value::of(std::pow(p, q));
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

class Renderer {
 public:
  Renderer(const Dict& context, const std::tm& now) : context_(context), now_(now) { frames_.emplace_back(); }

  void run(const Node& root, std::string& out) { exec(root.body, out); }

 private:
  enum class Flow { next, stop_loop, next_iteration };
  using Frame = std::vector<std::pair<std::string, Value>>;

  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& node : body) {
      const Flow flow = exec(*node, out);
      if (flow != Flow::next) return flow;
      if (out.size() > kMaxOutputBytes) throw RenderError(node->line, "the template renders more than 64 MiB");
    }
    return Flow::next;
  }

  Flow exec(const Node& node, std::string& out) {
    try {
      switch (node.kind) {
        case Node::Kind::text: out += node.text; return Flow::next;
        case Node::Kind::output: out += to_str(eval(*node.expr)); return Flow::next;
        case Node::Kind::sequence: return exec(node.body, out);
        case Node::Kind::branch:
          for (const auto& [condition, body] : node.branches) {
            if (!condition || truthy(eval(*condition))) return exec(body, out);
          }
          return Flow::next;
        case Node::Kind::loop: return loop(node, out);
        case Node::Kind::assign: assign(node, eval(*node.expr)); return Flow::next;
        case Node::Kind::assign_block: {
          std::string captured;
          exec(node.body, captured);
          assign(node, Value::of(std::move(captured)));
          return Flow::next;
        }
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

  void set(const std::string& name, Value value) {
    Frame& frame = frames_.back();
    for (auto& [key, existing] : frame) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    frame.emplace_back(name, std::move(value));
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

  void assign(const Node& node, Value value) {
    if (node.attribute.empty()) return bind(node.targets, value);
    const Value target = lookup(node.targets[0]);
    if (target.type != Value::Type::namespace_) throw ValueError("cannot assign attribute on non-namespace object");
    target.dict->set(node.attribute, std::move(value));
  }

  Value lookup(const std::string& name) const {
    for (size_t i = frames_.size(); i-- > floor_;) {
      for (const auto& [key, value] : frames_[i]) {
        if (key == name) return value;
      }
    }
    for (const auto& [key, value] : frames_[0]) {
      if (key == name) return value;
    }
    if (const Value* found = context_.find(name)) return *found;
    return global_function(name, now_);
  }

  Flow loop(const Node& node, std::string& out) {
    List items = iterate(eval(*node.expr));
    frames_.emplace_back();
    struct PopFrame {
      std::vector<Frame>& frames;
      ~PopFrame() { frames.pop_back(); }
    } pop{frames_};
    if (node.filter) {
      List kept;
      for (const Value& item : items) {
        bind(node.targets, item);
        if (truthy(eval(*node.filter))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(node.else_body, out);
    const auto position = std::make_shared<int64_t>(0);
    const Value cycle = Value::of_function("loop.cycle", [position](const Arguments& args, const KeywordArguments&) {
      if (args.empty()) throw ValueError("no items for cycling given");
      return args[size_t(*position) % args.size()];
    });
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      *position = i;
      // Each iteration has its own variables: a {% set %} in the body does not carry to the next one.
      frames_.emplace_back();
      struct PopIteration {
        std::vector<Frame>& frames;
        ~PopIteration() { frames.pop_back(); }
      } pop_iteration{frames_};
      bind(node.targets, items[size_t(i)]);
      auto info = std::make_shared<Dict>();
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
      set("loop", Value::of(std::move(info), Value::Type::namespace_));
      if (exec(node.body, out) == Flow::stop_loop) break;
    }
    return Flow::next;
  }

  void define_macro(const Node& node) {
    const Node* macro = &node;
    set(node.text, Value::of_function(node.text, [this, macro](const Arguments& args, const KeywordArguments& kwargs) {
      return call_macro(*macro, args, kwargs);
    }));
  }

  Value call_macro(const Node& macro, const Arguments& args, const KeywordArguments& kwargs) {
    if (macro_depth_ >= kMaxMacroDepth) throw ValueError("macros call each other more than " + std::to_string(kMaxMacroDepth) + " deep");
    if (args.size() > macro.params.size()) throw ValueError("macro '" + macro.text + "' takes not more than " + std::to_string(macro.params.size()) + " argument(s)");
    for (const auto& [key, value] : kwargs) {
      if (std::none_of(macro.params.begin(), macro.params.end(), [&](const auto& p) { return p.first == key; }))
        throw ValueError("macro '" + macro.text + "' takes no keyword argument '" + key + "'");
    }
    const size_t saved_floor = floor_;
    frames_.emplace_back();
    floor_ = frames_.size() - 1;
    ++macro_depth_;
    struct Restore {
      Renderer& r;
      size_t floor;
      ~Restore() {
        r.frames_.pop_back();
        r.floor_ = floor;
        --r.macro_depth_;
      }
    } restore{*this, saved_floor};
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

  Value eval(const Expr& e) {
    try {
      return evaluate(e);
    } catch (const TemplateRaised& raised) {
      throw RaisedError(e.line, raised.what());
    } catch (const ValueError& error) {
      throw RenderError(e.line, error.what());
    }
  }

  Value evaluate(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.literal;
      case Expr::Kind::name: return lookup(e.name);
      case Expr::Kind::attribute: return get_attribute(eval(*e.args[0]), e.name);
      case Expr::Kind::item: return get_item(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::slice: {
        const Value target = eval(*e.args[0]);
        Value bounds[3];
        for (int i = 0; i < 3; ++i) bounds[i] = e.args[size_t(i) + 1] ? eval(*e.args[size_t(i) + 1]) : Value::none();
        return slice(target, &bounds[0], &bounds[1], &bounds[2]);
      }
      case Expr::Kind::call: {
        const Value callee = eval(*e.args[0]);
        require_defined(callee);
        if (callee.type != Value::Type::function) throw ValueError(std::string("'") + type_name(callee) + "' object is not callable");
        Arguments args;
        KeywordArguments kwargs;
        arguments(e, 1, args, kwargs);
        return (*callee.function)(args, kwargs);
      }
      case Expr::Kind::filter: {
        const Value input = eval(*e.args[0]);
        Arguments args;
        KeywordArguments kwargs;
        arguments(e, 1, args, kwargs);
        return e.filter(input, args, kwargs);
      }
      case Expr::Kind::test: {
        const Value input = eval(*e.args[0]);
        Arguments args;
        KeywordArguments kwargs;
        arguments(e, 1, args, kwargs);
        return Value::of(e.test(input, args) != e.negated);
      }
      case Expr::Kind::negate:
      case Expr::Kind::plus: {
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
      case Expr::Kind::binary: return arithmetic(e.name, eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::concat: {
        std::string text;
        for (const ExprPtr& part : e.args) text += to_str(eval(*part));
        return Value::of(std::move(text));
      }
      case Expr::Kind::compare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value::of(false);
          left = std::move(right);
        }
        return Value::of(true);
      }
      case Expr::Kind::logical_and: {
        Value left = eval(*e.args[0]);
        return truthy(left) ? eval(*e.args[1]) : left;
      }
      case Expr::Kind::logical_or: {
        Value left = eval(*e.args[0]);
        return truthy(left) ? left : eval(*e.args[1]);
      }
      case Expr::Kind::logical_not: return Value::of(!truthy(eval(*e.args[0])));
      case Expr::Kind::condition:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the condition was false and there is no else");
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        List items;
        for (const ExprPtr& item : e.args) items.push_back(eval(*item));
        return Value::of(std::move(items), e.kind == Expr::Kind::list ? Value::Type::list : Value::Type::tuple);
      }
      case Expr::Kind::dict: {
        auto dict = std::make_shared<Dict>();
        for (const auto& [key, value] : e.dict_items) {
          const Value k = eval(*key);
          if (!k.is_string()) throw ValueError("dict keys other than strings are not supported in chat templates");
          dict->set(k.text, eval(*value));
        }
        return Value::of(std::move(dict));
      }
    }
    throw ValueError("an expression of an unknown kind");
  }

  void arguments(const Expr& e, size_t first, Arguments& args, KeywordArguments& kwargs) {
    for (size_t i = first; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
    for (const auto& [key, value] : e.kwargs) kwargs.emplace_back(key, eval(*value));
  }

  const Dict& context_;
  const std::tm now_;
  std::vector<Frame> frames_;  // [0]: the template's own variables; then loops' and macros'
  size_t floor_ = 1;           // inside a macro, the frames below its own (but [0]) are not visible
  int macro_depth_ = 0;
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
