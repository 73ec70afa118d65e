// jinja_parse.cpp: lexer and parser of the Jinja subset (see jinja.h). The lexer applies
// what transformers' environment sets: trim_blocks (the newline after a block or comment tag
// goes), lstrip_blocks (spaces and tabs before a block or comment tag on its own line go), the
// template's last newline dropped (keep_trailing_newline=False), and the "-" / "+" markers.
// The grammar and precedence follow Jinja2's parser (parse_unary: filters and tests bind to
// the operand before any binary operator; `not` is below comparisons).
// A template is untrusted: the parser's recursion (blocks, parentheses, `not` / unary chains) and
// the depth of the tree it builds (chains of operators, filters, attributes, calls, which the
// parser builds in loops) are both held to kMaxNesting, so neither parsing nor evaluating nor
// freeing the tree can exhaust the stack; an elif chain is a flat list, not a nesting.
// The expressions are in jinja_parse_expr.cpp; the Parser class they share in jinja_parser.h.
// Not here: evaluation (jinja_eval.cpp) or printing (jinja_print.cpp).
#include <cstdlib>
#include <set>

#include "core/error.h"
#include "text/jinja_ast.h"
#include "text/jinja_parser.h"

namespace zt::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name) : source_(src), name_(name) {
    if (!source_.empty() && source_.back() == '\n') source_.pop_back();  // keep_trailing_newline=False
    if (!source_.empty() && source_.back() == '\r') source_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < source_.size()) {
      size_t open = find_open(pos_);
      std::string text = source_.substr(pos_, open - pos_);
      const int text_line = line_;
      advance_to(open);
      if (open >= source_.size()) {
        push_text(text, text_line);
        break;
      }
      const char kind = source_[open + 1];  // '{', '%' or '#'
      size_t q = open + 2;
      const char sign = q < source_.size() && (source_[q] == '-' || source_[q] == '+') ? source_[q] : 0;
      if (sign) ++q;
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) blank &= text[k] == ' ' || text[k] == '\t';
          if (blank) text.resize(l_pos);
        }
      }
      push_text(text, text_line);
      advance_to(q);
      if (kind == '#') {
        const size_t e = source_.find("#}", pos_);
        if (e == std::string::npos) fail(line_, "a comment {# is never closed with #}");
        const bool strip = e > pos_ && source_[e - 1] == '-';
        advance_to(e + 2);
        line_starting = after_tag(strip, /*trim=*/true);
        continue;
      }
      const bool block = kind == '%';
      toks_.push_back({block ? Tok::block_begin : Tok::var_begin, "", line_});
      line_starting = lex_tag(block);
    }
    toks_.push_back({Tok::eof, "", line_});
    return std::move(toks_);
  }

  [[noreturn]] void fail(int line, const std::string& what) {
    throw Error(str_cat("chat template ", name_, " line ", line, ": ", what));
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < source_.size(); ++k)
      if (source_[k] == '{' && (source_[k + 1] == '{' || source_[k + 1] == '%' || source_[k + 1] == '#')) return k;
    return source_.size();
  }
  void advance_to(size_t q) {
    for (; pos_ < q && pos_ < source_.size(); ++pos_)
      if (source_[pos_] == '\n') ++line_;
    pos_ = q;
  }
  static std::string rstrip_ws(const std::string& t) {
    size_t e = t.size();
    while (e > 0 && is_space(t[e - 1])) --e;
    return t.substr(0, e);
  }
  void push_text(const std::string& t, int line) {
    if (!t.empty()) toks_.push_back({Tok::text, t, line});
  }
  // After a tag's end: "-" strips all following whitespace, trim_blocks one newline (blocks and
  // comments). Returns whether the next text starts a line (for lstrip_blocks).
  bool after_tag(bool strip, bool trim) {
    size_t q = pos_;
    if (strip) {
      while (q < source_.size() && is_space(source_[q])) ++q;
    } else if (trim && q < source_.size() && source_[q] == '\n') {
      ++q;
    } else if (trim && q + 1 < source_.size() && source_[q] == '\r' && source_[q + 1] == '\n') {
      q += 2;
    }
    const bool ends_line = q > pos_ && source_[q - 1] == '\n';
    advance_to(q);
    return ends_line;
  }

  // Tokens of one {% %} or {{ }} tag, through its end.
  bool lex_tag(bool block) {
    int depth = 0;  // { } nesting, so a dict literal's "}}" does not end a {{ }}
    for (;;) {
      while (pos_ < source_.size() && is_space(source_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= source_.size())
        fail(line_, block ? "a {% tag is never closed with %}" : "a {{ tag is never closed with }}");
      const char* end = block ? "%}" : "}}";
      const bool dash = source_[pos_] == '-' && source_.compare(pos_ + 1, 2, end) == 0;
      if ((dash || source_.compare(pos_, 2, end) == 0) && (block || depth == 0)) {
        toks_.push_back({block ? Tok::block_end : Tok::var_end, "", line_});
        advance_to(pos_ + (dash ? 3 : 2));
        return after_tag(dash, block);
      }
      const char c = source_[pos_];
      if (is_name_start(c)) {
        size_t q = pos_;
        while (q < source_.size() && (is_name_start(source_[q]) || is_digit(source_[q]))) ++q;
        toks_.push_back({Tok::name, source_.substr(pos_, q - pos_), line_});
        advance_to(q);
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                    ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
        bool found = false;
        for (const char* op : ops) {
          const size_t n = std::char_traits<char>::length(op);
          if (source_.compare(pos_, n, op) == 0) {
            if (op[0] == '{' && n == 1) ++depth;
            if (op[0] == '}' && n == 1) --depth;
            toks_.push_back({Tok::op, op, line_});
            advance_to(pos_ + n);
            found = true;
            break;
          }
        }
        if (!found) fail(line_, str_cat("unexpected character ", quote(std::string(1, c)), " in a tag"));
      }
    }
  }

  void lex_number() {
    size_t q = pos_;
    while (q < source_.size() && (is_digit(source_[q]) || source_[q] == '_')) ++q;
    bool is_float = false;
    if (q + 1 < source_.size() && source_[q] == '.' && is_digit(source_[q + 1])) {
      is_float = true;
      ++q;
      while (q < source_.size() && is_digit(source_[q])) ++q;
    }
    if (q < source_.size() && (source_[q] == 'e' || source_[q] == 'E')) {
      size_t r = q + 1;
      if (r < source_.size() && (source_[r] == '+' || source_[r] == '-')) ++r;
      if (r < source_.size() && is_digit(source_[r])) {
        is_float = true;
        q = r;
        while (q < source_.size() && is_digit(source_[q])) ++q;
      }
    }
    std::string v;
    for (size_t k = pos_; k < q; ++k)
      if (source_[k] != '_') v += source_[k];
    toks_.push_back({is_float ? Tok::number : Tok::integer, v, line_});
    advance_to(q);
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // A Python string literal: the escapes Python knows; an unknown one stays as written.
  void lex_string(char quote_char) {
    const int line = line_;
    size_t q = pos_ + 1;
    std::string v;
    for (;;) {
      if (q >= source_.size()) fail(line, "a string literal is never closed");
      const char c = source_[q];
      if (c == quote_char) break;
      if (c != '\\' || q + 1 >= source_.size()) {
        v += c;
        ++q;
        continue;
      }
      const char e = source_[q + 1];
      q += 2;
      switch (e) {
        case 'n':
          v += '\n';
          break;
        case 't':
          v += '\t';
          break;
        case 'r':
          v += '\r';
          break;
        case 'b':
          v += '\b';
          break;
        case 'f':
          v += '\f';
          break;
        case 'v':
          v += '\v';
          break;
        case 'a':
          v += '\a';
          break;
        case '0':
          v += '\0';
          break;
        case '\\':
          v += '\\';
          break;
        case '\'':
          v += '\'';
          break;
        case '"':
          v += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (q + n > source_.size()) fail(line, "a truncated \\x / \\u escape in a string literal");
          append_utf8(v, uint32_t(std::strtoul(source_.substr(q, n).c_str(), nullptr, 16)));
          q += n;
          break;
        }
        default:
          v += '\\';
          v += e;
      }
    }
    toks_.push_back({Tok::string, v, line});
    advance_to(q + 1);
  }

  std::string source_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> toks_;
};

