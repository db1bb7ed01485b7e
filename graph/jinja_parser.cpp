// The parser of chat templates: Jinja2's grammar and precedence, over the tokens of jinja_lexer.cpp.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <set>

#include "graph/jinja_syntax.h"
#include "tilefire/errors.h"

namespace tilefire::jinja {
namespace {

// Tags of Jinja2 that no chat template Tilefire knows needs; refused by name rather than misread.
const std::set<std::string, std::less<>> kRefusedTags = {"include", "extends", "block", "import", "from", "filter", "call",
                                                          "with", "autoescape", "do", "trans", "pluralize"};

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin) : tokens_(tokens), origin_(origin) {}

  NodePtr run() {
    auto root = std::make_unique<Node>();
    root->kind = Node::Kind::sequence;
    root->body = body({});
    if (current().type != Token::Type::end) fail("an unexpected {% " + tokens_[pos_ + 1].value + " %}");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw InputError(origin_ + ": line " + std::to_string(current().line) + ": " + message);
  }
  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  bool at_op(std::string_view op) const { return current().type == Token::Type::op && current().value == op; }
  bool at_name(std::string_view name) const { return current().type == Token::Type::name && current().value == name; }
  void expect_op(std::string_view op) {
    if (!at_op(op)) fail("expected '" + std::string(op) + "'" + found());
    ++pos_;
  }
  std::string expect_name() {
    if (current().type != Token::Type::name) fail("expected a name" + found());
    return tokens_[pos_++].value;
  }
  void expect_block_end() {
    if (current().type != Token::Type::block_end) fail("expected the end of the tag %}" + found());
    ++pos_;
  }
  std::string found() const {
    switch (current().type) {
      case Token::Type::end: return ", found the end of the template";
      case Token::Type::block_end: return ", found %}";
      case Token::Type::variable_end: return ", found }}";
      default: return ", found '" + current().value + "'";
    }
  }

  // Statements until a block tag named in `ends` (left for the caller) or the end of the template.
  Body body(const std::set<std::string, std::less<>>& ends) {
    const Nest nest(*this);
    Body nodes;
    while (true) {
      const Token& token = current();
      if (token.type == Token::Type::end) {
        if (!ends.empty()) {
          const auto end = std::find_if(ends.begin(), ends.end(), [](const std::string& e) { return e.rfind("end", 0) == 0; });
          const std::string closing = end != ends.end() ? *end : *ends.begin();
          fail("the template ends inside {% " + closing.substr(3) + " %}: expected {% " + closing + " %}");
        }
        return nodes;
      }
      if (token.type == Token::Type::text) {
        auto node = make(Node::Kind::text);
        node->text = token.value;
        ++pos_;
        nodes.push_back(std::move(node));
      } else if (token.type == Token::Type::variable_begin) {
        ++pos_;
        auto node = make(Node::Kind::output);
        node->expr = tuple(true);
        if (current().type != Token::Type::variable_end) fail("expected the end of the tag }}" + found());
        ++pos_;
        nodes.push_back(std::move(node));
      } else if (token.type == Token::Type::block_begin) {
        if (peek().type == Token::Type::name && ends.count(peek().value)) return nodes;
        ++pos_;
        nodes.push_back(statement());
      } else {
        fail("unexpected" + found());
      }
    }
  }

  NodePtr make(Node::Kind kind) const {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = current().line;
    return node;
  }

  // Consumes "{% name" of a closing tag and its end.
  void closing(std::string_view name) {
    ++pos_;  // block_begin
    if (!at_name(name)) fail("expected {% " + std::string(name) + " %}" + found());
    ++pos_;
    expect_block_end();
  }

