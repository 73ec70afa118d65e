// jinja_parser.h: the token stream and the Parser class that jinja_parse.cpp (the lexer, the
// statements, parse_template) and jinja_parse_expr.cpp (the expressions) share. Internal to the
// Jinja parser: not the syntax tree (jinja_ast.h) nor the evaluator (jinja_eval.cpp); nothing
// outside those two files includes it.
#pragma once
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/jinja_ast.h"

namespace zt::jinja {

enum class Tok { text, var_begin, var_end, block_begin, block_end, name, string, integer, number, op, eof };

struct Token {
  Tok type;
  std::string value;
  int line;
};

constexpr int kMaxNesting = 256;

class Lexer;  // jinja_parse.cpp

class Parser {
 public:
  Parser(std::vector<Token> toks, Lexer& lx) : tokens_(std::move(toks)), lexer_(lx) {}
  bool has_generation = false;

  NodePtr parse_all() {
    std::string end;
    NodePtr body = parse_body({}, &end);
    return body;
  }

 private:
  const Token& cur() const { return tokens_[cursor_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(cursor_ + n, tokens_.size() - 1)]; }
  bool at_op(const char* op) const { return cur().type == Tok::op && cur().value == op; }
  bool at_name(const char* n) const { return cur().type == Tok::name && cur().value == n; }
  [[noreturn]] void fail(const std::string& what);
  void expect_op(const char* op) {
    if (!at_op(op)) fail(str_cat("expected \"", op, "\", found ", describe(cur())));
    ++cursor_;
  }
  std::string expect_name() {
    if (cur().type != Tok::name) fail(str_cat("expected a name, found ", describe(cur())));
    return tokens_[cursor_++].value;
  }
  void expect_block_end() {
    if (cur().type != Tok::block_end) fail(str_cat("expected the end of the tag (%}), found ", describe(cur())));
    ++cursor_;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::block_end:
        return "\"%}\"";
      case Tok::var_end:
        return "\"}}\"";
      case Tok::eof:
        return "the end of the template";
      case Tok::string:
        return "a string";
      default:
        return quote(t.value);
    }
  }
  NodePtr node(NodeKind k) { return std::make_unique<Node>(k, cur().line); }

  // Parser recursion (one per nested block, expression, `not` or unary operator).
  struct Recursion {
    Parser& p;
    explicit Recursion(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting)
        p.fail(str_cat("the template nests blocks or expressions deeper than ", kMaxNesting, " levels (the limit)"));
    }
    ~Recursion() { --p.depth_; }
    Recursion(const Recursion&) = delete;
    Recursion& operator=(const Recursion&) = delete;
  };

  // An expression node whose operands are set: its depth is one more than its deepest operand's
  // (jinja_parse_expr.cpp).
  NodePtr done(NodePtr n);

  // Statements (jinja_parse.cpp).
  NodePtr parse_body(const std::set<std::string>& ends, std::string* end);
  NodePtr parse_statement();
  NodePtr parse_for();
  NodePtr parse_set();
  NodePtr parse_macro();
  NodePtr parse_generation();
  NodePtr parse_if();
  std::vector<std::string> parse_targets(bool allow_attr);

  // Expressions (jinja_parse_expr.cpp).
  NodePtr parse_tuple(bool with_cond);
  NodePtr parse_expression(bool with_cond);
  NodePtr binary(const std::string& op, NodePtr l, NodePtr r);
  NodePtr parse_or();
  NodePtr parse_and();
  NodePtr parse_not();
  NodePtr parse_compare();
  NodePtr parse_math1();
  NodePtr parse_concat();
  NodePtr parse_math2();
  NodePtr parse_pow();
  NodePtr parse_unary(bool with_filter);
  int64_t integer_literal(const std::string& digits);
  NodePtr parse_primary();
  void parse_call_args(Node& n);
  NodePtr parse_postfix(NodePtr n);
  NodePtr parse_subscript(NodePtr obj);
  NodePtr parse_filter_expr(NodePtr n);

  std::vector<Token> tokens_;
  Lexer& lexer_;
  size_t cursor_ = 0;
  int depth_ = 0;  // parser recursion (Recursion)
};

}  // namespace zt::jinja
