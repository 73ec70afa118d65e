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

// Python semantics of values.
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, const char* op);  // <0, 0, >0; fails on unordered types
std::string type_name(const Value& v);                        // Python's: str, int, NoneType, ...
std::string to_str(const Value& v);                           // str(v)
std::string repr(const Value& v);                             // repr(v)
std::string float_repr(double d);                             // repr(float)
std::string to_json(const Value& v, int indent, bool ensure_ascii, bool sort_keys, const std::string& item_sep,
                    const std::string& key_sep, int depth = 0);
// Code point boundaries of a UTF-8 string: offsets[i] is where code point i starts, plus the end.
std::vector<size_t> utf8_offsets(const std::string& s);
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
