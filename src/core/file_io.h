// file_io.h: the few POSIX file operations every writer of ztrain shares: writing a whole
// buffer (short writes and EINTR retried, failures named with the file), fsync of a file or a
// folder, and the atomic whole-file write (temporary name, fsync, rename, fsync of the folder)
// that checkpoints, logs and HF's JSON files rely on.
// It deliberately is not a file abstraction: callers own their descriptors.
#pragma once
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/content_hash.h"

namespace zt {

// Writes n bytes to fd; an Error names path, the system's reason and `hint` (what to do).
void write_all(int fd, const void* p, size_t n, const std::string& path, const char* hint = "check free disk space");
// fsync of a file, or of a folder (so a rename inside it is durable); errors are ignored (best effort).
void fsync_path(const std::string& path, bool is_dir);
// Writes bytes to path atomically (temporary name, fsync, rename, fsync of the folder).
void write_file_atomic(const std::string& path, const std::string& bytes);
// Creates `path` as a new file for writing (flags added to O_WRONLY | O_CREAT | O_EXCL |
// O_NOFOLLOW | O_CLOEXEC): whatever was there (a stale temporary, or a symbolic link planted to
// make ztrain overwrite another file) is unlinked first, never followed. Returns the descriptor, or
// -1 with errno set.
int open_new_file(const std::string& path, int extra_flags = 0, unsigned mode = 0644);
// rename(tmp, path), then fsync of path's folder; an Error names both on failure.
void rename_into_place(const std::string& tmp, const std::string& path);

// Spreads the writes of the SequentialFileWriters of the thread that holds it over `seconds`:
// after each block it writes, the thread sleeps until the share of `total_bytes` written no longer
// runs ahead of the share of the time gone. A flash checkpoint's persist uses it so that its CPU
// (the staging copy, the hash, the kernel's part) is taken from the training threads a little at a
// time instead of from one or two steps. Pacing ends when `*hurry` becomes true (the training loop
// is waiting for the persist).
class WritePacing {
 public:
  WritePacing(uint64_t total_bytes, double seconds, const std::atomic<bool>* hurry);
  ~WritePacing();
  WritePacing(const WritePacing&) = delete;
  WritePacing& operator=(const WritePacing&) = delete;
  // Called by the writers on this thread after each block.
  static void wrote(uint64_t bytes);

 private:
  uint64_t total_, done_ = 0;
  double seconds_;
  const std::atomic<bool>* hurry_;
  std::chrono::steady_clock::time_point t0_;
  WritePacing* outer_;
};

// What a writer knows of the file it wrote: its contents' checksum (content_hash.h's tree) and size, and its inode
// (which tells that file from another one written to the same name later).
struct FileDigest {
  uint64_t hash = 0, size = 0, inode = 0;
};

// Writes a new file of a size known in advance, front to back, and hashes it as it goes (the
// checkpoint's checksum without reading the file back). Where the file system allows it the data
// bypasses the page cache (O_DIRECT through an aligned staging buffer): writing 1.5 GB that way
// took 0.16 s of CPU here against 1.7 s through the page cache, CPU a flash checkpoint's
// background persist would otherwise take from the training threads. finish() pads the last
// block, truncates to the exact size and fsyncs; a writer destroyed unfinished removes the file.
class SequentialFileWriter {
 public:
  SequentialFileWriter(std::string path, uint64_t size);
  ~SequentialFileWriter();
  SequentialFileWriter(const SequentialFileWriter&) = delete;
  SequentialFileWriter& operator=(const SequentialFileWriter&) = delete;
  void write(const void* p, size_t n);
  // The digest; the size written must equal the size announced.
  FileDigest finish();
  bool direct() const { return direct_; }

 private:
  void flush_full();
  std::string path_;
  uint64_t size_, written_ = 0;
  int fd_ = -1;
  bool direct_ = false;
  std::unique_ptr<unsigned char, void (*)(void*)> buf_;
  size_t fill_ = 0;
  TreeChecksumStream hash_;
};

// A new file made whole or not at all: `write(tmp)` writes it under a temporary name beside path
// (and returns its digest), which is then renamed to path and the folder fsynced.
template <typename Write>
FileDigest write_renamed(const std::string& path, Write write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const FileDigest d = write(tmp);
  rename_into_place(tmp, path);
  return d;
}

// Writes a new file of `size` bytes from `image`, an image of it in memory (a flash snapshot's),
// with no copy: O_DIRECT from the image itself where the file system allows it, so `image` must be
// 4096-byte aligned and readable up to the next multiple of 4096 past `size` (those bytes are cut
// off again). `checksum`, the image's tree checksum computed when it was made, goes into the digest.
// Fsynced; an error removes the file. Paced by the thread's WritePacing like the writer above.
FileDigest write_image_file(const std::string& path, const void* image, uint64_t size, uint64_t checksum);

}  // namespace zt
