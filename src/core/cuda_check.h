// cuda_check.h: turning CUDA runtime errors into zt::Error (only files built with the CUDA
// backend include this). The message names the call that failed, CUDA's reason and the
// source line: a failing CUDA call is either the user's machine (no driver, out of memory:
// the message says which) or our bug, and both need the place.
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

namespace zt::cuda_detail {
[[noreturn]] inline void fail(cudaError_t e, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a sticky-free error so later calls start clean
  throw Error(str_cat("CUDA call ", call, " failed: ", cudaGetErrorString(e), " (", file, ":", line, ")"));
}
}  // namespace zt::cuda_detail

#define ZT_CUDA_CHECK(call)                                                                            \
  do {                                                                                                 \
    cudaError_t zt_cuda_err_ = (call);                                                                 \
    if (zt_cuda_err_ != cudaSuccess) ::zt::cuda_detail::fail(zt_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad launch configuration shows here, a fault inside the kernel at
// the next synchronisation (device_synchronize).
#define ZT_CUDA_LAUNCH_CHECK() ZT_CUDA_CHECK(cudaGetLastError())
