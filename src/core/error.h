// error.h: the one exception type ztrain's library throws, and the check macros.
// User-facing problems (bad flags, files, configs) use ZT_CHECK with a message that
// names the problem and what to do; internal invariants use ZT_ASSERT, which adds
// file:line because such a failure is our bug, not the user's. Only apps/ turns an
// Error into an exit code.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace zt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

}  // namespace zt

#define ZT_CHECK(cond, ...)                                     \
  do {                                                          \
    if (!(cond)) throw ::zt::Error(::zt::str_cat(__VA_ARGS__)); \
  } while (0)

#define ZT_ASSERT(cond, ...)                                                                         \
  do {                                                                                               \
    if (!(cond))                                                                                     \
      throw ::zt::Error(::zt::str_cat("internal error at ", __FILE__, ":", __LINE__, ": " #cond " ", \
                                      ##__VA_ARGS__));                                               \
  } while (0)