  NodePtr statement() {
    if (current().type != Token::Type::name) fail("expected a statement name after {%" + found());
    const std::string keyword = current().value;
    if (kRefusedTags.count(keyword)) fail("{% " + keyword + " %} is not supported in chat templates");
    ++pos_;
    if (keyword == "if") return if_statement();
    if (keyword == "for") return for_statement();
    if (keyword == "set") return set_statement();
    if (keyword == "macro") return macro_statement();
    if (keyword == "break" || keyword == "continue") {
      if (loop_depth_ == 0) fail("{% " + keyword + " %} outside a loop");
      auto node = make(keyword == "break" ? Node::Kind::loop_break : Node::Kind::loop_continue);
      expect_block_end();
      return node;
    }
    if (keyword == "generation") {
      // transformers' assistant-mask tag renders its body as a call block's caller: a function, so the
      // body has a scope of its own and a break in it is outside any loop.
      auto node = make(Node::Kind::scoped);
      expect_block_end();
      const int saved_depth = loop_depth_;
      loop_depth_ = 0;
      node->body = body({"endgeneration"});
      loop_depth_ = saved_depth;
      closing("endgeneration");
      return node;
    }
    if (keyword == "print") {  // {% print a, b %} prints a, then b
      auto node = make(Node::Kind::sequence);
      do {
        if (!node->body.empty()) expect_op(",");
        auto output = make(Node::Kind::output);
        output->expr = expression(true);
        node->body.push_back(std::move(output));
      } while (current().type != Token::Type::block_end);
      expect_block_end();
      return node;
    }
    --pos_;
    fail("unknown tag {% " + keyword + " %}");
  }

  NodePtr if_statement() {
    auto node = make(Node::Kind::branch);
    ExprPtr condition = tuple(false);
    while (true) {
      expect_block_end();
      Body branch = body({"elif", "else", "endif"});
      node->branches.emplace_back(std::move(condition), std::move(branch));
      ++pos_;  // block_begin
      const std::string keyword = expect_name();
      if (keyword == "elif") {
        condition = tuple(false);
      } else if (keyword == "else") {
        expect_block_end();
        node->branches.emplace_back(nullptr, body({"endif"}));
        closing("endif");
        return node;
      } else {
        expect_block_end();
        return node;
      }
    }
  }

  std::vector<std::string> targets() {
    std::vector<std::string> names;
    const bool parenthesised = at_op("(");
    if (parenthesised) ++pos_;
    names.push_back(expect_name());
    while (at_op(",")) {
      ++pos_;
      if (current().type != Token::Type::name) break;
      names.push_back(expect_name());
    }
    if (parenthesised) expect_op(")");
    return names;
  }

  NodePtr for_statement() {
    auto node = make(Node::Kind::loop);
    node->targets = targets();
    if (std::find(node->targets.begin(), node->targets.end(), "loop") != node->targets.end())
      fail("Can't assign to special loop variable in for-loop target");
    if (!at_name("in")) fail("expected 'in' in a for loop" + found());
    ++pos_;
    node->expr = tuple(false, /*stop_at_if=*/true);
    if (at_name("if")) {
      ++pos_;
      node->filter = expression(true);
    }
    if (at_name("recursive")) fail("recursive loops are not supported in chat templates");
    expect_block_end();
    ++loop_depth_;
    ++inside_loops_;
    node->body = body({"else", "endfor"});
    --loop_depth_;
    ++pos_;
    if (expect_name() == "else") {
      expect_block_end();
      node->else_body = body({"endfor"});
      closing("endfor");
    } else {
      expect_block_end();
    }
    --inside_loops_;
    return node;
  }

  NodePtr set_statement() {
    auto node = make(Node::Kind::assign);
    if (current().type == Token::Type::name && peek().type == Token::Type::op && peek().value == ".") {
      node->targets.push_back(expect_name());
      ++pos_;
      node->attribute = expect_name();
    } else {
      node->targets = targets();
    }
    for (const std::string& target : node->targets) {
      // Jinja2 refuses a store to `loop` anywhere in a for statement, in its macros and blocks too.
      if (target == "loop" && inside_loops_ > 0 && node->attribute.empty()) fail("Can't assign to special loop variable in for-loop target");
    }
    if (current().type == Token::Type::block_end || at_op("|")) {
      if (node->targets.size() != 1) fail("a {% set %} block assigns one name");
      node->kind = Node::Kind::assign_block;
      if (at_op("|")) {  // {% set x | trim %}: the filters, applied to the block's text
        auto text = expr(Expr::Kind::name, current().line);
        text->name = kSetBlockText;
        node->filter = filters(std::move(text));
        if (node->filter->kind != Expr::Kind::filter) fail("expected filters after {% set " + node->targets[0] + " |" + found());
      }
      expect_block_end();
      node->body = body({"endset"});
      closing("endset");
      return node;
    }
    expect_op("=");
    node->expr = tuple(true);
    expect_block_end();
    return node;
  }

