// jinja_internal.h: what jinja_eval.cpp (statements, expressions) and jinja_builtins.cpp
// (value semantics, filters, tests, methods, globals) share. Internal to the Jinja engine.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "text/jinja.h"

namespace zt::jinja {

// A runtime failure inside a builtin; the evaluator adds the template name and line.
struct RenderFailure {
  std::string what;
};
[[noreturn]] inline void render_fail(std::string what) { throw RenderFailure{std::move(what)}; }

// The limits (jinja.h) of the render running on this thread; the evaluator and the builtins charge
// their work to it before they do it, so a hostile template fails before it allocates. Outside a
// render (unit tests of the builtins) the default limits hold and steps are not counted.
class Budget {
 public:
  explicit Budget(const Limits& limits);  // installed for this thread until destroyed
  ~Budget();
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;
  static void steps(int64_t n);                // n units of work
  static void string(size_t bytes);            // a string of this size is about to be made or copied
  static void list(size_t items);              // a list of this many items is about to be made or copied
  static void copy(const Array& items);        // a list and its strings are about to be copied
  static void fits(size_t bytes);              // fails when a string being built passes the limit (no charge)
  static void depth(int depth);                // fails when a recursion over values is this deep
  static const Limits& limits();

 private:
  Limits limits_;
  int64_t used_ = 0;
  Budget* outer_;
};

// Appends one item to a list being built, within the item limit (charged as Budget::list does).
inline void add_item(Array& out, Value v) {
  if (out.size() >= Budget::limits().max_items) Budget::list(out.size() + 1);
  Budget::steps(4);
  out.push_back(std::move(v));
}

// 64-bit integer arithmetic with Python's results, or "integer overflow" where Python's unbounded
// integers would leave 64 bits (never a wrap: signed overflow is undefined behaviour in C++).
int64_t int_add(int64_t a, int64_t b);
int64_t int_sub(int64_t a, int64_t b);
int64_t int_mul(int64_t a, int64_t b);
int64_t int_neg(int64_t a);
int64_t int_pow(int64_t base, int64_t exp);           // exp >= 0
int64_t int_floordiv(int64_t a, int64_t b);           // b != 0; floors, as Python's //
int64_t int_mod(int64_t a, int64_t b);                // b != 0; the sign of b, as Python's %
int64_t float_to_int(double d);                       // Python's int(float): truncates; fails on nan / inf / range

// Python semantics of values.
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b, int depth = 0);
int compare(const Value& a, const Value& b, const char* op, int depth = 0);  // <0, 0, >0; fails on unordered types
std::string type_name(const Value& v);                        // Python's: str, int, NoneType, ...
std::string to_str(const Value& v);                           // str(v)
std::string repr(const Value& v, int depth = 0);              // repr(v)
std::string float_repr(double d);                             // repr(float)
struct JsonStyle {  // json.dumps's arguments
  int64_t indent = -1;  // -1: None (one line)
  bool ensure_ascii = false, sort_keys = false;
  std::string item_sep = ", ", key_sep = ": ";
};
std::string to_json(const Value& v, const JsonStyle& style);
// Code point boundaries of a UTF-8 string: offsets[i] is where code point i starts, plus the end.
std::vector<size_t> utf8_offsets(const std::string& s);
size_t utf8_length(const std::string& s);  // code points, without building the offsets
// s.find(needle, from) in time linear in their lengths (std::string::find can take |s| x |needle|).
size_t find_linear(const std::string& s, const std::string& needle, size_t from = 0);
Array iterate(const Value& v);  // for loops and filters: list items, dict keys, string characters
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value get_attr(const Value& obj, const std::string& name);  // obj.name (methods first, then keys)
Value get_item(const Value& obj, const Value& key);         // obj[key] (keys / indexes first)
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args);
// Namespaces made during a render on this thread are recorded while one of these lives, and
// emptied when it ends: `set ns.a = ns` (or two namespaces holding each other) would otherwise be
// a reference cycle that outlives the render.
class NamespaceRegistry {
 public:
  NamespaceRegistry();
  ~NamespaceRegistry();
  NamespaceRegistry(const NamespaceRegistry&) = delete;
  NamespaceRegistry& operator=(const NamespaceRegistry&) = delete;
  static void note(const std::shared_ptr<Object>& ns);

 private:
  std::vector<std::weak_ptr<Object>> made_;
  NamespaceRegistry* outer_;
};

// The globals every render sees (range, namespace, dict, raise_exception, strftime_now).
const Object& global_functions();

}  // namespace zt::jinja
