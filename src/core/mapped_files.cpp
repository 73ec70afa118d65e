// mapped_files.cpp: see mapped_files.h.
#include "core/mapped_files.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

namespace zt {
namespace {

// state: 0 free, 1 being written or cleared (skipped by lookups), 2 ready. A slot's fields are
// written before state becomes 2 (release) and read after seeing 2 (acquire).
struct Slot {
  std::atomic<int> state{0};
  uintptr_t base = 0;
  size_t bytes = 0;
  char path[512] = {};
};
constexpr int kSlots = 64;
Slot g_slots[kSlots];  // process-wide by nature: signals are too

}  // namespace

void mapped_file_register(const void* base, size_t bytes, const std::string& path) {
  for (Slot& s : g_slots) {
    int expect = 0;
    if (!s.state.compare_exchange_strong(expect, 1, std::memory_order_acquire)) continue;
    s.base = reinterpret_cast<uintptr_t>(base);
    s.bytes = bytes;
    const size_t n = std::min(path.size(), sizeof s.path - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = 0;
    s.state.store(2, std::memory_order_release);
    return;
  }
}

void mapped_file_unregister(const void* base) {
  for (Slot& s : g_slots) {
    // base may be read only once the slot is seen ready (acquire): a register in progress on
    // another thread writes it under state 1.
    if (s.state.load(std::memory_order_acquire) != 2 || s.base != reinterpret_cast<uintptr_t>(base)) continue;
    int expect = 2;
    if (!s.state.compare_exchange_strong(expect, 1, std::memory_order_acquire)) continue;
    s.base = 0;
    s.state.store(0, std::memory_order_release);
    return;
  }
}

const char* mapped_file_find(const void* addr) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2 && a >= s.base && a - s.base < s.bytes) return s.path;
  return nullptr;
}

}  // namespace zt
