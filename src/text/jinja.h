// jinja.h: the subset of Jinja2 that Hugging Face chat templates use, rendered the way
// transformers' apply_chat_template renders them (Python Jinja2 with trim_blocks and
// lstrip_blocks, loop controls, the {% generation %} marker, HF's tojson and
// raise_exception / strftime_now globals). Checked byte for byte against npm
// @huggingface/jinja on the real templates of Llama 3.x, Qwen 2.5 / 3, Mistral and Gemma
// (tests/chat/, docs/data.md#chat-templates).
//
// Supported: text, {{ }}, comments, whitespace control (-), set (names, ns.attr, tuples,
// block set), if / elif / else, for (tuple targets, `if` filter, else, the loop object),
// macro (defaults, keyword arguments), break / continue, generation; expressions with
// literals (str, int, float, list, tuple, dict, true/false/none), and / or / not, comparisons,
// in / not in, is [not] tests, + - * / // % ** ~, filters, calls, attributes, indexes and
// slices, the conditional expression. The filters, tests, methods and globals are listed in
// jinja_eval.cpp. Anything else (call blocks, filter blocks, include, extends, import, raw,
// an unknown filter or test) is one Error naming the construct and its template line, at
// parse time, so a template that parses renders with defined semantics.
// A template is untrusted input (it comes with a downloaded tokenizer_config.json): every render
// runs under a budget (Limits below: work steps, string and output bytes, list items, nesting),
// integers are 64-bit with Python's results or an "integer overflow" error, never a wrap, and a
// template nests at most 256 levels deep at parse time; exceeding any of these is one Error
// naming the template and the limit (docs/security.md).
// Deliberately not here: autoescaping, sandboxing beyond what these constructs allow, file
// loaders, Unicode case mapping beyond ASCII (upper / lower / title on ASCII letters only).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace zt::jinja {

struct Value;
using Array = std::vector<Value>;
struct Object;
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

struct Value {
  Value() = default;
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  // Releases nested lists and dicts iteratively: a template can build a list nested 100,000 deep,
  // and the default (recursive) destruction of it would overflow the stack.
  ~Value();
  enum class Kind { undefined, none, boolean, integer, number, string, array, object, function };
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  std::shared_ptr<Array> a;   // lists and tuples share reference semantics, as in Python
  std::shared_ptr<Object> o;  // dicts and namespaces
  std::shared_ptr<Function> f;

  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value array(Array v = {});
  static Value object();
  static Value function(Function fn);
  bool is(Kind k) const { return kind == k; }
  bool defined() const { return kind != Kind::undefined; }
};

// An insertion-ordered dict (Python 3.7+ order, which tojson and items() show).
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* kwarg(const std::string& name) const;
  // The argument at position pos, else the keyword `name` (null: positional only); null if absent.
  const Value* at(size_t pos, const char* name) const {
    if (pos < this->pos.size()) return &this->pos[pos];
    return name ? kwarg(name) : nullptr;
  }
};

// JSON (a JSONL record) to a template value: integers stay integers, other numbers floats.
// ordered_json keeps the record's key order, which Python dicts (and so tojson) keep.
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);  // keys in sorted order

// What one render may spend. A real chat template needs a tiny fraction of each (Llama 3.1's on a
// 100-turn conversation with tools: about 10^5 steps); the defaults bound a hostile template to
// about a second and a few hundred MB. Only max_steps has a flag (--chat_template_max_steps).
struct Limits {
  // Work units: one per expression evaluated or statement executed, 4 per list item made or copied,
  // one per 16 bytes of string made or copied.
  int64_t max_steps = 10'000'000;
  size_t max_string_bytes = size_t(32) << 20;  // the output, a captured block, any one string
  size_t max_items = size_t(1) << 20;          // any one list (range(), +, *, split, ...)
  int max_depth = 500;  // nesting of evaluation at run time: expressions, statements, macro calls, values
};

struct Node;

// A parsed template. Thread-safe to render concurrently (rendering keeps no state here).
class Template {
 public:
  // Parses; throws zt::Error "chat template <name> line N: ..." for syntax errors and
  // unsupported constructs.
  Template(const std::string& source, std::string name);
  ~Template();
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  // Byte range [begin, end) of the output written inside {% generation %} ... {% endgeneration %}.
  struct Span {
    size_t begin = 0, end = 0;
  };
  // Renders with `context` (an object: messages, add_generation_prompt, bos_token, ...).
  // Errors (raise_exception, a type error, an undefined call) throw zt::Error naming the
  // template line. Generation spans go to *spans when given. Exceeding `limits` is such an Error,
  // naming the limit.
  std::string render(const Value& context, std::vector<Span>* spans = nullptr, const Limits& limits = {}) const;
  bool has_generation() const { return has_generation_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::unique_ptr<Node> root_;
  bool has_generation_ = false;
};

}  // namespace zt::jinja
