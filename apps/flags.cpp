// flags.cpp: see flags.h.
#include "flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/edit_distance.h"
#include "core/error.h"

namespace zt::app {
namespace {

// A flag name for a message: control characters escaped, so the message stays one line.
std::string shown(const std::string& name) {
  std::string q = quote(name);
  return q.substr(1, q.size() - 2);
}

// A bound for a message: integers as integers, powers of ten from 1e6 as 1eN, else %g.
std::string bound(double v) {
  char b[32];
  const double a = std::fabs(v), e = std::round(std::log10(a));
  if (a >= 1e6 && std::pow(10.0, e) == a)
    std::snprintf(b, sizeof b, "%s1e%d", v < 0 ? "-" : "", int(e));
  else if (v == std::floor(v) && a < 9e15)
    std::snprintf(b, sizeof b, "%lld", (long long)v);
  else
    std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

bool Range::contains(double v) const {
  if (special && v == *special) return true;
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string Range::describe(bool integer) const {
  std::string s = special ? bound(*special) + " or " : "";
  s += integer ? "an integer" : "a number";
  if (std::isinf(hi)) return s + (lo_open ? " > " : " >= ") + bound(lo);
  return s + " in " + (lo_open ? "(" : "[") + bound(lo) + ", " + bound(hi) + (hi_open ? ")" : "]");
}

void FlagSet::add(const std::string& n, std::string* v, const std::string& h) {
  flags_.push_back({n, h, Kind::str, v, {}});
}
void FlagSet::add(const std::string& n, int* v, const std::string& h, Range r) {
  // The parser reads an int64 and checks the range only, so the range is clipped to int's.
  r.lo = std::max(r.lo, double(INT32_MIN));
  r.hi = std::min(r.hi, double(INT32_MAX));
  flags_.push_back({n, h, Kind::i32, v, r});
}
void FlagSet::add(const std::string& n, int64_t* v, const std::string& h, Range r) {
  flags_.push_back({n, h, Kind::i64, v, r});
}
void FlagSet::add(const std::string& n, double* v, const std::string& h, Range r) {
  flags_.push_back({n, h, Kind::f64, v, r});
}
void FlagSet::add(const std::string& n, bool* v, const std::string& h) {
  flags_.push_back({n, h, Kind::boolean, v, {}});
}

const FlagSet::Flag* FlagSet::find(const std::string& name) const {
  for (auto& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

std::string FlagSet::nearest(const std::string& name) const {
  std::string best;
  size_t bd = SIZE_MAX;
  for (auto& f : flags_) {
    size_t d = edit_distance(name, f.name);
    if (d < bd) {
      bd = d;
      best = f.name;
    }
  }
  return best;
}

void FlagSet::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    ZT_CHECK(arg.rfind("--", 0) == 0 && arg.size() > 2, "ztrain ", command_, ": unexpected argument ", quote(arg),
             "; flags look like --name value (see ztrain ", command_, " --help)");
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* f = find(name);
    if (auto r = refused_because_.find(name); !f && r != refused_because_.end())
      throw Error(str_cat("ztrain ", command_, ": --", name, " ", r->second));
    ZT_CHECK(f || !refused_.count(name), "ztrain ", command_, ": --", name, " ", refused_why_);
    ZT_CHECK(f, "ztrain ", command_, ": unknown flag --", shown(name), "; did you mean --", nearest(name), "?");
    given_.insert(f->name);
    if (f->kind == Kind::boolean) {
      if (!has_value && i + 1 < args.size() &&
          (args[i + 1] == "true" || args[i + 1] == "false" || args[i + 1] == "True" || args[i + 1] == "False")) {
        value = args[++i];
        has_value = true;
      }
      bool b = !has_value || value == "true" || value == "True" || value == "1";
      ZT_CHECK(!has_value || b || value == "false" || value == "False" || value == "0", "ztrain ", command_, ": --",
               name, " expects true or false, got ", quote(value));
      *static_cast<bool*>(f->ptr) = b;
      continue;
    }
    if (!has_value) {
      ZT_CHECK(i + 1 < args.size(), "ztrain ", command_, ": --", name, " needs a value");
      value = args[++i];
    }
    if (f->kind == Kind::str)
      *static_cast<std::string*>(f->ptr) = value;
    else
      parse_number(*f, value);
  }
}

// One message for every way a value can be wrong (not a number, not an integer, NaN, out of
// the type, out of the range): what the flag expects and what it got.
void FlagSet::parse_number(const Flag& f, const std::string& value) {
  const bool integer = f.kind != Kind::f64;
  const char* s = value.c_str();
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(s, &end);
  bool ok = !value.empty() && *end == 0 && errno == 0 && std::isfinite(d);
  long long v = 0;
  if (ok && integer) {
    // Exact integers in any notation (DeepSpeed users write 5e8); digits parse exactly.
    errno = 0;
    v = std::strtoll(s, &end, 10);
    if (*end != 0 || errno != 0) {
      ok = d == std::floor(d) && std::fabs(d) < 9.2e18;
      v = ok ? (long long)d : 0;
    }
    d = double(v);
  }
  ZT_CHECK(ok && f.range.contains(d), "ztrain ", command_, ": --", f.name, " expects ", f.range.describe(integer),
           ", got ", quote(value));
  if (f.kind == Kind::i32)
    *static_cast<int*>(f.ptr) = int(v);
  else if (f.kind == Kind::i64)
    *static_cast<int64_t*>(f.ptr) = v;
  else
    *static_cast<double*>(f.ptr) = d;
}

std::string FlagSet::help() const {
  std::string s = "usage: ztrain " + command_ + " [flags]\n";
  for (auto& f : flags_) {
    std::string n = "  --" + f.name;
    if (n.size() < 34) n.resize(34, ' ');
    s += n + " " + f.help;
    if (f.kind != Kind::str && f.kind != Kind::boolean) s += " [" + f.range.describe(f.kind != Kind::f64) + "]";
    s += "\n";
  }
  return s;
}

}  // namespace zt::app
