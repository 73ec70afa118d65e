// jinja_parse_expr.cpp: the expression half of the Jinja parser (see jinja_parse.cpp): the
// grammar and precedence of Jinja2's parser, from a conditional expression down through or, and,
// not, comparisons, + -, ~, * / // %, **, unary signs, filters and tests (they bind to the operand
// before any binary operator), postfix attributes, subscripts, slices and calls, to literals. Each
// node it builds is held to kMaxNesting (done). Not here: the lexer and the statements
// (jinja_parse.cpp), the Parser class declaration (jinja_parser.h).
#include <cerrno>
#include <cstdlib>

#include "core/error.h"
#include "text/jinja_ast.h"
#include "text/jinja_parser.h"

namespace zt::jinja {

// An expression node whose operands are set: its depth is one more than its deepest operand's.
// A chain the parser builds in a loop (a.b.c..., x|f|g..., 1+1+1..., x if c if d ...) is held to
// the limit here, since no recursion of the parser counts it.
NodePtr Parser::done(NodePtr n) {
  int d = 0;
  for (const Node* c : {n->a.get(), n->b.get(), n->c.get()})
    if (c) d = std::max(d, c->depth);
  for (const auto* list : {&n->args, &n->kw_values})
    for (const NodePtr& c : *list)
      if (c) d = std::max(d, c->depth);
  n->depth = d + 1;
  if (n->depth > kMaxNesting)
    fail(str_cat("an expression nested deeper than ", kMaxNesting,
                 " levels (the limit; a chain of that many operators, filters, attributes or calls?)"));
  return n;
}

// An expression, or a tuple when commas follow (as Jinja2's parse_tuple).
NodePtr Parser::parse_tuple(bool with_cond) {
  NodePtr first = parse_expression(with_cond);
  if (!at_op(",")) return first;
  NodePtr t = node(NodeKind::tuple);
  t->args.push_back(std::move(first));
  while (at_op(",")) {
    ++cursor_;
    if (cur().type == Tok::block_end || cur().type == Tok::var_end || at_op(")")) break;
    t->args.push_back(parse_expression(with_cond));
  }
  return done(std::move(t));
}

NodePtr Parser::parse_expression(bool with_cond) {
  Recursion guard(*this);  // expressions nest through here
  NodePtr e = parse_or();
  if (!with_cond) return e;
  while (at_name("if")) {
    NodePtr c = node(NodeKind::cond);
    ++cursor_;
    c->c = parse_or();
    if (at_name("else")) {
      ++cursor_;
      c->b = parse_expression(true);
    }
    c->a = std::move(e);
    e = done(std::move(c));
  }
  return e;
}
NodePtr Parser::binary(const std::string& op, NodePtr l, NodePtr r) {
  NodePtr n = node(NodeKind::binary);
  n->str = op;
  n->a = std::move(l);
  n->b = std::move(r);
  return done(std::move(n));
}
NodePtr Parser::parse_or() {
  NodePtr l = parse_and();
  while (at_name("or")) {
    ++cursor_;
    l = binary("or", std::move(l), parse_and());
  }
  return l;
}
NodePtr Parser::parse_and() {
  NodePtr l = parse_not();
  while (at_name("and")) {
    ++cursor_;
    l = binary("and", std::move(l), parse_not());
  }
  return l;
}
NodePtr Parser::parse_not() {
  if (at_name("not")) {
    Recursion guard(*this);
    NodePtr n = node(NodeKind::unary);
    ++cursor_;
    n->str = "not";
    n->a = parse_not();
    return done(std::move(n));
  }
  return parse_compare();
}
NodePtr Parser::parse_compare() {
  NodePtr l = parse_math1();
  for (;;) {
    std::string op;
    if (cur().type == Tok::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                  cur().value == ">" || cur().value == "<=" || cur().value == ">=")) {
      op = cur().value;
      ++cursor_;
    } else if (at_name("in")) {
      op = "in";
      ++cursor_;
    } else if (at_name("not") && peek().type == Tok::name && peek().value == "in") {
      op = "not in";
      cursor_ += 2;
    } else {
      return l;
    }
    l = binary(op, std::move(l), parse_math1());
  }
}
NodePtr Parser::parse_math1() {
  NodePtr l = parse_concat();
  while (at_op("+") || at_op("-")) {
    const std::string op = cur().value;
    ++cursor_;
    l = binary(op, std::move(l), parse_concat());
  }
  return l;
}
NodePtr Parser::parse_concat() {
  NodePtr l = parse_math2();
  while (at_op("~")) {
    ++cursor_;
    l = binary("~", std::move(l), parse_math2());
  }
  return l;
}
NodePtr Parser::parse_math2() {
  NodePtr l = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    const std::string op = cur().value;
    ++cursor_;
    l = binary(op, std::move(l), parse_pow());
  }
  return l;
}
NodePtr Parser::parse_pow() {
  NodePtr l = parse_unary(true);
  while (at_op("**")) {
    ++cursor_;
    l = binary("**", std::move(l), parse_unary(true));
  }
  return l;
}
NodePtr Parser::parse_unary(bool with_filter) {
  NodePtr n;
  if (at_op("-") || at_op("+")) {
    Recursion guard(*this);
    n = node(NodeKind::unary);
    n->str = cur().value;
    ++cursor_;
    n->a = parse_unary(false);
    n = done(std::move(n));
  } else {
    n = parse_primary();
  }
  n = parse_postfix(std::move(n));
  if (with_filter) n = parse_filter_expr(std::move(n));
  return n;
}

