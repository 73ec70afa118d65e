// file_io.cpp: see file_io.h.
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

namespace {
constexpr size_t kDirectAlign = 4096;        // O_DIRECT: buffer, offset and length in whole blocks
constexpr size_t kStageBytes = size_t(8) << 20;  // one write per 8 MiB
}  // namespace

SequentialFileWriter::SequentialFileWriter(std::string path, uint64_t size)
    : path_(std::move(path)), size_(size), buf_(nullptr, std::free), hash_(size) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (!direct_) fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);  // tmpfs and others
  ZT_CHECK(fd_ >= 0, "cannot create ", path_, ": ", std::strerror(errno));
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
  const unsigned char* c = buf_.get();
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd_, c + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && direct_ && done == 0) {  // a file system that takes O_DIRECT at open only
      ZT_CHECK(::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT) == 0, "cannot write ", path_, ": ",
               std::strerror(errno));
      direct_ = false;
      n = fill_;
      continue;
    }
    ZT_CHECK(w > 0, "writing ", path_, " failed: ", w < 0 ? std::strerror(errno) : "no progress",
             "; check free disk space");
    done += size_t(w);
  }
  fill_ = 0;
}

void SequentialFileWriter::write(const void* p, size_t n) {
  ZT_ASSERT(written_ + n <= size_, "writing ", path_, ": more bytes than announced");
  hash_.update(p, n);
  written_ += n;
  const unsigned char* c = static_cast<const unsigned char*>(p);
  while (n > 0) {
    const size_t k = std::min(n, kStageBytes - fill_);
    std::memcpy(buf_.get() + fill_, c, k);
    fill_ += k, c += k, n -= k;
    if (fill_ == kStageBytes) flush_full();
  }
}

FileDigest SequentialFileWriter::finish() {
  ZT_ASSERT(written_ == size_, "writing ", path_, ": ", written_, " bytes of ", size_, " announced");
  if (fill_ > 0) flush_full();
  if (direct_) ZT_CHECK(::ftruncate(fd_, off_t(size_)) == 0, "cannot truncate ", path_, ": ", std::strerror(errno));
  ZT_CHECK(::fsync(fd_) == 0, "fsync of ", path_, " failed: ", std::strerror(errno), "; check free disk space");
  struct stat st {};
  ::fstat(fd_, &st);
  ::close(fd_);
  fd_ = -1;
  return {hash_.value(), size_, uint64_t(st.st_ino)};
}

}  // namespace zt
