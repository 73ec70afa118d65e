// profile.h: opt-in wall-clock accounting by region name (ZT_PROFILE=1 in the
// environment). Each kernel is a whole parallel region, so timing it from the calling
// thread is exact. Off by default: then a region costs one predictable branch.
#pragma once
#include <chrono>

namespace zt::prof {

// Seconds from t to now on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

bool enabled();
void add(const char* name, double seconds);
// Prints the table of regions, sorted by time, to stderr.
void report();

class Scope {
 public:
  explicit Scope(const char* name) : name_(enabled() ? name : nullptr) {
    if (name_) t0_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (name_) add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace zt::prof

#define ZT_PROF_CAT2(a, b) a##b
#define ZT_PROF_CAT(a, b) ZT_PROF_CAT2(a, b)
#define ZT_PROFILE(name) ::zt::prof::Scope ZT_PROF_CAT(zt_prof_, __LINE__)(name)
