// memory.cpp: accounted buffers and /proc-based resident-size readings.
#include "core/memory.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <new>

#include <sched.h>
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

void charge_device(long long delta) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_stats.device_current += delta;
  if (g_stats.device_current > g_stats.device_peak) g_stats.device_peak = g_stats.device_current;
}

constexpr size_t kHuge = size_t(2) << 20;

// Transparent huge pages at fault time are cheap when the kernel has free 2 MiB blocks the
// host still backs (0.1-0.2 ms per page here) and dear when it does not: this VM reports free
// 2 MiB blocks to the host (page_reporting_order 9), which drops them, so zeroing one re-faults
// the host page by page (4.5-5 ms); on other machines a THP fault may compact memory
// synchronously (defrag=madvise). Small pages come first from smaller free fragments, which are
// never reported (about 0.85 ms per 2 MiB). So buffers are faulted in huge pages until several
// in a row each cost more than the small pages they replace (one alone may be the thread being
// preempted); from then on, for the whole process, pages are faulted small and advised
// afterwards, so khugepaged may still collapse them into huge pages in the background during a
// long run. docs/memory.md has the measurements.
constexpr double kSlowHugePageSeconds = 1e-3;
constexpr int kSlowHugePagesInARow = 4;
std::atomic<bool> g_huge_pages_slow{false};

// Zeroes [p, p + bytes) (a multiple of kHuge, kHuge aligned) and faults it in.
void fault_in_large(char* p, size_t bytes) {
  size_t done = 0;
  if (!g_huge_pages_slow.load(std::memory_order_relaxed)) {
    ::madvise(p, bytes, MADV_HUGEPAGE);
    int slow_in_a_row = 0;
    while (done < bytes && slow_in_a_row < kSlowHugePagesInARow) {
      const auto t0 = std::chrono::steady_clock::now();
      std::memset(p + done, 0, kHuge);
      done += kHuge;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      slow_in_a_row = s > kSlowHugePageSeconds ? slow_in_a_row + 1 : 0;
    }
    if (slow_in_a_row == kSlowHugePagesInARow) g_huge_pages_slow.store(true, std::memory_order_relaxed);
    if (done < bytes) ::madvise(p + done, bytes - done, MADV_NOHUGEPAGE);
  }
  if (done < bytes) {
    std::memset(p + done, 0, bytes - done);
    ::madvise(p + done, bytes - done, MADV_HUGEPAGE);
  }
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

MemCharge::MemCharge(size_t bytes, MemCategory cat) : bytes_(bytes), cat_(cat) {
  charge(cat_, static_cast<long long>(bytes_));
}
MemCharge::~MemCharge() {
  if (bytes_) charge(cat_, -static_cast<long long>(bytes_));
}
MemCharge::MemCharge(MemCharge&& o) noexcept : bytes_(o.bytes_), cat_(o.cat_) { o.bytes_ = 0; }
MemCharge& MemCharge::operator=(MemCharge&& o) noexcept {
  if (this != &o) {
    if (bytes_) charge(cat_, -static_cast<long long>(bytes_));
    bytes_ = o.bytes_;
    cat_ = o.cat_;
    o.bytes_ = 0;
  }
  return *this;
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

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, int(::sysconf(_SC_NPROCESSORS_ONLN)));
}

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

Buffer::Buffer(size_t bytes, MemCategory cat, DeviceKind dev) : bytes_(bytes), cat_(cat), dev_(dev) {
  if (bytes == 0) return;
  if (dev == DeviceKind::cuda) {
    data_ = device_alloc(bytes, mem_category_name(cat));
    charge_device(static_cast<long long>(bytes_));
    return;
  }
  // Large blocks are 2 MiB aligned for transparent huge pages (fault_in_large): fewer page
  // faults at start-up (a 124M-parameter run touches ~3 GiB) and fewer TLB misses.
  const bool huge = bytes >= kHuge / 2;
  const size_t align = huge ? kHuge : 64;
  size_t rounded = (bytes + align - 1) / align * align;
  data_ = std::aligned_alloc(align, rounded);
  ZT_CHECK(data_ != nullptr, "out of memory allocating ", format_bytes(bytes), " for ", mem_category_name(cat),
           "; use a smaller batch or model");
  // Touching the pages now makes resident memory match the accounting and keeps
  // page faults out of the first training step.
  if (huge)
    fault_in_large(static_cast<char*>(data_), rounded);
  else
    std::memset(data_, 0, rounded);
  charge(cat_, static_cast<long long>(bytes_));
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (data_ && dev_ == DeviceKind::cuda) {
    device_free(data_, bytes_);
    charge_device(-static_cast<long long>(bytes_));
  } else if (data_) {
    std::free(data_);
    charge(cat_, -static_cast<long long>(bytes_));
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), cat_(o.cat_), dev_(o.dev_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    cat_ = o.cat_;
    dev_ = o.dev_;
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