namespace {

const std::set<std::string> kUnsupportedStatements = {"call",  "filter", "include", "import",     "from", "extends",
                                                      "block", "raw",    "with",    "autoescape", "do",   "trans"};

}  // namespace

void Parser::fail(const std::string& what) { lexer_.fail(cur().line, what); }

// Statements until a block tag named in `ends` (its name goes to *end, the tag's "{% name"
// consumed) or the end of the template (only when ends is empty).
NodePtr Parser::parse_body(const std::set<std::string>& ends, std::string* end) {
  Recursion guard(*this);
  NodePtr body = node(NodeKind::body);
  for (;;) {
    const Token& t = cur();
    if (t.type == Tok::eof) {
      for (const std::string& e : ends)
        if (e.rfind("end", 0) == 0) fail(str_cat("missing {% ", e, " %} before the end of the template"));
      return body;
    }
    if (t.type == Tok::text) {
      NodePtr n = node(NodeKind::text);
      n->str = t.value;
      ++cursor_;
      body->kids.push_back(std::move(n));
    } else if (t.type == Tok::var_begin) {
      ++cursor_;
      NodePtr n = node(NodeKind::output);
      n->a = parse_tuple(true);  // (a statement: its depth is the parser recursion's)
      if (cur().type != Tok::var_end) fail(str_cat("expected \"}}\", found ", describe(cur())));
      ++cursor_;
      body->kids.push_back(std::move(n));
    } else {  // block_begin
      const Token& nt = peek();
      if (nt.type == Tok::name && ends.count(nt.value)) {
        *end = nt.value;
        cursor_ += 2;
        return body;
      }
      ++cursor_;
      body->kids.push_back(parse_statement());
    }
  }
}

