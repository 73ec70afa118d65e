// file_io.cpp: see file_io.h.
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <thread>

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

int open_new_file(const std::string& path, int extra_flags, unsigned mode) {
  ::unlink(path.c_str());  // a link is removed itself; its target is never touched
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | extra_flags, mode);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = open_new_file(tmp);
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
  rename_into_place(tmp, path);
}

void rename_into_place(const std::string& tmp, const std::string& path) {
  ZT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  const size_t slash = path.rfind('/');
  fsync_path(slash == std::string::npos ? "." : path.substr(0, slash), true);
}

namespace {
thread_local WritePacing* t_pacing = nullptr;
}  // namespace

WritePacing::WritePacing(uint64_t total_bytes, double seconds, const std::atomic<bool>* hurry)
    : total_(std::max<uint64_t>(total_bytes, 1)),
      seconds_(seconds),
      hurry_(hurry),
      t0_(std::chrono::steady_clock::now()),
      outer_(t_pacing) {
  t_pacing = this;
}

WritePacing::~WritePacing() { t_pacing = outer_; }

void WritePacing::wrote(uint64_t bytes) {
  WritePacing* p = t_pacing;
  if (!p) return;
  p->done_ += bytes;
  const auto due =
      p->t0_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
                   p->seconds_ * double(std::min(p->done_, p->total_)) / double(p->total_)));
  // Short sleeps, so that a hurry is noticed within 10 ms.
  while (std::chrono::steady_clock::now() < due && !(p->hurry_ && p->hurry_->load(std::memory_order_relaxed)))
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(due - std::chrono::steady_clock::now(),
                                                                              std::chrono::milliseconds(10)));
}

namespace {
constexpr size_t kDirectAlign = 4096;            // O_DIRECT: buffer, offset and length in whole blocks
constexpr size_t kStageBytes = size_t(8) << 20;  // one write per 8 MiB
constexpr size_t kHashPiece = size_t(256) << 10;
}  // namespace

namespace {

// Writes n bytes at fd's position from c. With O_DIRECT, c and n must be whole blocks: the caller
// passes n rounded up (`exact` is the length without that padding, what a file system that refuses
// O_DIRECT writes at the first one gets instead, with *direct turned false).
void put_bytes(int fd, bool* direct, const unsigned char* c, size_t n, size_t exact, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, c + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && *direct && done == 0) {  // a file system that takes O_DIRECT at open only
      ZT_CHECK(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT) == 0, "cannot write ", path, ": ",
               std::strerror(errno));
      *direct = false;
      n = exact;
      continue;
    }
    ZT_CHECK(w > 0, "writing ", path, " failed: ", w < 0 ? std::strerror(errno) : "no progress",
             "; check free disk space");
    done += size_t(w);
  }
  WritePacing::wrote(n);
}

// Opens a new file for writing, with O_DIRECT where the file system allows it.
int open_new(const std::string& path, bool* direct) {
  int fd = open_new_file(path, O_DIRECT);
  *direct = fd >= 0;
  if (!*direct) fd = open_new_file(path);  // tmpfs and others
  ZT_CHECK(fd >= 0, "cannot create ", path, ": ", std::strerror(errno));
  return fd;
}

// The end of a file written with O_DIRECT in whole blocks: cut to its size, fsynced, closed.
// Returns the inode.
uint64_t close_written(int fd, bool direct, uint64_t size, const std::string& path) {
  if (direct) ZT_CHECK(::ftruncate(fd, off_t(size)) == 0, "cannot truncate ", path, ": ", std::strerror(errno));
  ZT_CHECK(::fsync(fd) == 0, "fsync of ", path, " failed: ", std::strerror(errno), "; check free disk space");
  struct stat st {};
  ::fstat(fd, &st);
  ::close(fd);
  return uint64_t(st.st_ino);
}

}  // namespace

SequentialFileWriter::SequentialFileWriter(std::string path, uint64_t size)
    : path_(std::move(path)), size_(size), buf_(nullptr, std::free) {
  fd_ = open_new(path_, &direct_);
  buf_.reset(static_cast<unsigned char*>(std::aligned_alloc(kDirectAlign, kStageBytes)));
  ZT_CHECK(buf_ != nullptr, "out of memory for the write buffer of ", path_);
}

SequentialFileWriter::~SequentialFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void SequentialFileWriter::flush_full() {
  size_t n = fill_;
  if (direct_ && n % kDirectAlign != 0) {  // only the file's last block: pad, truncate in finish()
    const size_t padded = (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    std::memset(buf_.get() + n, 0, padded - n);
    n = padded;
  }
  put_bytes(fd_, &direct_, buf_.get(), n, fill_, path_);
  fill_ = 0;
}

FileDigest write_image_file(const std::string& path, const void* image, uint64_t size, uint64_t checksum) {
  ZT_ASSERT(reinterpret_cast<uintptr_t>(image) % kDirectAlign == 0, "write_image_file: ", path, " is not aligned");
  bool direct = false;
  const int fd = open_new(path, &direct);
  try {
    const unsigned char* c = static_cast<const unsigned char*>(image);
    for (uint64_t off = 0; off < size; off += kStageBytes) {
      const size_t exact = size_t(std::min<uint64_t>(kStageBytes, size - off));
      const size_t n = direct ? (exact + kDirectAlign - 1) / kDirectAlign * kDirectAlign : exact;
      put_bytes(fd, &direct, c + off, n, exact, path);
    }
    return {checksum, size, close_written(fd, direct, size, path)};
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
}

void SequentialFileWriter::write(const void* p, size_t n) {
  ZT_ASSERT(written_ + n <= size_, "writing ", path_, ": more bytes than announced");
  written_ += n;
  const unsigned char* c = static_cast<const unsigned char*>(p);
  while (n > 0) {
    // Pieces of 256 KiB: each is hashed right after its copy, from the cache.
    const size_t k = std::min({n, kStageBytes - fill_, kHashPiece});
    std::memcpy(buf_.get() + fill_, c, k);
    hash_.update(buf_.get() + fill_, k);
    fill_ += k, c += k, n -= k;
    if (fill_ == kStageBytes) flush_full();
  }
}

FileDigest SequentialFileWriter::finish() {
  ZT_ASSERT(written_ == size_, "writing ", path_, ": ", written_, " bytes of ", size_, " announced");
  if (fill_ > 0) flush_full();
  const int fd = fd_;
  fd_ = -1;  // closed below, whatever happens
  try {
    return {hash_.value(), size_, close_written(fd, direct_, size_, path_)};
  } catch (...) {
    ::close(fd);
    ::unlink(path_.c_str());
    throw;
  }
}

}  // namespace zt
