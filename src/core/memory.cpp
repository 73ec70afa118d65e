// memory.cpp: accounted buffers and /proc-based resident-size readings.
#include "core/memory.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <new>

#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"

namespace zt {
namespace {
std::mutex g_mu;
MemStats g_stats;

void charge(MemCategory c, long long delta) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto i = static_cast<size_t>(c);
  g_stats.current[i] += delta;
  g_stats.total_current += delta;
  if (g_stats.current[i] > g_stats.peak[i]) g_stats.peak[i] = g_stats.current[i];
  if (g_stats.total_current > g_stats.total_peak) g_stats.total_peak = g_stats.total_current;
}

size_t read_kb(const char* file, const char* key) {
  FILE* f = std::fopen(file, "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0, n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0) kb = std::strtoull(line + n + 1, nullptr, 10);
  std::fclose(f);
  return kb * 1024;
}
}  // namespace

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::parameters:
      return "parameters";
    case MemCategory::gradients:
      return "gradients";
    case MemCategory::optimizer_state:
      return "optimizer_state";
    case MemCategory::activations:
      return "activations";
    case MemCategory::temporary:
      return "temporary";
    case MemCategory::data:
      return "data";
    default:
      return "?";
  }
}

MemStats mem_stats() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_stats;
}

size_t peak_rss_bytes() { return read_kb("/proc/self/status", "VmHWM:"); }
size_t current_rss_bytes() { return read_kb("/proc/self/status", "VmRSS:"); }

namespace {
// A cgroup file holding one number of bytes; -1 when absent or "max" (no limit).
int64_t read_cgroup_bytes(const char* file) {
  FILE* f = std::fopen(file, "r");
  if (!f) return -1;
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  char* end = nullptr;
  const unsigned long long v = ok ? std::strtoull(buf, &end, 10) : 0;
  return ok && end != buf && v < (1ull << 60) ? int64_t(v) : -1;  // v1 spells "no limit" as ~2^63
}
}  // namespace

int64_t available_memory_bytes(std::string* source) {
  const size_t kb_avail = read_kb("/proc/meminfo", "MemAvailable:");
  int64_t avail = kb_avail ? int64_t(kb_avail) : -1;
  if (source) *source = "MemAvailable in /proc/meminfo";
  // In a container the cgroup's limit is what the kernel enforces; MemAvailable is the host's.
  for (auto [limit_file, usage_file] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const int64_t limit = read_cgroup_bytes(limit_file), used = read_cgroup_bytes(usage_file);
    if (limit < 0 || used < 0) continue;
    if (avail < 0 || limit - used < avail) {
      avail = std::max<int64_t>(0, limit - used);
      if (source) *source = std::string("the cgroup limit ") + limit_file + " minus its usage";
    }
    break;
  }
  return avail;
}

Buffer::Buffer(size_t bytes, MemCategory cat) : bytes_(bytes), cat_(cat) {
  if (bytes == 0) return;
  // Large blocks are 2 MiB aligned and advised for transparent huge pages: on a VM a
  // 4 KiB page fault costs microseconds, and a 124M-parameter run touches ~3 GiB, so
  // huge pages cut start-up by seconds (and TLB misses during the run).
  constexpr size_t kHuge = size_t(2) << 20;
  const bool huge = bytes >= kHuge / 2;
  const size_t align = huge ? kHuge : 64;
  size_t rounded = (bytes + align - 1) / align * align;
  data_ = std::aligned_alloc(align, rounded);
  ZT_CHECK(data_ != nullptr, "out of memory allocating ", format_bytes(bytes), " for ", mem_category_name(cat),
           "; use a smaller batch or model");
  if (huge) ::madvise(data_, rounded, MADV_HUGEPAGE);
  // Touching the pages now makes resident memory match the accounting and keeps
  // page faults out of the first training step.
  std::memset(data_, 0, rounded);
  charge(cat_, static_cast<long long>(bytes_));
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (data_) {
    std::free(data_);
    charge(cat_, -static_cast<long long>(bytes_));
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), cat_(o.cat_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    cat_ = o.cat_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

std::string format_bytes(double b) {
  char s[32];
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(s, sizeof s, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024)
    std::snprintf(s, sizeof s, "%.1f MiB", b / (1024.0 * 1024));
  else
    std::snprintf(s, sizeof s, "%.0f KiB", b / 1024.0);
  return s;
}

}  // namespace zt
