// jinja_filters.cpp: the filters and global functions of ztrain's Jinja subset (list in
// jinja_builtins.cpp's header comment), with Jinja2's semantics and HF's tojson signature
// tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include "core/error.h"
#include "text/jinja_ast.h"
#include "text/jinja_internal.h"

namespace zt::jinja {

using K = Value::Kind;

namespace {

bool bool_arg(CallArgs& a, size_t pos, const char* name, bool dflt) {
  const Value* v = a.at(pos, name);
  return v ? truthy(*v) : dflt;
}
std::string need_string(const Value& v, const char* filter) {
  if (v.kind != K::string) render_fail(str_cat("filter ", filter, " needs a string, got ", type_name(v)));
  return v.s;
}

// Attribute lookup for selectattr / map / sort / join: "a.b" walks; a missing key is undefined.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t b = 0;
  while (b <= path.size()) {
    const size_t e = std::min(path.find('.', b), path.size());
    const std::string part = path.substr(b, e - b);
    if (!cur.defined()) return cur;
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
    b = e + 1;
  }
  return cur;
}

Array select_items(const Value& seq, CallArgs& a, bool by_attr, bool keep) {
  Array out;
  size_t first = 0;
  std::string attr;
  if (by_attr) {
    const Value* at = a.at(0, nullptr);
    if (!at || at->kind != K::string) render_fail("selectattr / rejectattr need an attribute name");
    attr = at->s;
    first = 1;
  }
  std::string test;
  std::vector<Value> targs;
  if (a.pos.size() > first) {
    if (a.pos[first].kind != K::string) render_fail("select / selectattr take a test name as a string");
    test = a.pos[first].s;
    if (!known_test(test)) render_fail(str_cat("unsupported Jinja test \"", test, "\""));
    targs.assign(a.pos.begin() + long(first) + 1, a.pos.end());
  }
  for (const Value& item : iterate(seq)) {
    const Value v = by_attr ? attr_path(item, attr) : item;
    const bool hit = test.empty() ? truthy(v) : apply_test(test, v, targs);
    if (hit == keep) out.push_back(item);
  }
  return out;
}

Value sorted(const Value& seq, CallArgs& a) {
  Array items = iterate(seq);
  const bool reverse = bool_arg(a, 0, "reverse", false), case_sensitive = bool_arg(a, 1, "case_sensitive", false);
  const Value* at = a.at(2, "attribute");
  auto key = [&](const Value& v) {
    Value k = at && at->kind == K::string ? attr_path(v, at->s) : v;
    if (!case_sensitive && k.kind == K::string) {
      std::string s = k.s;
      for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
      k = Value::string(s);
    }
    return k;
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& x, const Value& y) { return compare(key(x), key(y), "<") < 0; });
  if (reverse) std::reverse(items.begin(), items.end());
  return Value::array(std::move(items));
}

Value minmax(const Value& seq, bool want_max) {
  Array items = iterate(seq);
  if (items.empty()) return Value();
  Value best = items[0];
  for (const Value& v : items)
    if (want_max ? compare(v, best, ">") > 0 : compare(v, best, "<") < 0) best = v;
  return best;
}

Value tojson(const Value& v, CallArgs& a) {
  const bool ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  const Value* ind = a.at(1, "indent");
  const int indent = ind && ind->kind != K::none ? int(ind->kind == K::integer ? ind->i : 0) : -1;
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  if (const Value* sep = a.at(2, "separators"); sep && sep->kind == K::array && sep->a->size() == 2) {
    item_sep = to_str((*sep->a)[0]);
    key_sep = to_str((*sep->a)[1]);
  }
  return Value::string(to_json(v, indent, ensure_ascii, bool_arg(a, 3, "sort_keys", false), item_sep, key_sep));
}

Value indent_filter(const Value& v, CallArgs& a) {
  const std::string s = need_string(v, "indent");
  const Value* w = a.at(0, "width");
  const std::string pad =
      w && w->kind == K::string ? w->s : std::string(size_t(w ? std::max<int64_t>(0, w->i) : 4), ' ');
  const bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
  std::string out;
  size_t k = 0;
  bool line0 = true;
  while (k <= s.size()) {
    size_t e = s.find('\n', k);
    const bool last = e == std::string::npos;
    if (last) e = s.size();
    const std::string line = s.substr(k, e - k);
    if ((!line0 || first) && (blank || !line.empty())) out += pad;
    out += line;
    if (last) break;
    out += '\n';
    k = e + 1;
    line0 = false;
  }
  return Value::string(out);
}