  NodePtr macro_statement() {
    auto node = make(Node::Kind::macro);
    node->text = expect_name();
    expect_op("(");
    while (!at_op(")")) {
      if (!node->params.empty()) expect_op(",");  // (a, b): no trailing comma, as Jinja2's parse_signature
      std::string param = expect_name();
      if (std::any_of(node->params.begin(), node->params.end(), [&](const auto& p) { return p.first == param; }))
        fail("duplicate argument '" + param + "' in macro '" + node->text + "'");
      ExprPtr default_value;
      if (at_op("=")) {
        ++pos_;
        default_value = expression(true);
      } else if (!node->params.empty() && node->params.back().second) {
        fail("non-default argument follows default argument");
      }
      node->params.emplace_back(std::move(param), std::move(default_value));
    }
    expect_op(")");
    expect_block_end();
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    node->body = body({"endmacro"});
    loop_depth_ = saved_depth;
    closing("endmacro");
    return node;
  }

  // ---- expressions ----

  // Attaches a child to an expression. A tree deeper than kMaxNesting (a chain of 10,000 `+` or `.attr`,
  // which no bracket nests) is refused here, while it is still shallow enough to be freed by recursion.
  void deepen(Expr& node, const ExprPtr& child) const {
    if (!child) return;
    node.constant = node.constant && child->constant;
    node.depth = std::max(node.depth, child->depth + 1);
    if (node.depth > kMaxNesting) fail("an expression nests more than " + std::to_string(kMaxNesting) + " levels deep");
  }
  void add(Expr& node, ExprPtr child) const {
    deepen(node, child);
    node.args.push_back(std::move(child));
  }
  void add_keyword(Expr& node, std::string key, ExprPtr value) const {
    deepen(node, value);
    node.kwargs.emplace_back(std::move(key), std::move(value));
  }
  void add_pair(Expr& node, ExprPtr key, ExprPtr value) const {
    deepen(node, key);
    deepen(node, value);
    node.dict_items.emplace_back(std::move(key), std::move(value));
  }

