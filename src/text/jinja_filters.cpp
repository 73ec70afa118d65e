// jinja_filters.cpp: the filters and global functions of ztrain's Jinja subset (list in
// jinja_builtins.cpp's header comment), with Jinja2's semantics and HF's tojson signature
// tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <ctime>
#include <map>

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
    int64_t index = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool digits = !part.empty() && part[0] != '-' && ec == std::errc() && end == part.data() + part.size();
    cur = digits ? get_item(cur, Value::integer(index)) : get_item(cur, Value::string(part));
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
  // The keys once each (not per comparison: a lower-cased copy per comparison is n log n copies).
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& v : items) {
    Value k = at && at->kind == K::string ? attr_path(v, at->s) : v;
    if (!case_sensitive && k.kind == K::string) {
      std::string s = k.s;
      for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
      k = Value::string(s);
    }
    keys.push_back(std::move(k));
  }
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return compare(keys[x], keys[y], "<") < 0; });
  Array out;
  out.reserve(items.size());
  for (size_t k : order) out.push_back(std::move(items[k]));
  if (reverse) std::reverse(out.begin(), out.end());
  return Value::array(std::move(out));
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
  JsonStyle st;
  st.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  const Value* ind = a.at(1, "indent");
  // Python: a negative indent still breaks lines, indenting by nothing.
  if (ind && ind->kind != K::none) st.indent = ind->kind == K::integer ? std::max<int64_t>(0, ind->i) : 0;
  st.item_sep = st.indent >= 0 ? "," : ", ";
  if (const Value* sep = a.at(2, "separators"); sep && sep->kind == K::array && sep->a->size() == 2) {
    st.item_sep = to_str((*sep->a)[0]);
    st.key_sep = to_str((*sep->a)[1]);
  }
  st.sort_keys = bool_arg(a, 3, "sort_keys", false);
  return Value::string(to_json(v, st));
}

Value indent_filter(const Value& v, CallArgs& a) {
  const std::string s = need_string(v, "indent");
  const Value* w = a.at(0, "width");
  const size_t width = w && w->kind == K::integer ? size_t(std::max<int64_t>(0, w->i)) : w ? 0 : 4;
  if (!(w && w->kind == K::string)) Budget::fits(width);  // before a pad of 10**15 spaces is made
  const std::string pad = w && w->kind == K::string ? w->s : std::string(width, ' ');
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
    Budget::fits(out.size());
    if (last) break;
    out += '\n';
    k = e + 1;
    line0 = false;
  }
  return Value::string(out);
}

// ---- The filters, one function each (a family that shares its code takes the filter's name).
// Every one has the signature of FilterFn so that kFilterTable can dispatch on the name.

using FilterFn = Value (*)(const std::string& f, const Value& v, CallArgs& a);

Value filter_safe(const std::string&, const Value& v, CallArgs&) { return v; }
Value filter_trim(const std::string&, const Value& v, CallArgs& a) {
  return get_attr(Value::string(to_str(v)), "strip").f->operator()(a);
}
Value filter_tojson(const std::string&, const Value& v, CallArgs& a) { return tojson(v, a); }
Value filter_string(const std::string&, const Value& v, CallArgs&) { return Value::string(to_str(v)); }
Value filter_list(const std::string&, const Value& v, CallArgs&) { return Value::array(iterate(v)); }
Value filter_sort(const std::string&, const Value& v, CallArgs& a) { return sorted(v, a); }
Value filter_min_max(const std::string& f, const Value& v, CallArgs&) { return minmax(v, f == "max"); }
Value filter_indent(const std::string&, const Value& v, CallArgs& a) { return indent_filter(v, a); }
Value filter_select(const std::string& f, const Value& v, CallArgs& a) {  // select / reject
  return Value::array(select_items(v, a, false, f == "select"));
}
Value filter_selectattr(const std::string& f, const Value& v, CallArgs& a) {  // selectattr / rejectattr
  return Value::array(select_items(v, a, true, f == "selectattr"));
}

// length / count: counted in place, not by copying.
Value filter_length(const std::string&, const Value& v, CallArgs&) {
  if (v.kind == K::string) return Value::integer(int64_t(utf8_length(v.s)));
  if (v.kind == K::object) return Value::integer(int64_t(v.o->items.size()));
  if (v.kind == K::array) return Value::integer(int64_t(v.a->size()));
  return Value::integer(int64_t(iterate(v).size()));
}