NodePtr Parser::parse_statement() {
  if (cur().type != Tok::name) fail(str_cat("expected a statement name after {%, found ", describe(cur())));
  const std::string kw = cur().value;
  if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else")
    fail(str_cat("unexpected {% ", kw, " %} (no open block it could close)"));
  if (kUnsupportedStatements.count(kw))
    fail(str_cat("unsupported Jinja construct {% ", kw,
                 " %}; ztrain's chat templates support set, if, for, macro, break, continue and generation"));
  ++cursor_;
  if (kw == "if") return parse_if();
  if (kw == "for") return parse_for();
  if (kw == "set") return parse_set();
  if (kw == "macro") return parse_macro();
  if (kw == "break" || kw == "continue") {
    NodePtr n = node(kw == "break" ? NodeKind::break_ : NodeKind::continue_);
    expect_block_end();
    return n;
  }
  if (kw == "generation") return parse_generation();
  fail(str_cat("unsupported Jinja construct {% ", kw,
               " %}; ztrain's chat templates support set, if, for, macro, break, continue and generation"));
}

// The statements after their keyword (parse_statement consumed it), each up to and including
// its closing tag.
NodePtr Parser::parse_for() {
  std::string end;
  NodePtr n = node(NodeKind::for_);
  n->names = parse_targets(false);
  if (!at_name("in")) fail("expected \"in\" in a for statement");
  ++cursor_;
  n->a = parse_tuple(false);
  if (at_name("if")) {
    ++cursor_;
    n->c = parse_expression(true);
  }
  if (at_name("recursive")) fail("unsupported Jinja construct: recursive for loops");
  expect_block_end();
  n->kids.push_back(parse_body({"endfor", "else"}, &end));
  if (end == "else") {
    expect_block_end();
    n->b = parse_body({"endfor"}, &end);
  }
  expect_block_end();
  return n;
}

// {% set x = expr %}, or the block form {% set x %}...{% endset %}.
NodePtr Parser::parse_set() {
  std::string end;
  std::vector<std::string> targets = parse_targets(true);
  if (at_op("=")) {
    ++cursor_;
    NodePtr n = node(NodeKind::set);
    n->names = targets;
    n->a = parse_tuple(true);
    expect_block_end();
    return n;
  }
  if (targets.size() != 1) fail("a block {% set %} takes one name");
  NodePtr n = node(NodeKind::set_block);
  n->names = targets;
  if (at_op("|")) fail("unsupported Jinja construct: a filter on a block {% set %}");
  expect_block_end();
  n->kids.push_back(parse_body({"endset"}, &end));
  expect_block_end();
  return n;
}

NodePtr Parser::parse_macro() {
  std::string end;
  NodePtr n = node(NodeKind::macro);
  n->str = expect_name();
  expect_op("(");
  while (!at_op(")")) {
    n->names.push_back(expect_name());
    if (at_op("=")) {
      ++cursor_;
      n->args.push_back(parse_expression(true));
    } else {
      n->args.push_back(nullptr);
    }
    if (!at_op(")")) expect_op(",");
  }
  ++cursor_;
  expect_block_end();
  n->kids.push_back(parse_body({"endmacro"}, &end));
  if (cur().type == Tok::name) ++cursor_;  // {% endmacro name %}
  expect_block_end();
  return n;
}

NodePtr Parser::parse_generation() {
  std::string end;
  has_generation = true;
  NodePtr n = node(NodeKind::generation);
  expect_block_end();
  n->kids.push_back(parse_body({"endgeneration"}, &end));
  expect_block_end();
  return n;
}

NodePtr Parser::parse_if() {
  NodePtr n = node(NodeKind::if_);
  std::string end = "elif";
  while (end == "elif") {  // "{% elif" was consumed: its condition follows
    n->args.push_back(parse_tuple(true));
    expect_block_end();
    n->kids.push_back(parse_body({"elif", "else", "endif"}, &end));
  }
  if (end == "else") {
    expect_block_end();
    n->b = parse_body({"endif"}, &end);
  }
  expect_block_end();
  return n;
}

// Assignment / loop targets: names, "ns.attr" (set only), comma-separated tuples.
std::vector<std::string> Parser::parse_targets(bool allow_attr) {
  std::vector<std::string> out;
  const bool paren = at_op("(");
  if (paren) ++cursor_;
  for (;;) {
    std::string n = expect_name();
    if (allow_attr && at_op(".")) {
      ++cursor_;
      n += '.';
      n += expect_name();
    }
    out.push_back(n);
    if (!at_op(",")) break;
    ++cursor_;
  }
  if (paren) expect_op(")");
  return out;
}

NodePtr parse_template(const std::string& source, const std::string& name, bool* has_generation) {
  Lexer lx(source, name);
  Parser p(lx.run(), lx);
  NodePtr root = p.parse_all();
  *has_generation = p.has_generation;
  return root;
}

}  // namespace zt::jinja