  ExprPtr expr(Expr::Kind kind, int line) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->constant = kind != Expr::Kind::name && kind != Expr::Kind::call;  // until a child says otherwise
    return e;
  }

  // An expression, or several separated by commas: a tuple ({{ a, b }}, {% set a, b = 1, 2 %}).
  ExprPtr tuple(bool with_condition, bool stop_at_if = false) {
    const int line = current().line;
    ExprPtr first = with_condition ? expression(true) : or_expression();
    if (!at_op(",")) return first;
    auto node = expr(Expr::Kind::tuple, line);
    add(*node, std::move(first));
    while (at_op(",")) {
      ++pos_;
      if (current().type == Token::Type::block_end || current().type == Token::Type::variable_end || (stop_at_if && at_name("if"))) break;
      add(*node, with_condition ? expression(true) : or_expression());
    }
    return node;
  }

  ExprPtr expression(bool with_condition) {
    const Nest nest(*this);
    ExprPtr value = or_expression();
    while (with_condition && at_name("if")) {
      const int line = current().line;
      ++pos_;
      auto node = expr(Expr::Kind::condition, line);
      add(*node, or_expression());
      add(*node, std::move(value));
      if (at_name("else")) {
        ++pos_;
        add(*node, expression(true));
      } else {
        node->args.push_back(nullptr);  // no else
      }
      value = std::move(node);
    }
    return value;
  }

  // `or` and `and`: left-associative, each over the next tighter level.
  ExprPtr logical(Expr::Kind kind, std::string_view word, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (at_name(word)) {
      auto node = expr(kind, current().line);
      ++pos_;
      add(*node, std::move(left));
      add(*node, (this->*operand)());
      left = std::move(node);
    }
    return left;
  }
  ExprPtr or_expression() { return logical(Expr::Kind::logical_or, "or", &Parser::and_expression); }
  ExprPtr and_expression() { return logical(Expr::Kind::logical_and, "and", &Parser::not_expression); }

  ExprPtr not_expression() {
    const Nest nest(*this);
    if (at_name("not")) {
      auto node = expr(Expr::Kind::logical_not, current().line);
      ++pos_;
      add(*node, not_expression());
      return node;
    }
    return comparison();
  }

  ExprPtr comparison() {
    const int line = current().line;
    ExprPtr first = additive();
    std::unique_ptr<Expr> node;
    while (true) {
      std::string op;
      if (current().type == Token::Type::op &&
          (current().value == "==" || current().value == "!=" || current().value == "<" || current().value == ">" ||
           current().value == "<=" || current().value == ">=")) {
        op = current().value;
        ++pos_;
      } else if (at_name("in")) {
        op = "in";
        ++pos_;
      } else if (at_name("not") && peek().type == Token::Type::name && peek().value == "in") {
        op = "notin";
        pos_ += 2;
      } else {
        break;
      }
      if (!node) {
        node = expr(Expr::Kind::compare, line);
        add(*node, std::move(first));
      }
      node->ops.push_back(op);
      add(*node, additive());
    }
    return node ? std::move(node) : std::move(first);
  }

  ExprPtr binary(const char* op, ExprPtr left, ExprPtr right, int line) const {
    auto node = expr(Expr::Kind::binary, line);
    node->name = op;
    add(*node, std::move(left));
    add(*node, std::move(right));
    return node;
  }

  ExprPtr additive() {
    ExprPtr left = concatenation();
    while (at_op("+") || at_op("-")) {
      const char* op = at_op("+") ? "+" : "-";
      const int line = current().line;
      ++pos_;
      left = binary(op, std::move(left), concatenation(), line);
    }
    return left;
  }

  ExprPtr concatenation() {
    const int line = current().line;
    ExprPtr first = multiplicative();
    if (!at_op("~")) return first;
    auto node = expr(Expr::Kind::concat, line);
    add(*node, std::move(first));
    while (at_op("~")) {
      ++pos_;
      add(*node, multiplicative());
    }
    return node;
  }

  ExprPtr multiplicative() {
    ExprPtr left = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = current().value;
      const int line = current().line;
      ++pos_;
      left = binary(op == "*" ? "*" : op == "/" ? "/" : op == "//" ? "//" : "%", std::move(left), power(), line);
    }
    return left;
  }

  ExprPtr power() {
    ExprPtr left = unary(true);
    while (at_op("**")) {
      const int line = current().line;
      ++pos_;
      left = binary("**", std::move(left), unary(true), line);
    }
    return left;
  }

  ExprPtr unary(bool with_filter) {
    const Nest nest(*this);
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      node = expr(at_op("-") ? Expr::Kind::negate : Expr::Kind::plus, current().line);
      ++pos_;
      add(*node, unary(false));
    } else {
      node = primary();
    }
    node = postfix(std::move(node));
    if (with_filter) node = filters(std::move(node));
    return node;
  }

  ExprPtr primary() {
    const Token& token = current();
    const int line = token.line;
    switch (token.type) {
      case Token::Type::name: {
        ++pos_;
        auto node = expr(Expr::Kind::literal, line);
        if (token.value == "true" || token.value == "True") node->literal = Value::of(true);
        else if (token.value == "false" || token.value == "False") node->literal = Value::of(false);
        else if (token.value == "none" || token.value == "None") node->literal = Value::none();
        else {
          node->kind = Expr::Kind::name;
          node->name = token.value;
          node->constant = false;
        }
        return node;
      }
      case Token::Type::string: {
        std::string text;
        while (current().type == Token::Type::string) text += tokens_[pos_++].value;  // 'a' 'b' is 'ab'
        auto node = expr(Expr::Kind::literal, line);
        node->literal = Value::of(std::move(text));
        return node;
      }
      case Token::Type::integer: {
        auto node = expr(Expr::Kind::literal, line);
        node->literal = Value::of(integer_literal(token.value));
        ++pos_;
        return node;
      }
      case Token::Type::real: {
        ++pos_;
        auto node = expr(Expr::Kind::literal, line);
        node->literal = Value::of(std::strtod(token.value.c_str(), nullptr));  // 1e999 is inf, as in Python
        return node;
      }
      case Token::Type::op:
        if (token.value == "(") {
          ++pos_;
          if (at_op(")")) {
            ++pos_;
            return expr(Expr::Kind::tuple, line);
          }
          ExprPtr inner = expression(true);
          if (at_op(",")) {
            auto node = expr(Expr::Kind::tuple, line);
            add(*node, std::move(inner));
            while (at_op(",")) {
              ++pos_;
              if (at_op(")")) break;
              add(*node, expression(true));
            }
            inner = std::move(node);
          }
          expect_op(")");
          return inner;
        }
        if (token.value == "[") {
          ++pos_;
          auto node = expr(Expr::Kind::list, line);
          while (!at_op("]")) {
            add(*node, expression(true));
            if (!at_op(",")) break;
            ++pos_;
          }
          expect_op("]");
          return node;
        }
        if (token.value == "{") {
          ++pos_;
          auto node = expr(Expr::Kind::dict, line);
          while (!at_op("}")) {
            ExprPtr key = expression(true);
            expect_op(":");
            add_pair(*node, std::move(key), expression(true));
            if (!at_op(",")) break;
            ++pos_;
          }
          expect_op("}");
          return node;
        }
        break;
      default: break;
    }
    fail("expected an expression" + found());
  }

  // An integer token's value (the lexer took out the underscores): decimal, or 0x, 0o, 0b.
  int64_t integer_literal(const std::string& text) const {
    int base = 10;
    size_t begin = 0;
    if (text.size() > 2 && text[0] == '0' && std::isalpha(static_cast<unsigned char>(text[1]))) {
      const char prefix = char(std::tolower(static_cast<unsigned char>(text[1])));
      base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : 2;
      begin = 2;
    }
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data() + begin, text.data() + text.size(), value, base);
    if (error != std::errc() || end != text.data() + text.size())
      fail("the integer " + text + " is past 64 bits (Python's integers have no bound; Tilefire's have 64 bits)");
    return value;
  }

  ExprPtr postfix(ExprPtr node) {
    while (true) {
      const int line = current().line;
      if (at_op(".")) {
        ++pos_;
        if (current().type == Token::Type::integer) {  // a.0 is a[0]
          auto item = expr(Expr::Kind::item, line);
          add(*item, std::move(node));
          auto index = expr(Expr::Kind::literal, line);
          index->literal = Value::of(integer_literal(current().value));
          ++pos_;
          add(*item, std::move(index));
          node = std::move(item);
          continue;
        }
        auto attribute = expr(Expr::Kind::attribute, line);
        attribute->name = expect_name();
        add(*attribute, std::move(node));
        node = std::move(attribute);
      } else if (at_op("[")) {
        ++pos_;
        node = subscript(std::move(node), line);
      } else if (at_op("(")) {
        node = call(std::move(node), line);
      } else {
        return node;
      }
    }
  }

  ExprPtr subscript(ExprPtr target, int line) {
    ExprPtr start, stop, step;
    if (!at_op(":")) {
      start = expression(true);
      if (at_op("]")) {
        ++pos_;
        auto item = expr(Expr::Kind::item, line);
        add(*item, std::move(target));
        add(*item, std::move(start));
        return item;
      }
      if (!at_op(":")) fail("expected ']' or ':' in a subscript" + found());
    }
    ++pos_;  // ':'
    if (!at_op("]") && !at_op(":")) stop = expression(true);
    if (at_op(":")) {
      ++pos_;
      if (!at_op("]")) step = expression(true);
    }
    expect_op("]");
    auto node = expr(Expr::Kind::slice, line);
    add(*node, std::move(target));
    add(*node, std::move(start));
    add(*node, std::move(stop));
    add(*node, std::move(step));
    return node;
  }

  // Call arguments "(a, b, key=c)" into node->args (after what is there) and node->kwargs.
  void arguments(Expr& node) {
    expect_op("(");
    while (!at_op(")")) {
      if (at_op("*") || at_op("**")) fail("*args and **kwargs in calls are not supported in chat templates");
      if (current().type == Token::Type::name && peek().type == Token::Type::op && peek().value == "=") {
        std::string key = expect_name();
        ++pos_;
        add_keyword(node, std::move(key), expression(true));
      } else {
        if (!node.kwargs.empty()) fail("a positional argument follows a keyword argument");
        add(node, expression(true));
      }
      if (!at_op(",")) break;
      ++pos_;
    }
    expect_op(")");
  }

  ExprPtr call(ExprPtr callee, int line) {
    auto node = expr(Expr::Kind::call, line);
    add(*node, std::move(callee));
    arguments(*node);
    return node;
  }

  ExprPtr filters(ExprPtr node) {
    while (true) {
      const int line = current().line;
      if (at_op("|")) {
        ++pos_;
        auto filter = expr(Expr::Kind::filter, line);
        filter->name = expect_name();
        filter->filter = find_filter(filter->name);
        // Jinja2 does not fold the filters that take the template's context.
        for (const char* context_filter : {"map", "select", "reject", "selectattr", "rejectattr"})
          if (filter->name == context_filter) filter->constant = false;
        if (!filter->filter) fail("no filter named '" + filter->name + "' (Tilefire runs the filters chat templates use: docs/CHAT_TEMPLATES.md)");
        add(*filter, std::move(node));
        if (at_op("(")) arguments(*filter);
        node = std::move(filter);
      } else if (at_name("is")) {
        ++pos_;
        auto test = expr(Expr::Kind::test, line);
        if (at_name("not")) {
          test->negated = true;
          ++pos_;
        }
        test->name = expect_name();
        test->test = find_test(test->name);
        if (!test->test) fail("no test named '" + test->name + "'");
        add(*test, std::move(node));
        const Token& next = current();
        if (at_op("(")) {
          arguments(*test);
          if (!test->kwargs.empty()) fail("a test takes no keyword arguments");
        } else if ((next.type == Token::Type::name || next.type == Token::Type::string || next.type == Token::Type::integer ||
                    next.type == Token::Type::real || at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
          if (at_name("is")) fail("tests cannot be chained with 'is'");
          add(*test, postfix(primary()));  // "x is divisibleby 3"
        }
        node = std::move(test);
      } else if (at_op("(")) {
        node = call(std::move(node), line);
      } else {
        return node;
      }
    }
  }

  // Nesting (blocks in blocks, brackets in brackets, `not not`, `- -`) is parsed by recursion: past
  // kMaxNesting levels the template is refused, rather than the stack overflowing.
  static constexpr int kMaxNesting = 256;
  struct Nest {
    Parser& parser;
    explicit Nest(Parser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting) parser.fail("the template nests more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~Nest() { --parser.nesting_; }
  };

  const std::vector<Token>& tokens_;
  const std::string& origin_;
  size_t pos_ = 0;
  int loop_depth_ = 0;    // loops a break or continue here would leave (a macro or {% generation %} starts at 0)
  int inside_loops_ = 0;  // for statements around this point, macros and blocks or not
  int nesting_ = 0;
};

}  // namespace

