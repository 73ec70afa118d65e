// async_file.cpp: see async_file.h.
#include "core/async_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/memory.h"

namespace zt {

void check_aio_options(const AioOptions& o) {
  ZT_CHECK(o.block_size >= AsyncFile::kAlign && o.block_size % AsyncFile::kAlign == 0, "aio.block_size ", o.block_size,
           " must be a positive multiple of ", AsyncFile::kAlign, " bytes (O_DIRECT's alignment)");
  ZT_CHECK(o.queue_depth >= 1 && o.queue_depth <= 4096, "aio.queue_depth ", o.queue_depth, " must be in [1, 4096]");
  ZT_CHECK(o.thread_count == 1, "aio.thread_count ", o.thread_count,
           " is not supported: one I/O thread drives each offload file's io_uring ring (its queue_depth requests are "
           "in flight at once); use 1 and raise aio.queue_depth instead");
}

namespace {
io_uring* ring_of(void* p) { return static_cast<io_uring*>(p); }

std::string errno_text(int err) {
  if (err == ENOSPC) return "no space left on the device (the disk under --nvme_path is full)";
  if (err == EFBIG) return "file too large (a file-size limit, ulimit -f, or the file system's)";
  return std::strerror(err);
}
}  // namespace

AsyncFile::AsyncFile(const std::string& dir, const std::string& stem, const AioOptions& o, const std::string& what)
    : opt_(o) {
  check_aio_options(o);
  struct stat st {};
  ZT_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), what, " ", quote(dir),
           " does not exist or is not a folder; create it (offload files are written there)");
  ZT_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, what, " ", quote(dir),
           " is not writable by this process; choose a folder you can write to");
  path_ = str_cat(dir, dir.ends_with('/') ? "" : "/", stem, ".", ::getpid(), ".swp");
  ::unlink(path_.c_str());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
  if (fd_ < 0 && errno == EINVAL) {  // a file system without O_DIRECT (tmpfs before Linux 6.6)
    direct_ = false;
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  ZT_CHECK(fd_ >= 0, what, " ", quote(dir), ": cannot create the offload file ", quote(path_), ": ",
           std::strerror(errno));
  ::unlink(path_.c_str());  // scratch: gone when the descriptor closes, however the process ends
  auto* ring = new io_uring;
  const int rc = io_uring_queue_init(unsigned(std::max(8, o.queue_depth)), ring, 0);
  if (rc < 0) {
    delete ring;
    ::close(fd_);
    throw Error(
        str_cat("io_uring is not available (", std::strerror(-rc),
                "): the kernel or its seccomp policy refuses io_uring_setup, which offload to disk needs; "
                "check /proc/sys/kernel/io_uring_disabled or run without offload_optimizer/offload_param nvme"));
  }
  ring_ = ring;
  thread_ = std::thread([this] { run(); });
}

AsyncFile::~AsyncFile() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (ring_) {
    io_uring_queue_exit(ring_of(ring_));
    delete ring_of(ring_);
  }
  if (fd_ >= 0) ::close(fd_);
}

void AsyncFile::reserve(int64_t bytes) {
  const int rc = ::posix_fallocate(fd_, 0, off_t(bytes));
  if (rc == 0) return;
  const std::string dir = path_.substr(0, path_.rfind('/'));
  throw Error(str_cat("offload needs ", format_bytes(double(bytes)), " of disk in ", quote(dir),
                      " (optimizer state, masters and offloaded parameters) and cannot have it: ", errno_text(rc),
                      "; free space there or choose another --nvme_path"));
}

AsyncFile::Ticket AsyncFile::read(void* dst, int64_t bytes, int64_t offset) {
  return submit(false, static_cast<char*>(dst), bytes, offset);
}
AsyncFile::Ticket AsyncFile::write(const void* src, int64_t bytes, int64_t offset) {
  return submit(true, static_cast<char*>(const_cast<void*>(src)), bytes, offset);
}

AsyncFile::Ticket AsyncFile::submit(bool write, char* buf, int64_t bytes, int64_t offset) {
  ZT_ASSERT(bytes > 0 && offset >= 0, bytes, " at ", offset);
  if (direct_)
    ZT_ASSERT(reinterpret_cast<uintptr_t>(buf) % kAlign == 0 && bytes % kAlign == 0 && offset % kAlign == 0,
              "unaligned O_DIRECT request");
  std::lock_guard<std::mutex> l(mu_);
  const Ticket t = next_++;
  int64_t n = 0;
  for (int64_t at = 0; at < bytes; at += opt_.block_size, ++n)
    queue_.push_back({t, write, buf + at, std::min(opt_.block_size, bytes - at), offset + at});
  pending_[t] = n;
  work_cv_.notify_one();
  return t;
}

void AsyncFile::wait(Ticket t) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !pending_.count(t); });
  auto e = errors_.find(t);
  if (e == errors_.end()) return;
  const std::string msg = e->second;
  errors_.erase(e);
  throw Error(msg);
}