Value filter_first_last(const std::string& f, const Value& v, CallArgs&) {
  if (v.kind == K::array) return v.a->empty() ? Value() : f == "first" ? v.a->front() : v.a->back();
  Array items = iterate(v);
  if (items.empty()) return Value();
  return f == "first" ? items.front() : items.back();
}

Value filter_join(const std::string&, const Value& v, CallArgs& a) {
  const Value* sep = a.at(0, "d");
  const Value* at = a.at(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    out += (first ? "" : sep ? to_str(*sep) : "") + to_str(at && at->kind == K::string ? attr_path(x, at->s) : x);
    Budget::fits(out.size());
    first = false;
  }
  return Value::string(out);
}

// upper / lower / title / capitalize: the string methods of the same names.
Value filter_case(const std::string& f, const Value& v, CallArgs&) {
  CallArgs none;
  return get_attr(Value::string(to_str(v)), f).f->operator()(none);
}

Value filter_items(const std::string&, const Value& v, CallArgs&) {
  if (!v.defined()) return Value::array();
  if (v.kind != K::object) render_fail(str_cat("filter items needs a mapping, got ", type_name(v)));
  CallArgs none;
  return get_attr(v, "items").f->operator()(none);
}

Value filter_dictsort(const std::string&, const Value& v, CallArgs&) {
  if (v.kind != K::object) render_fail(str_cat("filter dictsort needs a mapping, got ", type_name(v)));
  CallArgs none;
  Value items = get_attr(v, "items").f->operator()(none);
  std::stable_sort(items.a->begin(), items.a->end(),
                   [](const Value& x, const Value& y) { return (*x.a)[0].s < (*y.a)[0].s; });
  return items;
}

Value filter_default(const std::string&, const Value& v, CallArgs& a) {  // default / d
  const Value* d = a.at(0, "default_value");
  const bool boolean = bool_arg(a, 1, "boolean", false);
  if (!v.defined() || (boolean && !truthy(v))) return d ? *d : Value::string("");
  return v;
}