const std::set<std::string> kFilters = {
    "abs",  "capitalize", "count",      "d",       "default", "dictsort", "first",  "float",  "indent",
    "int",  "items",      "join",       "last",    "length",  "list",     "lower",  "map",    "max",
    "min",  "reject",     "rejectattr", "replace", "reverse", "round",    "safe",   "select", "selectattr",
    "sort", "string",     "sum",        "title",   "tojson",  "trim",     "unique", "upper",  "wordcount"};

}  // namespace

bool known_filter(const std::string& name) { return kFilters.count(name) > 0; }

Value apply_filter(const std::string& f, const Value& v, CallArgs& a) {
  if (f == "safe") return v;
  if (f == "trim") return get_attr(Value::string(to_str(v)), "strip").f->operator()(a);
  if (f == "length" || f == "count") {
    if (v.kind == K::string) return Value::integer(int64_t(utf8_offsets(v.s).size()) - 1);
    if (v.kind == K::object) return Value::integer(int64_t(v.o->items.size()));
    return Value::integer(int64_t(iterate(v).size()));
  }
  if (f == "tojson") return tojson(v, a);
  if (f == "string") return Value::string(to_str(v));
  if (f == "list") return Value::array(iterate(v));
  if (f == "first" || f == "last") {
    Array items = iterate(v);
    if (items.empty()) return Value();
    return f == "first" ? items.front() : items.back();
  }
  if (f == "join") {
    const Value* sep = a.at(0, "d");
    const Value* at = a.at(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v)) {
      out += (first ? "" : sep ? to_str(*sep) : "") + to_str(at && at->kind == K::string ? attr_path(x, at->s) : x);
      first = false;
    }
    return Value::string(out);
  }
  if (f == "upper" || f == "lower" || f == "title" || f == "capitalize") {
    CallArgs none;
    return get_attr(Value::string(to_str(v)), f).f->operator()(none);
  }
  if (f == "items") {
    if (!v.defined()) return Value::array();
    if (v.kind != K::object) render_fail(str_cat("filter items needs a mapping, got ", type_name(v)));
    CallArgs none;
    return get_attr(v, "items").f->operator()(none);
  }
  if (f == "dictsort") {
    if (v.kind != K::object) render_fail(str_cat("filter dictsort needs a mapping, got ", type_name(v)));
    CallArgs none;
    Value items = get_attr(v, "items").f->operator()(none);
    std::stable_sort(items.a->begin(), items.a->end(),
                     [](const Value& x, const Value& y) { return (*x.a)[0].s < (*y.a)[0].s; });
    return items;
  }
  if (f == "default" || f == "d") {
    const Value* d = a.at(0, "default_value");
    const bool boolean = bool_arg(a, 1, "boolean", false);
    if (!v.defined() || (boolean && !truthy(v))) return d ? *d : Value::string("");
    return v;
  }
  if (f == "selectattr" || f == "rejectattr") return Value::array(select_items(v, a, true, f == "selectattr"));
  if (f == "select" || f == "reject") return Value::array(select_items(v, a, false, f == "select"));
  if (f == "map") {
    Array out;
    const Value* at = a.kwarg("attribute");
    const Value* dflt = a.kwarg("default");
    if (at) {
      if (at->kind != K::string) render_fail("map(attribute=...) needs a string");
      for (const Value& x : iterate(v)) {
        Value y = attr_path(x, at->s);
        out.push_back(!y.defined() && dflt ? *dflt : y);
      }
      return Value::array(std::move(out));
    }
    if (a.pos.empty() || a.pos[0].kind != K::string) render_fail("map needs a filter name or attribute=");
    const std::string name = a.pos[0].s;
    if (!known_filter(name)) render_fail(str_cat("unsupported Jinja filter \"", name, "\""));
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& x : iterate(v)) out.push_back(apply_filter(name, x, rest));
    return Value::array(std::move(out));
  }
  if (f == "unique") {
    Array out;
    for (const Value& x : iterate(v)) {
      bool seen = false;
      for (const Value& y : out) seen |= equal(x, y);
      if (!seen) out.push_back(x);
    }
    return Value::array(std::move(out));
  }
  if (f == "reverse") {
    if (v.kind == K::string) {
      Array chars = iterate(v);
      std::string s;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) s += it->s;
      return Value::string(s);
    }
    Array items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::array(std::move(items));
  }
  if (f == "sort") return sorted(v, a);
  if (f == "min" || f == "max") return minmax(v, f == "max");
  if (f == "sum") {
    const Value* at = a.at(0, "attribute");
    const Value* start = a.at(1, "start");
    Value total = start ? *start : Value::integer(0);
    for (const Value& x : iterate(v))
      total = binary_op("+", total, at && at->kind == K::string ? attr_path(x, at->s) : x);
    return total;
  }
  if (f == "int" || f == "float") {
    const Value* d = a.at(0, "default");
    Value dflt = d ? *d : f == "int" ? Value::integer(0) : Value::number(0);
    if (v.kind == K::integer || v.kind == K::boolean)
      return f == "int" ? Value::integer(v.kind == K::boolean ? v.b : v.i) : Value::number(double(v.i));
    if (v.kind == K::number) return f == "int" ? Value::integer(int64_t(v.d)) : v;
    if (v.kind == K::string) {
      char* end = nullptr;
      CallArgs none;
      const std::string s = get_attr(v, "strip").f->operator()(none).s;
      if (f == "int") {
        const long long n = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && *end == 0) return Value::integer(n);
        const double x = std::strtod(s.c_str(), &end);
        return !s.empty() && *end == 0 ? Value::integer(int64_t(x)) : dflt;
      }
      const double x = std::strtod(s.c_str(), &end);
      return !s.empty() && *end == 0 ? Value::number(x) : dflt;
    }
    return dflt;
  }
  if (f == "abs") {
    if (v.kind == K::integer) return Value::integer(v.i < 0 ? -v.i : v.i);
    if (v.kind == K::number) return Value::number(std::fabs(v.d));
    render_fail(str_cat("bad operand type for abs(): '", type_name(v), "'"));
  }
  if (f == "round") {
    const Value* p = a.at(0, "precision");
    const Value* m = a.at(1, "method");
    const int64_t prec = p && p->kind == K::integer ? p->i : 0;
    const std::string method = m && m->kind == K::string ? m->s : "common";
    const double scale = std::pow(10.0, double(prec)), x = (v.kind == K::integer ? double(v.i) : v.d) * scale;
    const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value::number(r / scale);
  }
  if (f == "replace") {
    CallArgs b = a;
    return get_attr(Value::string(to_str(v)), "replace").f->operator()(b);
  }
  if (f == "indent") return indent_filter(v, a);
  if (f == "wordcount") {
    CallArgs none;
    return Value::integer(int64_t(get_attr(Value::string(to_str(v)), "split").f->operator()(none).a->size()));
  }
  render_fail(str_cat("unsupported Jinja filter \"", f, "\""));
}

