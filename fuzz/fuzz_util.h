// fuzz_util.h: what every libFuzzer target in fuzz/ shares. A target feeds one input to a
// parser; the input must either be accepted or rejected with a zt::Error whose message is one
// non-empty line. Anything else (another exception type, a crash, a sanitizer report, a
// timeout, a multi-line message) is a finding, reported by aborting so libFuzzer saves it.
// Also: in-memory files (memfd, reachable by path as /proc/self/fd/N) for parsers that only
// take a path, and one scratch folder per process for those that need real file names.
// Not here: anything a target checks about its parser's results (that lives in the target).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace zt::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs f; a zt::Error is the expected rejection, but its message must be one non-empty line.
template <class F>
void expect_ok_or_error(F&& f) {
  try {
    f();
  } catch (const zt::Error& e) {
    std::string_view m = e.what();
    if (m.empty()) finding("zt::Error with an empty message");
    if (m.find('\n') != std::string_view::npos || m.find('\r') != std::string_view::npos)
      finding("zt::Error message spans more than one line: " + std::string(m));
  }
}

// The lowest free file descriptor: it changes when a parser leaks one.
inline int lowest_free_fd() {
  int fd = ::dup(0);
  if (fd >= 0) ::close(fd);
  return fd;
}

// Mappings of the harness's memfds (MemFile) still in the address space; with unmap, removes them.
// A parser that maps its input and throws without unmapping leaves one behind per input.
inline size_t memfd_mappings(bool unmap) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t n = 0;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:zt_fuzz") == std::string::npos) continue;
    ++n;
    if (unmap) {
      unsigned long lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) ::munmap(reinterpret_cast<void*>(lo), hi - lo);
    }
  }
  return n;
}

// Declared first in a target's entry point: at its end, no descriptor and (with maps) no mapping
// of the input may be left behind.
class LeakCheck {
 public:
  explicit LeakCheck(bool maps) : maps_(maps), fd_(lowest_free_fd()) {}
  ~LeakCheck() {
    if (lowest_free_fd() != fd_) finding("a file descriptor leaked (lowest free fd changed)");
    if (maps_ && memfd_mappings(false) > 0) finding("a memory mapping of the input leaked");
  }
  LeakCheck(const LeakCheck&) = delete;
  LeakCheck& operator=(const LeakCheck&) = delete;

 private:
  bool maps_;
  int fd_;
};

// A file that lives in memory: the parser opens "/proc/self/fd/N" like any path.
class MemFile {
 public:
  explicit MemFile(std::string_view bytes) {
    fd_ = ::memfd_create("zt_fuzz", 0);
    if (fd_ < 0) finding("memfd_create failed (harness problem, not a finding in ztrain)");
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t w = ::write(fd_, bytes.data() + off, bytes.size() - off);
      if (w <= 0) finding("memfd write failed (harness problem)");
      off += size_t(w);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// One scratch folder per fuzzing process (in /dev/shm when it exists), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    namespace fs = std::filesystem;
    fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("zt_fuzz_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) finding("cannot write scratch file " + p.string() + " (harness problem)");
}

// Splits the input at each occurrence of sep (seed files use it between their parts).
inline std::vector<std::string_view> split(std::string_view in, std::string_view sep, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    size_t at = in.find(sep);
    if (at == std::string_view::npos) break;
    parts.push_back(in.substr(0, at));
    in.remove_prefix(at + sep.size());
  }
  parts.push_back(in);
  return parts;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace zt::fuzz
