// device_none.cpp: core/device.h in a binary built without the CUDA backend: the CPU is the
// only device, and asking for a GPU says how to get one.
#include "core/device.h"

#include "core/error.h"

namespace zt {

namespace {
[[noreturn]] void no_backend() {
  throw Error(
      "this ztrain was built without the CUDA backend: install the CUDA toolkit (nvcc, cuBLASLt) "
      "and rebuild (README, section GPU; docs/gpu.md), or use --device cpu");
}
}  // namespace

bool cuda_backend_compiled() { return false; }
int cuda_device_count() { return 0; }
CudaDeviceInfo cuda_device_info() { no_backend(); }

DeviceKind resolve_device(std::string_view flag) {
  if (flag == "cpu" || flag == "auto") return DeviceKind::cpu;
  if (flag == "cuda") no_backend();
  throw Error(str_cat("--device ", quote(flag), " is not a device: use cpu, cuda or auto"));
}

void* device_alloc(size_t, std::string_view) { no_backend(); }
void device_free(void*, size_t) {}
size_t device_allocated_bytes() { return 0; }
size_t device_allocated_peak() { return 0; }
void reset_device_allocated_peak() {}
void set_device_memory_cap(size_t) {}
void* pinned_alloc(size_t, std::string_view) { no_backend(); }
void pinned_free(void*, size_t) {}
CopyStream::CopyStream() { no_backend(); }
CopyStream::~CopyStream() = default;
void CopyStream::to_host(void*, const void*, size_t) { no_backend(); }
void CopyStream::to_device(void*, const void*, size_t) { no_backend(); }
void CopyStream::mark(size_t) { no_backend(); }
void CopyStream::wait(size_t) { no_backend(); }
void CopyStream::synchronize() { no_backend(); }
void grow_device_buffer(DeviceBuffer*, size_t, std::string_view) { no_backend(); }
void copy_to_device(void*, const void*, size_t) { no_backend(); }
void copy_to_host(void*, const void*, size_t) { no_backend(); }
void fill_device_zero(void*, size_t) { no_backend(); }
void copy_device_rows(void*, size_t, const void*, size_t, size_t, size_t) { no_backend(); }
void device_synchronize() {}

}  // namespace zt
