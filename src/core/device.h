// device.h: the device seam's host side. Which device a run computes on (--device cpu | cuda |
// auto), whether the CUDA backend is compiled in and a GPU present, and device memory that is
// freed on every path (RAII). Nothing here includes a CUDA header: the CPU-only build
// (device_none.cpp) and the CUDA build (device_cuda.cpp) implement the same declarations.
// Every failure is a zt::Error whose message names what failed and what to do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zt {

enum class DeviceKind { cpu, cuda };

// True when this binary was built with the CUDA backend (CMake found the toolkit).
bool cuda_backend_compiled();
// GPUs this process can use: 0 without the backend, without a driver or without a GPU. Never throws.
int cuda_device_count();

struct CudaDeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t total_bytes = 0, free_bytes = 0;
};
// Device 0's properties; throws when there is none.
CudaDeviceInfo cuda_device_info();

// --device: "cpu", "cuda" (throws when the backend is missing or no GPU is present), "auto"
// (a GPU when one is present, else the CPU); anything else throws naming the valid values.
DeviceKind resolve_device(std::string_view flag);

// Raw zero-filled GPU memory for core/memory.h's Buffer and the kernels' scratch (`what` names it
// in the out-of-memory error, like DeviceBuffer's), and its release (bytes: what was allocated).
// Every GPU allocation of ztrain goes through these two, so their counters are its GPU memory.
void* device_alloc(size_t bytes, std::string_view what);
void device_free(void* p, size_t bytes);
// Bytes allocated through device_alloc now, and the most at any time (0 without the backend).
size_t device_allocated_bytes();
size_t device_allocated_peak();
// Restarts the peak from what is allocated now (after a measurement's scratch is freed).
void reset_device_allocated_peak();
// --max_device_memory: device_alloc refuses an allocation that would take the bytes held past
// `bytes` (0: no cap, the GPU's own memory is the limit), naming the buffer, like a real OOM.
void set_device_memory_cap(size_t bytes);

// Page-locked host memory, what asynchronous copies need (`what` names it in the error when the
// host cannot lock that much), and its release.
void* pinned_alloc(size_t bytes, std::string_view what);
void pinned_free(void* p, size_t bytes);

// Memory from Alloc, released by Release on every path (RAII, move-only). `what` names the
// buffer in the out-of-memory message (with its size and the free memory), so the user learns
// which buffer did not fit.
template <void* (*Alloc)(size_t, std::string_view), void (*Release)(void*, size_t)>
class OwnedMemory {
 public:
  OwnedMemory() = default;
  OwnedMemory(size_t bytes, std::string_view what) : ptr_(bytes ? Alloc(bytes, what) : nullptr), bytes_(bytes) {}
  ~OwnedMemory() { Release(ptr_, bytes_); }
  OwnedMemory(OwnedMemory&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  OwnedMemory& operator=(OwnedMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  OwnedMemory(const OwnedMemory&) = delete;
  OwnedMemory& operator=(const OwnedMemory&) = delete;
  void* data() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};
// An allocation in GPU memory (device_alloc), and page-locked host memory (pinned_alloc).
using DeviceBuffer = OwnedMemory<device_alloc, device_free>;
using PinnedBuffer = OwnedMemory<pinned_alloc, pinned_free>;

// A stream of copies that overlap host work (ZeRO-Offload: parallel/gpu_engine.cpp). It orders
// against the kernels, which run on the legacy default stream, as a blocking stream does: a copy
// queued here starts after every kernel queued before it, and later kernels wait for it. Host
// pointers must be pinned. mark(i) records point i after what is queued so far; wait(i) blocks
// the host until the copies before it are done.
class CopyStream {
 public:
  CopyStream();
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;
  void to_host(void* dst, const void* src, size_t bytes);
  void to_device(void* dst, const void* src, size_t bytes);
  void mark(size_t i);
  void wait(size_t i);
  void synchronize();

 private:
  void* stream_ = nullptr;
  std::vector<void*> events_;
};

// A scratch buffer kept across calls, grown when a call needs more: cudaFree waits for the whole
// device, so per-call allocations in a step's kernels would serialise the step.
void grow_device_buffer(DeviceBuffer* b, size_t bytes, std::string_view what);

// Synchronous copies on the current stream (host memory may be pageable).
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void fill_device_zero(void* dst, size_t bytes);
// `rows` rows of row_bytes bytes from src (rows src_pitch bytes apart) to dst (dst_pitch apart),
// both in GPU memory.
void copy_device_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows);
// Waits for the device and throws if any earlier launch failed asynchronously.
void device_synchronize();

}  // namespace zt
