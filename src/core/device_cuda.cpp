// device_cuda.cpp: core/device.h with the CUDA backend compiled in.
#include <cuda_runtime.h>

#include <atomic>
#include <utility>

#include "core/cuda_check.h"
#include "core/device.h"

namespace zt {

bool cuda_backend_compiled() { return true; }

int cuda_device_count() {
  int n = 0;
  // No driver, no GPU, or a driver older than the runtime: all mean "no usable GPU" here;
  // --device cuda turns that into an error that names the reason.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

CudaDeviceInfo cuda_device_info() {
  cudaDeviceProp p{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  CudaDeviceInfo info;
  info.name = p.name;
  info.major = p.major;
  info.minor = p.minor;
  info.multiprocessors = p.multiProcessorCount;
  ZT_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

DeviceKind resolve_device(std::string_view flag) {
  if (flag == "cpu") return DeviceKind::cpu;
  if (flag != "cuda" && flag != "auto")
    throw Error(str_cat("--device ", quote(flag), " is not a device: use cpu, cuda or auto"));
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    if (flag == "auto") return DeviceKind::cpu;
    throw Error(str_cat("--device cuda: no usable GPU (", e == cudaSuccess ? "none found" : cudaGetErrorString(e),
                        "): check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --device cpu"));
  }
  return DeviceKind::cuda;
}

namespace {
std::atomic<size_t> g_allocated{0}, g_peak{0}, g_cap{0};
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

void set_device_memory_cap(size_t bytes) { g_cap = bytes; }

size_t device_allocated_bytes() { return g_allocated.load(); }
size_t device_allocated_peak() { return g_peak.load(); }
void reset_device_allocated_peak() { g_peak = g_allocated.load(); }

void* device_alloc(size_t bytes, std::string_view what) {
  const size_t cap = g_cap.load(), held = g_allocated.load();
  if (cap > 0 && held + bytes > cap)
    throw Error(str_cat("GPU memory cap reached allocating ", what, ": ", int64_t(bytes / kMiB), " MiB asked, ",
                        int64_t(held / kMiB), " MiB held of the ", int64_t(cap / kMiB),
                        " MiB --max_device_memory allows: raise it, offload the optimizer (--offload_optimizer "
                        "cpu), lower the batch or turn on --gradient_checkpointing (ztrain estimate-memory "
                        "--device cuda shows the budget)"));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaSuccess) {
    ZT_CUDA_CHECK(cudaMemset(p, 0, bytes));
    const size_t now = g_allocated += bytes;
    size_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    return p;
  }
  cudaGetLastError();
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  cudaGetLastError();
  const double mib = 1024.0 * 1024.0;
  throw Error(str_cat("GPU out of memory allocating ", what, ": ", int64_t(bytes / mib), " MiB asked, ",
                      int64_t(free_b / mib), " MiB free of ", int64_t(total_b / mib),
                      " MiB: lower --per_device_train_batch_size or --max_seq_length, or turn on "
                      "--gradient_checkpointing (ztrain estimate-memory --device cuda shows the budget)"));
}

void device_free(void* p, size_t bytes) {
  if (!p) return;
  cudaFree(p);  // an error here (device lost) cannot be reported from a destructor
  g_allocated -= bytes;
}

void grow_device_buffer(DeviceBuffer* b, size_t bytes, std::string_view what) {
  if (b->bytes() < bytes) *b = DeviceBuffer(bytes, what);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  ZT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  ZT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void fill_device_zero(void* dst, size_t bytes) { ZT_CUDA_CHECK(cudaMemset(dst, 0, bytes)); }
void copy_device_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows) {
  ZT_CUDA_CHECK(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice));
}
void device_synchronize() { ZT_CUDA_CHECK(cudaDeviceSynchronize()); }

void* pinned_alloc(size_t bytes, std::string_view what) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess) return p;
  cudaGetLastError();
  throw Error(str_cat("cannot lock ", int64_t(bytes / kMiB), " MiB of host memory for ", what,
                      " (cudaHostAlloc): free host memory or raise the locked-memory limit (ulimit -l)"));
}
void pinned_free(void* p, size_t) {
  if (p) cudaFreeHost(p);
}

CopyStream::CopyStream() {
  cudaStream_t s = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreate(&s));  // blocking: ordered against the legacy default stream
  stream_ = s;
}
CopyStream::~CopyStream() {
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}
void CopyStream::to_host(void* dst, const void* src, size_t bytes) {
  ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)));
}
void CopyStream::to_device(void* dst, const void* src, size_t bytes) {
  ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)));
}
void CopyStream::mark(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  ZT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_[i]), static_cast<cudaStream_t>(stream_)));
}
void CopyStream::wait(size_t i) { ZT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(events_.at(i)))); }
void CopyStream::synchronize() { ZT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_))); }

}  // namespace zt