namespace {

// Marks the expressions Jinja2 folds into constants written as code (Expr::folded).
void mark_folded(Expr* e, bool printed) {
  if (!e) return;
  if (e->constant) {
    e->folded = !printed;
    return;  // what is under it is folded with it
  }
  for (ExprPtr& arg : e->args) mark_folded(arg.get(), false);
  for (auto& [key, value] : e->kwargs) mark_folded(value.get(), false);
  for (auto& [key, value] : e->dict_items) {
    mark_folded(key.get(), false);
    mark_folded(value.get(), false);
  }
}

void mark_folded(Body& body) {
  for (NodePtr& node : body) {
    mark_folded(node->expr.get(), node->kind == Node::Kind::output);  // {{ constant }} is printed as text
    mark_folded(node->filter.get(), false);
    for (auto& [condition, branch] : node->branches) {
      mark_folded(condition.get(), false);
      mark_folded(branch);
    }
    for (auto& [name, default_value] : node->params) mark_folded(default_value.get(), false);
    mark_folded(node->body);
    mark_folded(node->else_body);
  }
}

}  // namespace

NodePtr parse(const std::vector<Token>& tokens, const std::string& origin) {
  NodePtr root = Parser(tokens, origin).run();
  analyze_scopes(*root);
  mark_folded(root->body);
  return root;
}

}  // namespace tilefire::jinja
