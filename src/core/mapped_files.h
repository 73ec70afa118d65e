// mapped_files.h: a registry of the files ztrain has memory-mapped, readable from a signal
// handler. Reading a page of a mapping whose file was truncated raises SIGBUS; the handler
// that apps/ installs looks the faulting address up here to name the file in its one error
// line. Registration is optional: an unregistered mapping only makes the message generic.
// It deliberately is not a general map: a few dozen fixed slots, lock-free, no allocation on
// lookup (async-signal-safe), paths cut to 511 bytes.
#pragma once
#include <cstddef>
#include <string>

namespace zt {

// Records [base, base + bytes) as a mapping of path. A full registry records nothing.
void mapped_file_register(const void* base, size_t bytes, const std::string& path);
// Forgets the mapping starting at base (call before munmap).
void mapped_file_unregister(const void* base);
// Async-signal-safe: the path of the registered mapping holding addr, or nullptr.
const char* mapped_file_find(const void* addr);

}  // namespace zt