namespace {
thread_local NamespaceRegistry* current_registry = nullptr;
}  // namespace

NamespaceRegistry::NamespaceRegistry() : outer_(current_registry) { current_registry = this; }
NamespaceRegistry::~NamespaceRegistry() {
  for (auto& w : made_)
    if (auto o = w.lock()) o->items.clear();
  current_registry = outer_;
}
void NamespaceRegistry::note(const std::shared_ptr<Object>& ns) {
  if (current_registry) current_registry->made_.push_back(ns);
}

const Object& global_functions() {
  static const Object globals = [] {
    Object g;
    g.set("range", Value::function([](CallArgs& a) {
            if (a.pos.empty() || a.pos.size() > 3) render_fail("range() takes 1 to 3 integers");
            int64_t start = 0, stop, step = 1;
            for (const Value& x : a.pos)
              if (x.kind != K::integer) render_fail("range() takes integers");
            if (a.pos.size() == 1) {
              stop = a.pos[0].i;
            } else {
              start = a.pos[0].i;
              stop = a.pos[1].i;
              if (a.pos.size() == 3) step = a.pos[2].i;
            }
            if (step == 0) render_fail("range() step must not be zero");
            Array out;
            for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
              out.push_back(Value::integer(k));
              if (out.size() > 10000000) render_fail("range() longer than 10,000,000 items");
            }
            return Value::array(std::move(out));
          }));
    auto dict_like = [](bool ns) {
      return Value::function([ns](CallArgs& a) {
        Value o = Value::object();
        o.o->is_namespace = ns;
        for (const Value& p : a.pos)
          if (p.kind == K::object)
            for (auto& kv : p.o->items) o.o->set(kv.first, kv.second);
        for (auto& kv : a.kw) o.o->set(kv.first, kv.second);
        if (ns) NamespaceRegistry::note(o.o);
        return o;
      });
    };
    g.set("namespace", dict_like(true));
    g.set("dict", dict_like(false));
    g.set("raise_exception", Value::function([](CallArgs& a) -> Value {
            render_fail(str_cat("the template raised an exception: ", quote(a.pos.empty() ? "" : to_str(a.pos[0]))));
          }));
    // HF's strftime_now: the local time now (Llama 3.x templates print today's date with it).
    g.set("strftime_now", Value::function([](CallArgs& a) {
            if (a.pos.empty() || a.pos[0].kind != K::string) render_fail("strftime_now() takes a format string");
            const std::time_t t = std::time(nullptr);
            std::tm tm{};
            localtime_r(&t, &tm);
            char buf[256];
            const size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
            return Value::string(std::string(buf, n));
          }));
    return g;
  }();
  return globals;
}

}  // namespace zt::jinja
