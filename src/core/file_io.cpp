// file_io.cpp: see file_io.h.
#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace zt {

void write_all(int fd, const void* p, size_t n, const std::string& path, const char* hint) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    ZT_CHECK(w > 0, "writing ", path, " failed: ", w < 0 ? std::strerror(errno) : "no progress", "; ", hint);
    c += w;
    n -= size_t(w);
  }
}

void fsync_path(const std::string& path, bool is_dir) {
  const int fd = ::open(path.c_str(), is_dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ZT_CHECK(fd >= 0, "cannot create ", tmp, ": ", std::strerror(errno));
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::fsync(fd);
  ::close(fd);
  ZT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  const size_t slash = path.rfind('/');
  fsync_path(slash == std::string::npos ? "." : path.substr(0, slash), true);
}

}  // namespace zt
