// gemm_peak.h: the GEMM peak that MFU is reported against, measured on this machine
// (docs/observability.md#mfu). A short calibration (square sgemm, or oneDNN's bf16 matmul for
// --bf16 where the CPU has it) at the run's thread count, cached per CPU model, kernel and
// GEMM ISA, dtype and thread count in a JSON file, so only the first run on a machine pays
// for it (about a second). Not here: deciding where the cache lives (apps/ passes the folder).
#pragma once
#include <string>

#include "core/tensor.h"

namespace zt {

struct GemmPeak {
  double gflops = 0;
  std::string source;  // "given (--peak_gflops)", "measured", "cached in <file>"
  std::string what;    // "fp32 sgemm" or "bf16 matmul" or "fp32 sgemm on widened bf16"
  // bf16 on a CPU without bf16 arithmetic: the widened bf16 GEMM's speed over fp32 sgemm's
  // (both measured or cached), which the start-up block reports as the cost; 0 otherwise.
  double widened_ratio = 0;
};

// The peak of a run: --peak_gflops when given (> 0), else measured or cached as above; a bf16
// run on a CPU without bf16 arithmetic also gets the fp32 peak, so its cost can be said.
GemmPeak gemm_peak_for_run(double given_gflops, DType t, int threads, const std::string& cache_dir);

// The peak for compute dtype t at `threads` OpenMP threads. cache_dir "" = measure, keep nothing.
// A damaged cache file is ignored and rewritten.
GemmPeak gemm_peak_measured(DType t, int threads, const std::string& cache_dir);

// The GPU's peak for compute dtype t: --peak_gflops when given (> 0), else measured in about a
// tenth of a second (cuBLASLt, 8192^3 in bf16 or 4096^3 in fp32, median of 5 after 2 warm-ups;
// the figure docs/gpu.md's MFU is against). Throws without the CUDA backend.
GemmPeak gpu_gemm_peak(double given_gflops, DType t);

// One line for the start-up block and the results: CPU model, kernel ISA, GEMM ISA.
std::string machine_summary();

}  // namespace zt
