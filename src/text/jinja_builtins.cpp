// jinja_builtins.cpp: value semantics (Python's truthiness, equality, ordering, str / repr,
// json.dumps), and the filters, tests, methods and globals of ztrain's Jinja subset.
// Filters: abs, capitalize, count, d, default, dictsort, first, float, indent, int, items,
// join, last, length, list, lower, map, max, min, reject, rejectattr, replace, reverse, round,
// safe, select, selectattr, sort, string, sum, title, tojson (HF's signature), trim, unique,
// upper, wordcount. Tests: Jinja2's builtins (defined, none, string, mapping, iterable,
// equalto, ...). Methods: str strip / lstrip / rstrip / split / startswith / endswith /
// upper / lower / title / capitalize / replace / find / count / join / splitlines; dict
// items / keys / values / get. Globals: range, namespace, dict, raise_exception, strftime_now.
// Each charges its work to the render's Budget before doing it (strings and lists it makes,
// values it walks) and recurses over values at most Limits::max_depth deep (jinja_internal.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <optional>
#include <set>

#include "core/error.h"
#include "text/jinja_internal.h"

namespace zt::jinja {

using K = Value::Kind;

// ---- Value semantics ----

bool truthy(const Value& v) {
  switch (v.kind) {
    case K::undefined:
    case K::none:
      return false;
    case K::boolean:
      return v.b;
    case K::integer:
      return v.i != 0;
    case K::number:
      return v.d != 0;
    case K::string:
      return !v.s.empty();
    case K::array:
      return !v.a->empty();
    case K::object:
      return v.o->is_namespace || !v.o->items.empty();
    case K::function:
      return true;
  }
  return false;
}

static bool numeric(const Value& v) { return v.kind == K::integer || v.kind == K::number || v.kind == K::boolean; }
static double as_double(const Value& v) {
  return v.kind == K::number ? v.d : v.kind == K::integer ? double(v.i) : v.kind == K::boolean ? double(v.b) : 0;
}
static int64_t as_int(const Value& v) {
  return v.kind == K::integer ? v.i : v.kind == K::boolean ? v.b : v.kind == K::number ? float_to_int(v.d) : 0;
}

bool equal(const Value& a, const Value& b, int depth) {
  Budget::depth(depth);
  Budget::steps(1);
  if (numeric(a) && numeric(b)) {
    if (a.kind != K::number && b.kind != K::number) return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::undefined:
    case K::none:
      return true;
    case K::string:
      Budget::steps(int64_t(std::min(a.s.size(), b.s.size()) / 16));
      return a.s == b.s;
    case K::array:
      if (a.a == b.a) return true;
      if (a.a->size() != b.a->size()) return false;
      for (size_t k = 0; k < a.a->size(); ++k)
        if (!equal((*a.a)[k], (*b.a)[k], depth + 1)) return false;
      return true;
    case K::object:
      if (a.o == b.o) return true;
      if (a.o->items.size() != b.o->items.size()) return false;
      for (auto& kv : a.o->items) {
        Budget::steps(int64_t(b.o->items.size()));  // find is a linear search
        const Value* o = b.o->find(kv.first);
        if (!o || !equal(kv.second, *o, depth + 1)) return false;
      }
      return true;
    case K::function:
      return a.f == b.f;
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b, const char* op, int depth) {
  Budget::depth(depth);
  Budget::steps(1);
  if (numeric(a) && numeric(b)) {
    if (a.kind != K::number && b.kind != K::number) {  // exact: doubles lose integers past 2^53
      const int64_t x = as_int(a), y = as_int(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const double x = as_double(a), y = as_double(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == K::string && b.kind == K::string) {
    Budget::steps(int64_t(std::min(a.s.size(), b.s.size()) / 16));
    return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
  }
  if (a.kind == K::array && b.kind == K::array) {
    for (size_t k = 0; k < std::min(a.a->size(), b.a->size()); ++k) {
      const int c = compare((*a.a)[k], (*b.a)[k], op, depth + 1);
      if (c) return c;
    }
    return a.a->size() < b.a->size() ? -1 : a.a->size() > b.a->size() ? 1 : 0;
  }
  render_fail(str_cat("'", op, "' not supported between instances of '", type_name(a), "' and '", type_name(b), "'"));
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case K::undefined:
      return "Undefined";
    case K::none:
      return "NoneType";
    case K::boolean:
      return "bool";
    case K::integer:
      return "int";
    case K::number:
      return "float";
    case K::string:
      return "str";
    case K::array:
      return "list";
    case K::object:
      return v.o->is_namespace ? "Namespace" : "dict";
    case K::function:
      return "function";
  }
  return "?";
}

std::vector<size_t> utf8_offsets(const std::string& s) {
  std::vector<size_t> off;
  for (size_t k = 0; k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) off.push_back(k);
  off.push_back(s.size());
  return off;
}

Array iterate(const Value& v) {
  switch (v.kind) {
    case K::undefined:
      return {};
    case K::array:
      Budget::copy(*v.a);
      return *v.a;
    case K::object: {
      Budget::list(v.o->items.size());
      Array keys;
      for (auto& kv : v.o->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case K::string: {
      Budget::list(utf8_length(v.s));  // before the offsets (8 bytes a character) and the list are made
      Array chars;
      const auto off = utf8_offsets(v.s);
      for (size_t k = 0; k + 1 < off.size(); ++k)
        chars.push_back(Value::string(v.s.substr(off[k], off[k + 1] - off[k])));
      return chars;
    }
    default:
      render_fail(str_cat("'", type_name(v), "' object is not iterable"));
  }
}

namespace {

// "in" / "not in": a substring of a string, a key of a mapping, or an item of anything iterable.
Value membership_op(const std::string& op, const Value& a, const Value& b) {
  bool found = false;
  if (b.kind == K::string) {
    if (a.kind != K::string) render_fail(str_cat("'in <string>' requires string as left operand, not ", type_name(a)));
    found = find_linear(b.s, a.s) != std::string::npos;
  } else if (b.kind == K::object) {
    found = a.kind == K::string && b.o->find(a.s);
  } else {
    for (const Value& x : iterate(b)) found |= equal(a, x);
  }
  return Value::boolean(op == "in" ? found : !found);
}

// seq * n (either order) for a string or a list: the size is checked before anything is built;
// the product saturates rather than wraps.
Value repeat_sequence(const Value& seq, const Value& n) {
  const size_t unit = seq.kind == K::string ? seq.s.size() : seq.a->size();
  const uint64_t times = unit == 0 ? 0 : uint64_t(std::max<int64_t>(0, as_int(n)));  // "" * 10**18 is quick
  auto total = [&](size_t unit) {
    uint64_t t;
    return __builtin_mul_overflow(uint64_t(unit), times, &t) ? UINT64_MAX : t;
  };
  if (seq.kind == K::string) {
    Budget::string(size_t(total(seq.s.size())));
    std::string r;
    for (uint64_t k = 0; k < times; ++k) r += seq.s;
    return Value::string(r);
  }
  Budget::list(size_t(total(seq.a->size())));
  size_t bytes = 0;
  for (const Value& x : *seq.a) bytes += x.s.size();
  Budget::steps(int64_t(std::min<uint64_t>(total(bytes) / 16, INT64_MAX / 2)));
  Array r;
  for (uint64_t k = 0; k < times; ++k) r.insert(r.end(), seq.a->begin(), seq.a->end());
  return Value::array(std::move(r));
}

// + and * on strings and lists (concatenation, repetition); nothing when the operands are not
// sequences of that kind (then the operator is arithmetic's).
std::optional<Value> sequence_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "+") {
    if (a.kind == K::string && b.kind == K::string) {
      Budget::string(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (a.kind == K::array && b.kind == K::array) {
      Budget::list(a.a->size() + b.a->size());
      Budget::copy(*a.a);
      Budget::copy(*b.a);
      Array r = *a.a;
      r.insert(r.end(), b.a->begin(), b.a->end());
      return Value::array(std::move(r));
    }
  }
  if (op == "*") {
    const Value *seq = &a, *n = &b;
    if (b.kind == K::string || b.kind == K::array) std::swap(seq, n);
    if ((seq->kind == K::string || seq->kind == K::array) && (n->kind == K::integer || n->kind == K::boolean))
      return repeat_sequence(*seq, *n);
  }
  return std::nullopt;
}

// The arithmetic operators on numbers (booleans count as integers).
Value arithmetic_op(const std::string& op, const Value& a, const Value& b) {
  const bool ints = (a.kind == K::integer || a.kind == K::boolean) && (b.kind == K::integer || b.kind == K::boolean);
  if (!numeric(a) || !numeric(b))
    render_fail(str_cat("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '", type_name(b), "'"));
  const double x = as_double(a), y = as_double(b);
  // Integers: Python's exact results, or an overflow error (int_* in jinja_budget.cpp).
  if (op == "+") return ints ? Value::integer(int_add(as_int(a), as_int(b))) : Value::number(x + y);
  if (op == "-") return ints ? Value::integer(int_sub(as_int(a), as_int(b))) : Value::number(x - y);
  if (op == "*") return ints ? Value::integer(int_mul(as_int(a), as_int(b))) : Value::number(x * y);
  if (op == "**") {
    if (ints && as_int(b) >= 0) return Value::integer(int_pow(as_int(a), as_int(b)));
    if (x == 0 && y < 0) render_fail("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(x, y));
  }
  if (y == 0) render_fail(op == "/" ? "division by zero" : "integer division or modulo by zero");
  if (op == "/") return Value::number(x / y);
  if (op == "//") {
    if (ints) return Value::integer(int_floordiv(as_int(a), as_int(b)));
    return Value::number(std::floor(x / y));
  }
  if (op == "%") {
    if (a.kind == K::string) render_fail("unsupported Jinja construct: %-formatting of strings");
    if (ints) return Value::integer(int_mod(as_int(a), as_int(b)));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::number(m);
  }
  render_fail(str_cat("unknown operator ", op));
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Value::boolean(equal(a, b));
  if (op == "!=") return Value::boolean(!equal(a, b));
  if (op == "<") return Value::boolean(compare(a, b, "<") < 0);
  if (op == ">") return Value::boolean(compare(a, b, ">") > 0);
  if (op == "<=") return Value::boolean(compare(a, b, "<=") <= 0);
  if (op == ">=") return Value::boolean(compare(a, b, ">=") >= 0);
  if (op == "~") {
    std::string l = to_str(a), r = to_str(b);
    Budget::string(l.size() + r.size());
    return Value::string(l + r);
  }
  if (op == "in" || op == "not in") return membership_op(op, a, b);
  if (std::optional<Value> r = sequence_op(op, a, b)) return std::move(*r);
  return arithmetic_op(op, a, b);
}

// ---- Strings ----

static uint32_t decode_at(const std::string& s, size_t k, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[k]);
  const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  uint32_t cp = n == 1 ? c : c & (n == 4 ? 0x07 : n == 3 ? 0x0F : 0x1F);
  for (size_t m = 1; m < n && k + m < s.size(); ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3F);
  *len = std::min(n, s.size() - k);
  return cp;
}
// str.isspace: ASCII whitespace, \x1c-\x1f, and Unicode's White_Space characters.
static bool py_space(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}
// str.strip / lstrip / rstrip with Python's chars argument (none: whitespace).
static std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  const bool ws = !chars || chars->kind == K::none || chars->kind == K::undefined;
  if (!ws) {
    if (chars->kind != K::string) render_fail("strip arg must be None or str");
    for (size_t k = 0, n; k < chars->s.size(); k += n) set.push_back(decode_at(chars->s, k, &n));
  }
  std::sort(set.begin(), set.end());  // a long chars argument must not make each test linear
  auto strip_it = [&](uint32_t c) { return ws ? py_space(c) : std::binary_search(set.begin(), set.end(), c); };
  const auto off = utf8_offsets(s);
  size_t b = 0, e = off.size() - 1, n;
  while (left && b < e && strip_it(decode_at(s, off[b], &n))) ++b;
  while (right && e > b && strip_it(decode_at(s, off[e - 1], &n))) --e;
  return s.substr(off[b], off[e] - off[b]);
}
static std::string ascii_map(std::string s, int mode) {  // 0 upper, 1 lower, 2 title, 3 capitalize
  bool prev_alpha = false;
  for (size_t k = 0; k < s.size(); ++k) {
    char& c = s[k];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool up = mode == 0 || (mode == 2 && !prev_alpha) || (mode == 3 && k == 0);
    if (alpha) c = up ? char(std::toupper(c)) : char(std::tolower(c));
    prev_alpha = alpha || (static_cast<unsigned char>(c) >= 0x80 && mode == 2);
  }
  return s;
}
static std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t k = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` between characters: checked before it is built
    const size_t chars = utf8_length(s);
    const uint64_t inserts = count < 0 ? chars + 1 : std::min<uint64_t>(uint64_t(count), chars + 1);
    uint64_t extra;
    if (__builtin_mul_overflow(inserts, uint64_t(to.size()), &extra)) extra = UINT64_MAX;
    Budget::string(size_t(std::min<uint64_t>(extra, UINT64_MAX - s.size()) + s.size()));
    const auto off = utf8_offsets(s);
    for (size_t c = 0; c + 1 < off.size(); ++c) {
      if (count < 0 || done++ < count) out += to;
      out += s.substr(off[c], off[c + 1] - off[c]);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  for (;;) {
    const size_t f = find_linear(s, from, k);
    if (f == std::string::npos || (count >= 0 && done >= count)) break;
    out.append(s, k, f - k);
    out += to;
    Budget::fits(out.size());
    k = f + from.size();
    ++done;
  }
  out.append(s, k);
  Budget::fits(out.size());
  return out;
}
static Array py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  Array out;
  if (!sep || sep->kind == K::none) {
    size_t k = 0, n;
    auto skip = [&] {
      while (k < s.size() && py_space(decode_at(s, k, &n))) k += n;
    };
    skip();
    while (k < s.size()) {
      if (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) {
        std::string rest = s.substr(k);
        add_item(out, Value::string(py_strip(rest, nullptr, false, true)));
        return out;
      }
      size_t e = k;
      while (e < s.size() && !py_space(decode_at(s, e, &n))) e += n;
      add_item(out, Value::string(s.substr(k, e - k)));
      k = e;
      skip();
    }
    return out;
  }
  if (sep->kind != K::string) render_fail("must be str or None");
  if (sep->s.empty()) render_fail("empty separator");
  size_t k = 0;
  for (;;) {
    const size_t f = find_linear(s, sep->s, k);
    if (f == std::string::npos || (maxsplit >= 0 && int64_t(out.size()) >= maxsplit)) break;
    add_item(out, Value::string(s.substr(k, f - k)));
    k = f + sep->s.size();
  }
  add_item(out, Value::string(s.substr(k)));
  return out;
}

static int64_t int_arg(CallArgs& a, size_t pos, const char* name, int64_t dflt) {
  const Value* v = a.at(pos, name);
  return v && v->kind != K::none ? as_int(*v) : dflt;
}

static Value str_method(const std::string& s, const std::string& name) {
  auto bind = [&](auto fn) { return Value::function([s, fn](CallArgs& a) -> Value { return fn(s, a); }); };
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return bind([l = name != "rstrip", r = name != "lstrip"](const std::string& x, CallArgs& a) {
      return Value::string(py_strip(x, a.at(0, "chars"), l, r));
    });
  if (name == "split")
    return bind([](const std::string& x, CallArgs& a) {
      return Value::array(py_split(x, a.at(0, "sep"), int_arg(a, 1, "maxsplit", -1)));
    });
  if (name == "startswith" || name == "endswith")
    return bind([start = name == "startswith"](const std::string& x, CallArgs& a) {
      const Value* p = a.at(0, nullptr);
      if (!p) render_fail("startswith / endswith take a prefix");
      Array cands = p->kind == K::array ? *p->a : Array{*p};
      for (const Value& c : cands) {
        if (c.kind != K::string) render_fail("startswith / endswith take a str or a tuple of str");
        if (c.s.size() <= x.size() && x.compare(start ? 0 : x.size() - c.s.size(), c.s.size(), c.s) == 0)
          return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  static const std::pair<const char*, int> maps[] = {{"upper", 0}, {"lower", 1}, {"title", 2}, {"capitalize", 3}};
  for (const auto& m : maps)
    if (name == m.first) {
      const int mode = m.second;  // (a structured binding cannot be captured before C++20 in clang 14)
      return bind([mode](const std::string& x, CallArgs&) {
        return Value::string(ascii_map(mode == 3 ? ascii_map(x, 1) : x, mode));
      });
    }
  if (name == "replace")
    return bind([](const std::string& x, CallArgs& a) {
      const Value *f = a.at(0, nullptr), *t = a.at(1, nullptr);
      if (!f || !t || f->kind != K::string || t->kind != K::string) render_fail("replace() takes two strings");
      return Value::string(py_replace(x, f->s, t->s, int_arg(a, 2, "count", -1)));
    });
  if (name == "find" || name == "count")
    return bind([find = name == "find"](const std::string& x, CallArgs& a) {
      const Value* sub = a.at(0, nullptr);
      if (!sub || sub->kind != K::string) render_fail("find() / count() take a string");
      if (find) {
        const size_t f = find_linear(x, sub->s);
        return Value::integer(f == std::string::npos ? -1 : int64_t(utf8_length(x.substr(0, f))));
      }
      int64_t n = 0;
      for (size_t k = find_linear(x, sub->s); k != std::string::npos && !sub->s.empty();
           k = find_linear(x, sub->s, k + sub->s.size()))
        ++n;
      return Value::integer(n);
    });
  if (name == "join")
    return bind([](const std::string& x, CallArgs& a) {
      const Value* it = a.at(0, nullptr);
      std::string out;
      bool first = true;
      for (const Value& v : it ? iterate(*it) : Array{}) {
        out += (first ? "" : x) + to_str(v);
        Budget::fits(out.size());
        first = false;
      }
      return Value::string(out);
    });
  if (name == "splitlines")
    return bind([](const std::string& x, CallArgs&) {
      Array out;
      size_t k = 0;
      while (k < x.size()) {
        size_t e = x.find_first_of("\r\n", k);
        if (e == std::string::npos) e = x.size();
        add_item(out, Value::string(x.substr(k, e - k)));
        k = e + (x.compare(e, 2, "\r\n") == 0 ? 2 : 1);
      }
      return Value::array(std::move(out));
    });
  return Value();
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.kind == K::undefined) render_fail(str_cat("undefined value has no attribute '", name, "'"));
  if (obj.kind == K::string) {
    return str_method(obj.s, name);  // undefined for other names, as Jinja2's getattr
  }
  if (obj.kind == K::object) {
    if (!obj.o->is_namespace) {
      auto o = obj.o;
      if (name == "items" || name == "keys" || name == "values")
        return Value::function([o, name](CallArgs&) {
          Budget::list(o->items.size());
          Array out;
          for (auto& kv : o->items)
            out.push_back(name == "items"  ? Value::array({Value::string(kv.first), kv.second})
                          : name == "keys" ? Value::string(kv.first)
                                           : kv.second);
          return Value::array(std::move(out));
        });
      if (name == "get")
        return Value::function([o](CallArgs& a) {
          const Value* k = a.at(0, nullptr);
          const Value* hit = k && k->kind == K::string ? o->find(k->s) : nullptr;
          if (hit) return *hit;
          const Value* d = a.at(1, "default");
          return d ? *d : Value::none();
        });
    }
    const Value* v = obj.o->find(name);
    return v ? *v : Value();
  }
  return Value();
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.kind == K::undefined) render_fail(str_cat("undefined value has no item ", repr(key)));
  if (obj.kind == K::object) {
    if (key.kind == K::string) {
      const Value* v = obj.o->find(key.s);
      if (v) return *v;
    }
    return key.kind == K::string ? get_attr(obj, key.s) : Value();
  }
  if ((obj.kind == K::array || obj.kind == K::string) && (key.kind == K::integer || key.kind == K::boolean)) {
    if (obj.kind == K::array) {
      int64_t n = int64_t(obj.a->size()), k = as_int(key);
      if (k < 0) k += n;
      return k >= 0 && k < n ? (*obj.a)[size_t(k)] : Value();
    }
    const auto off = utf8_offsets(obj.s);
    int64_t n = int64_t(off.size()) - 1, k = as_int(key);
    if (k < 0) k += n;
    return k >= 0 && k < n ? Value::string(obj.s.substr(off[k], off[k + 1] - off[k])) : Value();
  }
  if (key.kind == K::string) return get_attr(obj, key.s);
  return Value();
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  const bool is_str = obj.kind == K::string;
  if (!is_str && obj.kind != K::array) render_fail(str_cat("'", type_name(obj), "' object is not subscriptable"));
  const std::vector<size_t> off = is_str ? utf8_offsets(obj.s) : std::vector<size_t>();
  const int64_t n = is_str ? int64_t(off.size()) - 1 : int64_t(obj.a->size());
  const int64_t st = step.defined() && step.kind != K::none ? as_int(step) : 1;
  if (st == 0) render_fail("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!v.defined() || v.kind == K::none) return dflt;
    int64_t k = as_int(v);
    if (k < 0) k += n;
    return st > 0 ? std::clamp<int64_t>(k, 0, n) : std::clamp<int64_t>(k, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  // The count first, in 128 bits: stepping k by a huge step could overflow past the end.
  const __int128 span = st > 0 ? __int128(e) - b : __int128(b) - e, stride = st > 0 ? __int128(st) : -__int128(st);
  const int64_t count = span <= 0 ? 0 : int64_t((span - 1) / stride + 1);
  if (!is_str) Budget::list(size_t(count));  // (a string's slice is no longer than the string)
  Array items;
  std::string s;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = int64_t(__int128(b) + __int128(i) * st);
    if (is_str)
      s += obj.s.substr(off[size_t(k)], off[size_t(k) + 1] - off[size_t(k)]);
    else
      items.push_back((*obj.a)[size_t(k)]);
  }
  if (!is_str) Budget::copy(items);
  return is_str ? Value::string(s) : Value::array(std::move(items));
}

// ---- Tests ----

static const std::set<std::string> kTests = {
    "defined",     "undefined", "none",     "boolean",  "false",    "true",   "integer",     "float",   "number",
    "string",      "mapping",   "iterable", "sequence", "callable", "sameas", "eq",          "equalto", "==",
    "ne",          "!=",        "lt",       "<",        "lessthan", "le",     "<=",          "gt",      ">",
    "greaterthan", "ge",        ">=",       "in",       "odd",      "even",   "divisibleby", "lower",   "upper"};
bool known_test(const std::string& name) { return kTests.count(name) > 0; }

bool apply_test(const std::string& t, const Value& v, const std::vector<Value>& args) {
  auto need = [&](size_t n) {
    if (args.size() < n) render_fail(str_cat("test '", t, "' needs an argument"));
    return args[0];
  };
  if (t == "defined") return v.defined();
  if (t == "undefined") return !v.defined();
  if (t == "none") return v.kind == K::none;
  if (t == "boolean") return v.kind == K::boolean;
  if (t == "false") return v.kind == K::boolean && !v.b;
  if (t == "true") return v.kind == K::boolean && v.b;
  if (t == "integer") return v.kind == K::integer;
  if (t == "float") return v.kind == K::number;
  if (t == "number") return v.kind == K::integer || v.kind == K::number || v.kind == K::boolean;
  if (t == "string") return v.kind == K::string;
  if (t == "mapping") return v.kind == K::object;
  if (t == "iterable") return v.kind == K::array || v.kind == K::string || v.kind == K::object;
  if (t == "sequence") return v.kind == K::array || v.kind == K::string || v.kind == K::object;
  if (t == "callable") return v.kind == K::function;
  if (t == "sameas") {
    const Value& o = need(1);
    if (v.kind != o.kind) return false;
    if (v.kind == K::array) return v.a == o.a;
    if (v.kind == K::object) return v.o == o.o;
    return equal(v, o);
  }
  if (t == "eq" || t == "equalto" || t == "==") return equal(v, need(1));
  if (t == "ne" || t == "!=") return !equal(v, need(1));
  if (t == "lt" || t == "<" || t == "lessthan") return compare(v, need(1), "<") < 0;
  if (t == "le" || t == "<=") return compare(v, need(1), "<=") <= 0;
  if (t == "gt" || t == ">" || t == "greaterthan") return compare(v, need(1), ">") > 0;
  if (t == "ge" || t == ">=") return compare(v, need(1), ">=") >= 0;
  if (t == "in") return truthy(binary_op("in", v, need(1)));
  if (t == "odd" || t == "even") {
    if (v.kind != K::integer) render_fail(str_cat("test '", t, "' needs an integer"));
    return (((v.i % 2) + 2) % 2 == 1) == (t == "odd");
  }
  if (t == "divisibleby") {
    const int64_t d = as_int(need(1));
    if (d == 0) render_fail("divisibleby 0");
    return int_mod(as_int(v), d) == 0;  // INT64_MIN % -1 would trap
  }
  if (t == "lower") return v.kind == K::string && ascii_map(v.s, 1) == v.s;
  if (t == "upper") return v.kind == K::string && ascii_map(v.s, 0) == v.s;
  render_fail(str_cat("unsupported Jinja test \"", t, "\""));
}

}  // namespace zt::jinja