void AsyncFile::wait_all() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return pending_.empty(); });
  if (errors_.empty()) return;
  const std::string msg = errors_.begin()->second;
  errors_.clear();
  throw Error(msg);
}

bool AsyncFile::done(Ticket t) const {
  std::lock_guard<std::mutex> l(mu_);
  return !pending_.count(t);
}

AioStats AsyncFile::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void AsyncFile::fail(const Piece& p, int err) {
  // Called with mu_ held. The first error of a ticket is the one reported.
  errors_.emplace(p.ticket,
                  str_cat("offload file ", quote(path_), ": ", p.write ? "writing " : "reading ",
                          format_bytes(double(p.bytes)), " at offset ", p.offset, " failed: ", errno_text(err)));
}

// The I/O thread: takes pieces from the queue while fewer than queue_depth are in flight,
// submits them (one system call per batch, or per piece with single_submit), and retires
// completions, resubmitting the rest of a short transfer.
void AsyncFile::run() {
  io_uring* ring = ring_of(ring_);
  std::vector<Piece*> slots;
  int inflight = 0;
  auto busy_since = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (inflight == 0) {
        work_cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (stop_ && queue_.empty()) return;
        busy_since = std::chrono::steady_clock::now();
      }
      // overlap_events false: refill only once everything in flight has completed.
      const bool refill = opt_.overlap_events || inflight == 0;
      while (refill && inflight < opt_.queue_depth && !queue_.empty()) {
        auto* p = new Piece(queue_.front());
        queue_.pop_front();
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        if (p->write)
          io_uring_prep_write(sqe, fd_, p->buf, unsigned(p->bytes), uint64_t(p->offset));
        else
          io_uring_prep_read(sqe, fd_, p->buf, unsigned(p->bytes), uint64_t(p->offset));
        io_uring_sqe_set_data(sqe, p);
        ++inflight;
        if (opt_.single_submit) io_uring_submit(ring);
      }
    }
    if (!opt_.single_submit) io_uring_submit(ring);
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(ring, &cqe);
    if (rc == -EINTR || rc == -EAGAIN) continue;
    if (rc < 0) {  // the ring itself failed: every request still waiting reports it (no throw here)
      std::lock_guard<std::mutex> l(mu_);
      for (const Piece& p : queue_) fail(p, -rc);
      for (auto& [t, n] : pending_)
        errors_.emplace(t, str_cat("offload file ", quote(path_), ": io_uring failed: ", std::strerror(-rc)));
      queue_.clear();
      pending_.clear();
      cv_.notify_all();
      return;
    }
    auto* p = static_cast<Piece*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    --inflight;
    std::lock_guard<std::mutex> l(mu_);
    if (res > 0 && res < p->bytes) {  // short transfer: the rest goes again
      (p->write ? stats_.bytes_written : stats_.bytes_read) += res;
      queue_.push_front({p->ticket, p->write, p->buf + res, p->bytes - res, p->offset + res});
      ++pending_[p->ticket];
    } else if (res < 0 || res == 0) {
      fail(*p, res < 0 ? -res : (p->write ? ENOSPC : EIO));
    } else {
      (p->write ? stats_.bytes_written : stats_.bytes_read) += res;
    }
    if (--pending_[p->ticket] == 0) {
      pending_.erase(p->ticket);
      cv_.notify_all();
    }
    delete p;
    if (inflight == 0 && queue_.empty())
      stats_.busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since).count();
  }
}

DiskBench bench_disk(const std::string& dir, int64_t bytes, int64_t request, const AioOptions& o) {
  bytes = std::max<int64_t>(request, bytes / request * request);
  // One 256 MiB buffer written and read round-robin: the file can be larger than memory.
  const int64_t span = std::max(request, std::min<int64_t>(bytes, int64_t(256) << 20) / request * request);
  Buffer buf(size_t(std::max<int64_t>(span, 1 << 21)), MemCategory::temporary);
  std::memset(buf.data(), 0x5a, buf.bytes());
  AsyncFile f(dir, "ztrain-bench-disk", o, "--path");
  f.reserve(bytes);
  DiskBench r;
  r.direct = f.direct();
  auto time = [&](bool write) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t at = 0; at < bytes; at += request)
      write ? f.write(buf.as<char>() + at % span, request, at) : f.read(buf.as<char>() + at % span, request, at);
    f.wait_all();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return double(bytes) / s / 1e9;
  };
  r.write_gbps = time(true);
  r.read_gbps = time(false);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t half = bytes / 2 / request * request;
  for (int64_t at = 0; at + request <= half; at += request) {
    f.read(buf.as<char>() + at % span, request, at);
    f.write(buf.as<char>() + at % span, request, half + at);
  }
  f.wait_all();
  r.mixed_gbps = double(2 * half) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
  return r;
}

}  // namespace zt
