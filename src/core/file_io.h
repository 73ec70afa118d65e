// file_io.h: the few POSIX file operations every writer of ztrain shares: writing a whole
// buffer (short writes and EINTR retried, failures named with the file), fsync of a file or a
// folder, and the atomic whole-file write (temporary name, fsync, rename, fsync of the folder)
// that checkpoints, logs and HF's JSON files rely on.
// It deliberately is not a file abstraction: callers own their descriptors.
#pragma once
#include <cstddef>
#include <string>

namespace zt {

// Writes n bytes to fd; an Error names path, the system's reason and `hint` (what to do).
void write_all(int fd, const void* p, size_t n, const std::string& path, const char* hint = "check free disk space");
// fsync of a file, or of a folder (so a rename inside it is durable); errors are ignored (best effort).
void fsync_path(const std::string& path, bool is_dir);
// Writes bytes to path atomically (temporary name, fsync, rename, fsync of the folder).
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace zt
