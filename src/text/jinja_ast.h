// jinja_ast.h: the syntax tree jinja_parse.cpp builds and jinja_eval.cpp walks (internal to
// the Jinja engine; see jinja.h). One node type with a kind and generic children keeps the
// two files short; which fields a kind uses is written next to the kind.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "text/jinja.h"

namespace zt::jinja {

enum class NodeKind {
  // Statements. kids = body unless noted.
  body,        // a sequence of statements (kids)
  text,        // str = the text
  output,      // a = the expression
  if_,         // args = the if and elif conditions, kids = their bodies, b = else-body (or null)
  for_,        // names = targets, a = iterable, c = filter condition (or null), kids = body, b = else-body
  set,         // names = targets (one, several for tuples, or "ns.attr"), a = value
  set_block,   // names[0] = target, kids = body whose output is the value
  macro,       // str = name, names = parameters, args = defaults (null = none), kids = body
  break_,      //
  continue_,   //
  generation,  // kids = body; its output range is recorded
  // Expressions.
  literal,  // value
  name,     // str
  list,     // args = items
  tuple,    // args = items
  dict,     // args = keys, kw_values = values
  attr,     // a = object, str = attribute
  item,     // a = object, b = index
  slice,    // a = object, args = [start, stop, step] (null = omitted)
  call,     // a = callee, args = positional, names + kw_values = keywords
  filter,   // a = operand, str = filter name, args / names / kw_values = its arguments
  test,     // a = operand, str = test name, args = arguments, negate
  unary,    // str = "-" | "+" | "not", a = operand
  binary,   // str = operator (and, or, ==, +, in, not in, ~, ...), a, b = operands
  cond,     // a = value if true, c = condition, b = value if false (null = undefined)
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string str;
  Value value;
  bool negate = false;
  int depth = 1;  // of an expression: 1 + its deepest operand's (the parser limits it)
  std::unique_ptr<Node> a, b, c;
  std::vector<std::unique_ptr<Node>> kids, args, kw_values;
  std::vector<std::string> names;
  Node(NodeKind k, int l) : kind(k), line(l) {}
};
using NodePtr = std::unique_ptr<Node>;

// Parses a template into a body node; sets *has_generation when {% generation %} occurs.
NodePtr parse_template(const std::string& source, const std::string& name, bool* has_generation);
// Whether the evaluator knows a filter / test of this name (the parser refuses others).
bool known_filter(const std::string& name);
bool known_test(const std::string& name);

}  // namespace zt::jinja