// A decimal integer literal; Python's would be exact at any size, so one past 64 bits is refused.
int64_t Parser::integer_literal(const std::string& digits) {
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) fail(str_cat("the integer literal ", digits, " does not fit in 64 bits"));
  return v;
}

NodePtr Parser::parse_primary() {
  const Token t = cur();
  NodePtr n = node(NodeKind::literal);
  switch (t.type) {
    case Tok::name:
      ++cursor_;
      if (t.value == "true" || t.value == "True") {
        n->value = Value::boolean(true);
      } else if (t.value == "false" || t.value == "False") {
        n->value = Value::boolean(false);
      } else if (t.value == "none" || t.value == "None") {
        n->value = Value::none();
      } else {
        n->kind = NodeKind::name;
        n->str = t.value;
      }
      return n;
    case Tok::string: {
      std::string s;
      while (cur().type == Tok::string) s += tokens_[cursor_++].value;  // adjacent literals join
      n->value = Value::string(s);
      return n;
    }
    case Tok::integer:
      ++cursor_;
      n->value = Value::integer(integer_literal(t.value));
      return n;
    case Tok::number:
      ++cursor_;
      n->value = Value::number(std::strtod(t.value.c_str(), nullptr));
      return n;
    default:
      break;
  }
  if (at_op("(")) {
    ++cursor_;
    if (at_op(")")) {
      ++cursor_;
      n->kind = NodeKind::tuple;
      return n;
    }
    NodePtr e = parse_tuple(true);
    expect_op(")");
    return e;
  }
  if (at_op("[")) {
    ++cursor_;
    n->kind = NodeKind::list;
    while (!at_op("]")) {
      n->args.push_back(parse_expression(true));
      if (!at_op("]")) expect_op(",");
    }
    ++cursor_;
    return done(std::move(n));
  }
  if (at_op("{")) {
    ++cursor_;
    n->kind = NodeKind::dict;
    while (!at_op("}")) {
      n->args.push_back(parse_expression(true));
      expect_op(":");
      n->kw_values.push_back(parse_expression(true));
      if (!at_op("}")) expect_op(",");
    }
    ++cursor_;
    return done(std::move(n));
  }
  fail(str_cat("unexpected ", describe(t), " in an expression"));
}

