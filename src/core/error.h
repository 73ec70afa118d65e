// error.h: the one exception type ztrain's library throws, and the check macros.
// User-facing problems (bad flags, files, configs) use ZT_CHECK with a message that
// names the problem and what to do; internal invariants use ZT_ASSERT, which adds
// file:line because such a failure is our bug, not the user's. Only apps/ turns an
// Error into an exit code.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An Error that every rank of a job raises with the same message at the same point (a check
// over values the ranks exchanged): one rank reporting it is enough, so apps/ prints it once.
class JobError : public Error {
 public:
  using Error::Error;
};

template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

// Text from the user's input (a flag, a JSON string, a line of a file) for an error message:
// in double quotes, with quotes, backslashes and control characters escaped (\n, \t, \xNN), so
// the message stays on one line whatever the input holds. Bytes >= 0x80 pass unchanged.
// (Not named "quoted": with a std::string argument, ADL would pick std::quoted instead.)
inline std::string quote(std::string_view text) {
  std::string q = "\"";
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      q += '\\';
      q += ch;
    } else if (c == '\n') {
      q += "\\n";
    } else if (c == '\r') {
      q += "\\r";
    } else if (c == '\t') {
      q += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      const char* hex = "0123456789abcdef";
      q += "\\x";
      q += hex[c >> 4];
      q += hex[c & 15];
    } else {
      q += ch;
    }
  }
  return q + '"';
}

}  // namespace zt

#define ZT_CHECK(cond, ...)                                     \
  do {                                                          \
    if (!(cond)) throw ::zt::Error(::zt::str_cat(__VA_ARGS__)); \
  } while (0)

#define ZT_ASSERT(cond, ...)                                                                                          \
  do {                                                                                                                \
    if (!(cond))                                                                                                      \
      throw ::zt::Error(::zt::str_cat("internal error at ", __FILE__, ":", __LINE__, ": " #cond " ", ##__VA_ARGS__)); \
  } while (0)
