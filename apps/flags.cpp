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

}  // namespace

void FlagSet::add(const std::string& n, std::string* v, const std::string& h) {
  flags_.push_back({n, h, Kind::str, v});
}
void FlagSet::add(const std::string& n, int* v, const std::string& h) { flags_.push_back({n, h, Kind::i32, v}); }
void FlagSet::add(const std::string& n, int64_t* v, const std::string& h) { flags_.push_back({n, h, Kind::i64, v}); }
void FlagSet::add(const std::string& n, double* v, const std::string& h) { flags_.push_back({n, h, Kind::f64, v}); }
void FlagSet::add(const std::string& n, bool* v, const std::string& h) { flags_.push_back({n, h, Kind::boolean, v}); }

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
    const char* s = value.c_str();
    char* end = nullptr;
    errno = 0;
    switch (f->kind) {
      case Kind::str:
        *static_cast<std::string*>(f->ptr) = value;
        break;
      case Kind::i32:
      case Kind::i64: {
        long long v = std::strtoll(s, &end, 10);
        bool ok = !value.empty() && *end == 0 && errno == 0;
        if (*end == '.' || *end == 'e' || *end == 'E') {
          // DeepSpeed users write sizes as 5e8: accept any notation of an exact integer in range.
          errno = 0;
          const double d = std::strtod(s, &end);
          ok = *end == 0 && errno == 0 && d == std::floor(d) && std::fabs(d) < 9.2e18;
          v = ok ? (long long)d : 0;
        }
        ZT_CHECK(ok && (f->kind == Kind::i64 || (v >= INT32_MIN && v <= INT32_MAX)), "ztrain ", command_, ": --", name,
                 " expects an integer, got ", quote(value));
        if (f->kind == Kind::i32)
          *static_cast<int*>(f->ptr) = int(v);
        else
          *static_cast<int64_t*>(f->ptr) = v;
        break;
      }
      case Kind::f64: {
        double v = std::strtod(s, &end);
        ZT_CHECK(!value.empty() && *end == 0 && errno == 0 && std::isfinite(v), "ztrain ", command_, ": --", name,
                 " expects a number, got ", quote(value));
        *static_cast<double*>(f->ptr) = v;
        break;
      }
      default:
        break;
    }
  }
}

std::string FlagSet::help() const {
  std::string s = "usage: ztrain " + command_ + " [flags]\n";
  for (auto& f : flags_) {
    std::string n = "  --" + f.name;
    if (n.size() < 34) n.resize(34, ' ');
    s += n + " " + f.help + "\n";
  }
  return s;
}

}  // namespace zt::app
