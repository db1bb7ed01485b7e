// Which names a scope starts with as undefined (graph/jinja_syntax.h, analyze_scopes), decided as
// Jinja2's compiler decides them (its idtracking.py) before a template runs.
//
// Jinja2 compiles each scope (the template, a loop's body, its else, a macro, a set block, a call block)
// to a Python function whose variables are fixed when it is compiled. A name assigned anywhere in a scope
// is that scope's variable everywhere in it, and in the scopes nested in it: a loop or a macro that reads
// it before the assignment has run sees the variable unset (undefined), not the caller's value of the same
// name. Unless the scope read the name before assigning it, or assigns it in an if: then the variable
// starts as the value the name has outside (Jinja2's resolve). Tilefire's renderer looks
// names up in its chain of scopes as they are when it runs, which gives the same answers except for the
// names that begin undefined; those are listed here, and set so when a scope begins.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/jinja_syntax.h"

namespace tilefire::jinja {
namespace {

// Jinja2's Symbols: what each name of a scope refers to.
enum class Binding { parameter, resolve, alias, undefined };

struct Symbols {
  const Symbols* parent = nullptr;
  std::map<std::string, Binding> refs;
  std::set<std::string> stores;

  bool has_ref(const std::string& name) const { return refs.count(name) || (parent && parent->has_ref(name)); }
  void declare_parameter(const std::string& name) {
    stores.insert(name);
    refs[name] = Binding::parameter;
  }
  void load(const std::string& name) {
    if (!has_ref(name)) refs[name] = Binding::resolve;
  }
  void store(const std::string& name) {
    stores.insert(name);
    if (refs.count(name)) return;
    refs[name] = parent && parent->has_ref(name) ? Binding::alias : Binding::undefined;
  }
  // After the branches of an if, each a copy of this scope's symbols that went through its branch: a name
  // first assigned in any branch starts as its outer value (alias or resolve), as in Jinja2 3.1, however
  // many branches assign it.
  void branch_update(const std::vector<Symbols>& branches) {
    std::set<std::string> assigned;
    for (const Symbols& branch : branches) {
      for (const std::string& name : branch.stores) {
        if (!stores.count(name)) assigned.insert(name);
      }
    }
    for (const Symbols& branch : branches) {
      for (const auto& [name, binding] : branch.refs) refs[name] = binding;
      stores.insert(branch.stores.begin(), branch.stores.end());
    }
    for (const std::string& name : assigned) refs[name] = parent && parent->has_ref(name) ? Binding::alias : Binding::resolve;
  }
};

// The names an expression reads, in Jinja2's visiting order (which does not matter within one
// expression: it assigns nothing).
void load_names(const Expr* e, Symbols& symbols) {
  if (!e) return;
  if (e->kind == Expr::Kind::name && e->name != kSetBlockText) symbols.load(e->name);
  for (const ExprPtr& arg : e->args) load_names(arg.get(), symbols);
  for (const auto& [key, value] : e->kwargs) load_names(value.get(), symbols);
  for (const auto& [key, value] : e->dict_items) {
    load_names(key.get(), symbols);
    load_names(value.get(), symbols);
  }
}

void visit(const Node& node, Symbols& symbols);

void visit_body(const Body& body, Symbols& symbols) {
  for (const NodePtr& node : body) visit(*node, symbols);
}

// Jinja2's FrameSymbolVisitor: a statement as its scope sees it; the scopes nested in it (a loop's body, a
// macro, a set block's body, a call block) are not entered.
void visit(const Node& node, Symbols& symbols) {
  switch (node.kind) {
    case Node::Kind::output: load_names(node.expr.get(), symbols); return;
    case Node::Kind::sequence: visit_body(node.body, symbols); return;  // {% print a, b %}
    case Node::Kind::assign:
      load_names(node.expr.get(), symbols);
      if (!node.attribute.empty()) return symbols.load(node.targets[0]);  // {% set ns.x = ... %} reads ns
      for (const std::string& target : node.targets) symbols.store(target);
      return;
    case Node::Kind::assign_block:
      if (!node.attribute.empty()) return symbols.load(node.targets[0]);
      symbols.store(node.targets[0]);
      return;
    case Node::Kind::macro: symbols.store(node.text); return;
    case Node::Kind::loop: load_names(node.expr.get(), symbols); return;
    case Node::Kind::branch: {
      // Jinja2's If: the first test, then three branches: the body, the elifs (each an If of its own,
      // visited in one copy), the else.
      const auto& branches = node.branches;
      load_names(branches[0].first.get(), symbols);
      std::vector<Symbols> visited(3, symbols);
      visit_body(branches[0].second, visited[0]);
      for (size_t i = 1; i < branches.size(); ++i) {
        if (!branches[i].first) {
          visit_body(branches[i].second, visited[2]);
          continue;
        }
        Symbols& elifs = visited[1];
        load_names(branches[i].first.get(), elifs);
        std::vector<Symbols> elif_branches(3, elifs);
        visit_body(branches[i].second, elif_branches[0]);
        elifs.branch_update(elif_branches);
      }
      symbols.branch_update(visited);
      return;
    }
    case Node::Kind::text:
    case Node::Kind::loop_break:
    case Node::Kind::loop_continue:
    case Node::Kind::scoped: return;
  }
}

// Whether `name` is read anywhere under a statement list, nested scopes included.
bool mentions(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == Expr::Kind::name && e->name == name) return true;
  for (const ExprPtr& arg : e->args) {
    if (mentions(arg.get(), name)) return true;
  }
  for (const auto& [key, value] : e->kwargs) {
    if (mentions(value.get(), name)) return true;
  }
  for (const auto& [key, value] : e->dict_items) {
    if (mentions(key.get(), name) || mentions(value.get(), name)) return true;
  }
  return false;
}

bool mentions(const Body& body, const std::string& name) {
  for (const NodePtr& node : body) {
    if (mentions(node->expr.get(), name) || mentions(node->filter.get(), name) || mentions(node->body, name) || mentions(node->else_body, name))
      return true;
    if (!node->attribute.empty() && node->targets[0] == name) return true;  // {% set loop.x = ... %} reads it
    for (const auto& [condition, branch] : node->branches) {
      if (mentions(condition.get(), name) || mentions(branch, name)) return true;
    }
    for (const auto& [parameter, default_value] : node->params) {
      if (mentions(default_value.get(), name)) return true;
    }
  }
  return false;
}

std::vector<std::string> undefined_names(const Symbols& symbols) {
  std::vector<std::string> names;
  for (const auto& [name, binding] : symbols.refs) {
    if (binding == Binding::undefined) names.push_back(name);
  }
  return names;
}

// Finds the scopes that begin in `body` (whose scope's symbols are `scope`) and analyzes each.
void analyze_nested(Body& body, const Symbols& scope) {
  for (const NodePtr& child : body) {
    Node& node = *child;
    const auto nested = [&](const std::vector<std::string>& parameters, Body& nested_body, std::vector<std::string>& undefined) {
      Symbols symbols;
      symbols.parent = &scope;
      for (const std::string& parameter : parameters) symbols.declare_parameter(parameter);
      visit_body(nested_body, symbols);
      undefined = undefined_names(symbols);
      analyze_nested(nested_body, symbols);
    };
    switch (node.kind) {
      case Node::Kind::loop: {
        node.body_reads_loop = mentions(node.body, "loop");  // else Jinja2 makes no loop object, nor need we
        std::vector<std::string> parameters = node.targets;
        parameters.push_back("loop");
        nested(parameters, node.body, node.undefined_in_body);
        nested({}, node.else_body, node.undefined_in_else);
        break;
      }
      case Node::Kind::macro: {
        Symbols symbols;
        symbols.parent = &scope;
        for (const auto& [name, default_value] : node.params) symbols.declare_parameter(name);
        for (const auto& [name, default_value] : node.params) load_names(default_value.get(), symbols);
        visit_body(node.body, symbols);
        node.undefined_in_body = undefined_names(symbols);
        analyze_nested(node.body, symbols);
        break;
      }
      case Node::Kind::assign_block:
      case Node::Kind::scoped: nested({}, node.body, node.undefined_in_body); break;
      case Node::Kind::branch:
        for (auto& [condition, branch_body] : node.branches) analyze_nested(branch_body, scope);  // an if is no scope
        break;
      case Node::Kind::sequence: analyze_nested(node.body, scope); break;
      default: break;
    }
  }
}

}  // namespace

void analyze_scopes(Node& root) {
  Symbols symbols;
  visit_body(root.body, symbols);
  root.undefined_in_body = undefined_names(symbols);
  analyze_nested(root.body, symbols);
}

}  // namespace tilefire::jinja