// map(attribute=...) or map("filter", args...): the latter applies the named filter per item.
Value filter_map(const std::string&, const Value& v, CallArgs& a) {
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

Value filter_unique(const std::string&, const Value& v, CallArgs&) {
  Array out;
  for (const Value& x : iterate(v)) {
    bool seen = false;
    for (const Value& y : out) seen |= equal(x, y);
    if (!seen) out.push_back(x);
  }
  return Value::array(std::move(out));
}

Value filter_reverse(const std::string&, const Value& v, CallArgs&) {
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

Value filter_sum(const std::string&, const Value& v, CallArgs& a) {
  const Value* at = a.at(0, "attribute");
  const Value* start = a.at(1, "start");
  Value total = start ? *start : Value::integer(0);
  for (const Value& x : iterate(v))
    total = binary_op("+", total, at && at->kind == K::string ? attr_path(x, at->s) : x);
  return total;
}

// int / float of a string (already stripped): Jinja2's int(s), else int(float(s)), else the default.
Value parse_number(const std::string& f, const std::string& s, const Value& dflt) {
  char* end = nullptr;
  if (f == "int") {
    errno = 0;
    const long long n = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == 0 && errno == ERANGE)
      render_fail(str_cat("integer overflow: ", quote(s.substr(0, 40)), " does not fit in 64 bits"));
    if (!s.empty() && *end == 0) return Value::integer(n);
    const double x = std::strtod(s.c_str(), &end);
    return !s.empty() && *end == 0 && !std::isnan(x) ? Value::integer(float_to_int(x)) : dflt;
  }
  const double x = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == 0 ? Value::number(x) : dflt;
}

Value filter_int_float(const std::string& f, const Value& v, CallArgs& a) {
  const Value* d = a.at(0, "default");
  Value dflt = d ? *d : f == "int" ? Value::integer(0) : Value::number(0);
  if (v.kind == K::integer || v.kind == K::boolean) {
    const int64_t n = v.kind == K::boolean ? v.b : v.i;
    return f == "int" ? Value::integer(n) : Value::number(double(n));
  }
  if (v.kind == K::number) return f == "int" ? Value::integer(float_to_int(v.d)) : v;
  if (v.kind == K::string) {
    CallArgs none;
    return parse_number(f, get_attr(v, "strip").f->operator()(none).s, dflt);
  }
  return dflt;
}

Value filter_abs(const std::string&, const Value& v, CallArgs&) {
  if (v.kind == K::integer) return Value::integer(v.i < 0 ? int_neg(v.i) : v.i);
  if (v.kind == K::number) return Value::number(std::fabs(v.d));
  render_fail(str_cat("bad operand type for abs(): '", type_name(v), "'"));
}

Value filter_round(const std::string&, const Value& v, CallArgs& a) {
  const Value* p = a.at(0, "precision");
  const Value* m = a.at(1, "method");
  const int64_t prec = p && p->kind == K::integer ? p->i : 0;
  const std::string method = m && m->kind == K::string ? m->s : "common";
  const double scale = std::pow(10.0, double(prec)), x = (v.kind == K::integer ? double(v.i) : v.d) * scale;
  const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
  return Value::number(r / scale);
}

Value filter_replace(const std::string&, const Value& v, CallArgs& a) {
  CallArgs b = a;
  return get_attr(Value::string(to_str(v)), "replace").f->operator()(b);
}

Value filter_wordcount(const std::string&, const Value& v, CallArgs&) {
  CallArgs none;
  return Value::integer(int64_t(get_attr(Value::string(to_str(v)), "split").f->operator()(none).a->size()));
}

// Every supported filter by name: what known_filter answers and apply_filter dispatches on.
const std::map<std::string, FilterFn> kFilterTable = {
    {"abs", filter_abs},          {"capitalize", filter_case}, {"count", filter_length},
    {"d", filter_default},        {"default", filter_default}, {"dictsort", filter_dictsort},
    {"first", filter_first_last}, {"float", filter_int_float}, {"indent", filter_indent},
    {"int", filter_int_float},    {"items", filter_items},     {"join", filter_join},
    {"last", filter_first_last},  {"length", filter_length},   {"list", filter_list},
    {"lower", filter_case},       {"map", filter_map},         {"max", filter_min_max},
    {"min", filter_min_max},      {"reject", filter_select},   {"rejectattr", filter_selectattr},
    {"replace", filter_replace},  {"reverse", filter_reverse}, {"round", filter_round},
    {"safe", filter_safe},        {"select", filter_select},   {"selectattr", filter_selectattr},
    {"sort", filter_sort},        {"string", filter_string},   {"sum", filter_sum},
    {"title", filter_case},       {"tojson", filter_tojson},   {"trim", filter_trim},
    {"unique", filter_unique},    {"upper", filter_case},      {"wordcount", filter_wordcount},
};

}  // namespace

bool known_filter(const std::string& name) { return kFilterTable.count(name) > 0; }

Value apply_filter(const std::string& f, const Value& v, CallArgs& a) {
  Budget::steps(1);  // (map applies one per item)
  const auto it = kFilterTable.find(f);
  if (it == kFilterTable.end()) render_fail(str_cat("unsupported Jinja filter \"", f, "\""));
  return it->second(f, v, a);
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
            // The length first (in 128 bits, where no step overflows), checked before anything is made.
            const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
            const __int128 stride = step > 0 ? __int128(step) : -__int128(step);
            const __int128 count = span <= 0 ? 0 : (span - 1) / stride + 1;
            Budget::list(count > __int128(SIZE_MAX / 2) ? SIZE_MAX / 2 : size_t(count));
            Array out;
            out.reserve(size_t(count));
            for (__int128 k = 0; k < count; ++k) out.push_back(Value::integer(int64_t(start + k * step)));
            return Value::array(std::move(out));
          }));
    auto dict_like = [](bool ns) {
      return Value::function([ns](CallArgs& a) {
        Value o = Value::object();
        o.o->is_namespace = ns;
        for (const Value& p : a.pos)
          if (p.kind == K::object) {
            Budget::list(p.o->items.size());
            Budget::steps(int64_t(p.o->items.size() * (o.o->items.size() + p.o->items.size())));  // set() is linear
            for (auto& kv : p.o->items) o.o->set(kv.first, kv.second);
          }
        for (auto& kv : a.kw) o.o->set(kv.first, kv.second);
        if (ns) NamespaceRegistry::note(o.o);
        return o;
      });
    };
    g.set("namespace", dict_like(true));
    g.set("dict", dict_like(false));
    g.set("raise_exception", Value::function([](CallArgs& a) -> Value {
            const std::string what = a.pos.empty() ? "" : to_str(a.pos[0]);  // (render() cuts a long message)
            render_fail(str_cat("the template raised an exception: ", quote(what)));
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