void Parser::parse_call_args(Node& n) {
  expect_op("(");
  while (!at_op(")")) {
    if (at_op("*") || at_op("**")) fail("unsupported Jinja construct: *args / **kwargs in a call");
    if (cur().type == Tok::name && peek().type == Tok::op && peek().value == "=") {
      n.names.push_back(cur().value);
      cursor_ += 2;
      n.kw_values.push_back(parse_expression(true));
    } else {
      if (!n.names.empty()) fail("a positional argument follows a keyword argument");
      n.args.push_back(parse_expression(true));
    }
    if (!at_op(")")) expect_op(",");
  }
  ++cursor_;
}

NodePtr Parser::parse_postfix(NodePtr n) {
  for (;;) {
    if (at_op(".")) {
      ++cursor_;
      if (cur().type == Tok::integer) {
        NodePtr it = node(NodeKind::item);
        NodePtr idx = node(NodeKind::literal);
        idx->value = Value::integer(integer_literal(cur().value));
        ++cursor_;
        it->a = std::move(n);
        it->b = std::move(idx);
        n = done(std::move(it));
        continue;
      }
      NodePtr at = node(NodeKind::attr);
      at->str = expect_name();
      at->a = std::move(n);
      n = done(std::move(at));
    } else if (at_op("[")) {
      ++cursor_;
      n = done(parse_subscript(std::move(n)));
    } else if (at_op("(")) {
      NodePtr c = node(NodeKind::call);
      parse_call_args(*c);
      c->a = std::move(n);
      n = done(std::move(c));
    } else {
      return n;
    }
  }
}

NodePtr Parser::parse_subscript(NodePtr obj) {
  std::vector<NodePtr> parts(1);
  bool is_slice = false;
  while (!at_op("]")) {
    if (at_op(":")) {
      ++cursor_;
      is_slice = true;
      if (parts.size() >= 3) fail("a slice takes at most start:stop:step");
      parts.emplace_back();
      continue;
    }
    if (parts.back()) fail(str_cat("unexpected ", describe(cur()), " in a subscript"));
    parts.back() = parse_expression(true);
  }
  ++cursor_;
  if (!is_slice) {
    if (!parts[0]) fail("an empty subscript []");
    NodePtr it = node(NodeKind::item);
    it->a = std::move(obj);
    it->b = std::move(parts[0]);
    return it;
  }
  NodePtr sl = node(NodeKind::slice);
  sl->a = std::move(obj);
  parts.resize(3);
  for (auto& p : parts) sl->args.push_back(std::move(p));
  return sl;
}

NodePtr Parser::parse_filter_expr(NodePtr n) {
  for (;;) {
    if (at_op("|")) {
      ++cursor_;
      NodePtr f = node(NodeKind::filter);
      f->str = expect_name();
      while (at_op(".")) {
        ++cursor_;
        f->str += '.';  // (not "." + name: GCC 12 warns falsely on that once inlined, PR 105651)
        f->str += expect_name();
      }
      if (!known_filter(f->str)) fail(str_cat("unsupported Jinja filter \"", f->str, "\""));
      if (at_op("(")) parse_call_args(*f);
      f->a = std::move(n);
      n = done(std::move(f));
    } else if (at_name("is")) {
      ++cursor_;
      NodePtr t = node(NodeKind::test);
      if (at_name("not")) {
        t->negate = true;
        ++cursor_;
      }
      t->str = expect_name();
      if (!known_test(t->str)) fail(str_cat("unsupported Jinja test \"", t->str, "\""));
      if (at_op("(")) {
        parse_call_args(*t);
      } else if ((cur().type == Tok::name && cur().value != "else" && cur().value != "or" && cur().value != "and" &&
                  cur().value != "if" && cur().value != "is" && cur().value != "in" && cur().value != "not") ||
                 cur().type == Tok::string || cur().type == Tok::integer || cur().type == Tok::number || at_op("[") ||
                 at_op("{")) {
        t->args.push_back(parse_postfix(parse_primary()));
      }
      t->a = std::move(n);
      n = done(std::move(t));
    } else if (at_op("(")) {
      NodePtr c = node(NodeKind::call);
      parse_call_args(*c);
      c->a = std::move(n);
      n = done(std::move(c));
    } else {
      return n;
    }
  }
}

}  // namespace zt::jinja
