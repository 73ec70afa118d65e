// async_file.h: a scratch file read and written asynchronously with io_uring (liburing), the
// disk side of offload (parallel/offload_engine.cpp) and of `ztrain bench-disk`. Requests are
// byte ranges of 4 KiB-aligned host buffers at 4 KiB-aligned offsets (O_DIRECT: the page cache
// neither holds the data nor counts against the process), cut into block_size pieces of which at
// most queue_depth are in flight (DeepSpeed's `aio` block means the same numbers). One I/O thread
// drives the ring, so the queue is refilled while the caller computes; a caller waits on the
// ticket a request returned.
// The file is unlinked as soon as it is open: it is scratch, and disappears when the process
// ends, however it ends. It deliberately is not a checkpoint writer (those are atomic and
// fsynced, core/file_io.h).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace zt {

// DeepSpeed's `aio` block (deepspeed/runtime/swap_tensor/aio_config.py), its defaults.
struct AioOptions {
  int64_t block_size = 1 << 20;  // bytes per request
  int queue_depth = 8;           // requests in flight
  int thread_count = 1;          // I/O threads (one ring per file here: only 1 is accepted)
  bool single_submit = false;    // one system call per request instead of one per batch
  bool overlap_events = true;    // refill as each request completes (false: when all have)
};
// Throws an Error naming the key (aio.block_size, ...) when a value cannot be used.
void check_aio_options(const AioOptions& o);

// What a file moved, for reports: bytes and the seconds during which at least one request was
// in flight (bytes / busy seconds is the achieved bandwidth).
struct AioStats {
  int64_t bytes_read = 0, bytes_written = 0;
  double busy_seconds = 0;
};

class AsyncFile {
 public:
  static constexpr int64_t kAlign = 4096;  // O_DIRECT's alignment of buffers, sizes and offsets
  using Ticket = uint64_t;

  // A new scratch file in directory `dir` (which must exist and be writable: else an Error
  // naming it and `what`, the flag or key that gave it), named after `stem` and the process id.
  AsyncFile(const std::string& dir, const std::string& stem, const AioOptions& o, const std::string& what);
  ~AsyncFile();
  AsyncFile(const AsyncFile&) = delete;
  AsyncFile& operator=(const AsyncFile&) = delete;

  // Allocates the file's blocks now (fallocate), so a disk without room fails here, at start,
  // with one line naming the sizes, rather than in the middle of a step.
  void reserve(int64_t bytes);
  Ticket read(void* dst, int64_t bytes, int64_t offset);
  Ticket write(const void* src, int64_t bytes, int64_t offset);
  // Blocks until the request is done; an I/O error (a full disk, a file-size limit) is an Error.
  void wait(Ticket t);
  void wait_all();
  // Whether the request has completed (without waiting; an error is reported by wait).
  bool done(Ticket t) const;

  const std::string& path() const { return path_; }
  bool direct() const { return direct_; }  // O_DIRECT (false: the file system refused it)
  AioStats stats() const;
  const AioOptions& options() const { return opt_; }

 private:
  struct Piece {
    Ticket ticket;
    bool write;
    char* buf;
    int64_t bytes, offset;
  };
  Ticket submit(bool write, char* buf, int64_t bytes, int64_t offset);
  void run();  // the I/O thread
  void fail(const Piece& p, int err);

  AioOptions opt_;
  std::string path_;
  int fd_ = -1;
  bool direct_ = true;
  void* ring_ = nullptr;  // io_uring, opaque here so liburing stays out of the header

  mutable std::mutex mu_;
  std::condition_variable cv_, work_cv_;
  std::deque<Piece> queue_;
  std::map<Ticket, int64_t> pending_;  // ticket -> pieces not yet complete
  std::map<Ticket, std::string> errors_;
  Ticket next_ = 1;
  bool stop_ = false;
  AioStats stats_;
  std::thread thread_;
};

// The disk's raw bandwidth through the same path (`ztrain bench-disk`): writes then reads
// `bytes` in `request` sized requests kept in flight through one AsyncFile.
struct DiskBench {
  // mixed: reads of one half interleaved with writes of the other, as offload's step moves them
  // (bytes read + written over the time).
  double write_gbps = 0, read_gbps = 0, mixed_gbps = 0;
  bool direct = true;
};
DiskBench bench_disk(const std::string& dir, int64_t bytes, int64_t request, const AioOptions& o);

}  // namespace zt
