// profile.cpp: see profile.h.
#include "core/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace zt::prof {
namespace {
std::mutex g_profile_mu;
std::map<std::string, std::pair<double, long>>& table() {
  static std::map<std::string, std::pair<double, long>> t;
  return t;
}
}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* e = std::getenv("ZT_PROFILE");
    return e && *e && *e != '0';
  }();
  return on;
}

void add(const char* name, double s) {
  std::lock_guard<std::mutex> lk(g_profile_mu);
  auto& e = table()[name];
  e.first += s;
  e.second += 1;
}

void report() {
  if (!enabled()) return;
  std::vector<std::pair<std::string, std::pair<double, long>>> rows(table().begin(), table().end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (auto& r : rows) total += r.second.first;
  std::fprintf(stderr, "profile (ZT_PROFILE): region, seconds, calls, share\n");
  for (auto& r : rows)
    std::fprintf(stderr, "  %-24s %9.3f s %8ld  %5.1f%%\n", r.first.c_str(), r.second.first, r.second.second,
                 100.0 * r.second.first / total);
}

}  // namespace zt::prof
