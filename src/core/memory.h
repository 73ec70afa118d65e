// memory.h: byte accounting by category and an aligned, accounted buffer.
// Every large allocation in ztrain goes through Buffer so that the trainer can report
// what it holds per category (parameters, gradients, optimizer state, activations,
// temporaries) and the peak, and so the estimate can be checked against the measured
// resident size. Small bookkeeping (strings, tables) is deliberately not counted.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"
#include "core/tensor.h"

namespace zt {

enum class MemCategory { parameters, gradients, optimizer_state, activations, temporary, data, count };

const char* mem_category_name(MemCategory c);

// Process-wide counters (the only global state in core: allocation is global anyway).
struct MemStats {
  std::array<size_t, static_cast<size_t>(MemCategory::count)> current{};
  std::array<size_t, static_cast<size_t>(MemCategory::count)> peak{};
  size_t total_current = 0;
  size_t total_peak = 0;
  // GPU memory held through Buffer (device kind cuda), all categories together.
  size_t device_current = 0;
  size_t device_peak = 0;
};
MemStats mem_stats();
// Peak resident set size of this process in bytes (VmHWM), 0 where unavailable.
size_t peak_rss_bytes();
size_t current_rss_bytes();
// Memory this process could still get now: MemAvailable, or less when a cgroup limit (a
// container) leaves less; -1 when unknown. source, when given, says which one it is.
int64_t available_memory_bytes(std::string* source = nullptr);
// Cores the calling thread may run on (its affinity: mpirun binds a rank to its cores), at least 1.
int available_cores();

// A 64-byte aligned, zero-initialised block of bytes charged to one category, in host memory
// or (dev = cuda) in GPU memory, where it is charged to MemStats' device counters instead.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, MemCategory cat, DeviceKind dev = DeviceKind::cpu);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  DeviceKind device() const { return dev_; }
  void reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::temporary;
  DeviceKind dev_ = DeviceKind::cpu;
};

// Memory held outside a Buffer (a std::vector a library type owns: QLoRA's NF4 codes) charged to
// a category for as long as this lives, so the memory report counts it.
class MemCharge {
 public:
  MemCharge() = default;
  MemCharge(size_t bytes, MemCategory cat);
  ~MemCharge();
  MemCharge(MemCharge&& o) noexcept;
  MemCharge& operator=(MemCharge&& o) noexcept;
  MemCharge(const MemCharge&) = delete;
  MemCharge& operator=(const MemCharge&) = delete;

 private:
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::temporary;
};

// Carves a planned region into sub-arrays. Run once with a null base to learn the size,
// then again over the real allocation: the same code computes both, so they cannot drift.
class Carver {
 public:
  explicit Carver(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <class T = float>
  T* take(size_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (count * sizeof(T) + 63) / 64 * 64;
    return p;
  }
  // A typed view of `shape` (an empty view when the shape has no elements).
  TensorView take(DType t, Shape shape) {
    const size_t bytes = size_t(shape.numel()) * dtype_size(t);
    void* p = base_ && bytes ? base_ + used_ : nullptr;
    used_ += (bytes + 63) / 64 * 64;
    return TensorView(p, t, shape);
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

std::string format_bytes(double bytes);

}  // namespace zt
