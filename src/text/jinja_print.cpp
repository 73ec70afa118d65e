// jinja_print.cpp: how template values become text: Python's str() and repr() (floats in
// repr's shortest form) and json.dumps (HF's tojson). Each builds into one buffer checked against
// the render's string limit as it grows, and recurses over values at most Limits::max_depth deep
// (a list that holds one list many times prints far larger than it is; a namespace can hold
// itself). Not here: parsing or evaluation (jinja_parse.cpp, jinja_eval.cpp).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "text/jinja_internal.h"

namespace zt::jinja {

using K = Value::Kind;

// Python's repr(float): the shortest round-trip digits, fixed notation for exponents in
// [-4, 16), else d.ddde+XX; integral values keep ".0".
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // -d.dddde+XX
  const bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {  // (not "." + rest: GCC 12 warns falsely on that in this file, PR 105651)
      out += '.';
      out.append(digits, 1);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

static std::string repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == q)
      out += std::string("\\") + char(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else
      out += char(c);
  }
  return out + q;
}

// Appends repr(v) to out: one buffer for the whole value, checked against the string limit as it
// grows (a list can hold one list many times over, so its text can be far larger than its memory).
static void repr_into(std::string& out, const Value& v, int depth) {
  Budget::depth(depth);
  if (v.kind == K::array) {
    out += '[';
    for (size_t k = 0; k < v.a->size(); ++k) {
      if (k) out += ", ";
      repr_into(out, (*v.a)[k], depth + 1);
    }
    out += ']';
  } else if (v.kind == K::object && !v.o->is_namespace) {
    out += '{';
    for (size_t k = 0; k < v.o->items.size(); ++k) {
      out += (k ? ", " : "") + repr_string(v.o->items[k].first) + ": ";
      repr_into(out, v.o->items[k].second, depth + 1);
    }
    out += '}';
  } else {
    out += v.kind == K::string ? repr_string(v.s) : to_str(v);
  }
  Budget::fits(out.size());
}

std::string repr(const Value& v, int depth) {
  std::string out;
  repr_into(out, v, depth);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case K::undefined:
      return "";
    case K::none:
      return "None";
    case K::boolean:
      return v.b ? "True" : "False";
    case K::integer:
      return std::to_string(v.i);
    case K::number:
      return float_repr(v.d);
    case K::string:
      return v.s;
    case K::object:
      if (v.o->is_namespace) return "<Namespace>";
      return repr(v);
    case K::array:
      return repr(v);
    case K::function:
      return "<function>";
  }
  return "";
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t k = 0; k < s.size(); ++k) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    char b[16];
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\b')
      out += "\\b";
    else if (c == '\f')
      out += "\\f";
    else if (c < 0x20) {
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else if (c >= 0x80 && ensure_ascii) {
      const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      uint32_t cp = c & (n == 4 ? 0x07 : n == 3 ? 0x0F : 0x1F);
      for (int m = 1; m < n && k + 1 < s.size(); ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[++k]) & 0x3F);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", cp);
      }
      out += b;
    } else
      out += char(c);
  }
  out += '"';
}

// Python's json.dumps(v, ensure_ascii, indent, separators, sort_keys), appended to out and checked
// against the string limit as it grows (see repr_into); a namespace that contains itself ends at the
// depth limit, as Python's ends at its recursion limit.
static void json_into(std::string& out, const Value& v, const JsonStyle& st, int depth) {
  Budget::depth(depth);
  auto newline = [&](int level) {
    if (st.indent < 0) return;
    Budget::fits(out.size() + size_t(st.indent) * size_t(level));
    out += '\n';
    out.append(size_t(st.indent) * size_t(level), ' ');
  };
  switch (v.kind) {
    case K::undefined:
    case K::none:
      out += "null";
      break;
    case K::boolean:
      out += v.b ? "true" : "false";
      break;
    case K::integer:
      out += std::to_string(v.i);
      break;
    case K::number:
      out += std::isnan(v.d) ? "NaN" : std::isinf(v.d) ? (v.d < 0 ? "-Infinity" : "Infinity") : float_repr(v.d);
      break;
    case K::string:
      json_string(out, v.s, st.ensure_ascii);
      break;
    case K::array:
      if (v.a->empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t k = 0; k < v.a->size(); ++k) {
        if (k) out += st.item_sep;
        newline(depth + 1);
        json_into(out, (*v.a)[k], st, depth + 1);
      }
      newline(depth);
      out += ']';
      break;
    case K::object: {
      if (v.o->items.empty()) {
        out += "{}";
        break;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (auto& kv : v.o->items) items.push_back(&kv);
      if (st.sort_keys) std::sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(depth + 1);
        json_string(out, items[k]->first, st.ensure_ascii);
        out += st.key_sep;
        json_into(out, items[k]->second, st, depth + 1);
      }
      newline(depth);
      out += '}';
      break;
    }
    case K::function:
      render_fail("Object of type function is not JSON serializable");
  }
  Budget::fits(out.size());
}

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_into(out, v, style, 0);
  return out;
}

}  // namespace zt::jinja
