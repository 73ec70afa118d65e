// gemm_peak.cpp: see gemm_peak.h.
#include "plan/gemm_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/file_io.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#ifdef ZT_HAVE_CUDA
#include "core/device.h"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#endif

namespace zt {
namespace {

// Square products of this size reach the library's peak on every CPU we met (the size
// bench/gemm_libs.cpp reports as its peak); the best of a few repetitions after one warm-up.
constexpr int64_t kSize = 2048;
constexpr double kMinSeconds = 0.6;

double measure(DType t) {
  const int64_t n = kSize;
  std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n));
  std::vector<uint16_t> a16, b16;
  if (t == DType::bf16) {
    a16.resize(a.size());
    b16.resize(b.size());
    kernels::to_lowp(DType::bf16, a16.data(), a.data(), int64_t(a.size()));
    kernels::to_lowp(DType::bf16, b16.data(), b.data(), int64_t(b.size()));
  }
  auto run = [&] {
    if (t == DType::bf16)
      kernels::gemm_typed(DType::bf16, false, false, n, n, n, 1.f, a16.data(), n, b16.data(), n, 0.f, c.data(), n);
    else
      kernels::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  };
  run();  // warm-up: primitive creation, page faults
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 20 && (rep < 3 || total < kMinSeconds); ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return 2.0 * double(n) * double(n) * double(n) / best * 1e-9;
}

std::string cache_key(DType t, int threads) {
  std::ostringstream k;
  k << kernels::cpu_model_name() << " | kernels " << kernels::isa_current() << " | gemm " << kernels::gemm_isa()
    << " | " << dtype_name(t) << " | threads " << threads;
  return k.str();
}

nlohmann::json read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return nlohmann::json::object();  // damaged: measured again and rewritten
}

}  // namespace

GemmPeak gemm_peak_measured(DType t, int threads, const std::string& cache_dir) {
  const DType gt = t == DType::bf16 ? DType::bf16 : DType::f32;  // fp16 runs fp32 GEMMs
  GemmPeak p;
  p.what = gt == DType::f32 ? "fp32 sgemm" : kernels::gemm_has_bf16() ? "bf16 matmul" : "fp32 sgemm on widened bf16";
  const std::string key = cache_key(gt, threads);
  const std::string path = cache_dir.empty() ? "" : cache_dir + "/gemm_peak.json";
  nlohmann::json cache = path.empty() ? nlohmann::json::object() : read_cache(path);
  const auto it = cache.find(key);
  if (it != cache.end() && it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() > 0) {
    p.gflops = it->get<double>();
    p.source = "cached in " + path;
    return p;
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  p.gflops = measure(gt);
  omp_set_num_threads(saved);
  p.source = "measured now";
  if (!path.empty()) {
    try {
      std::filesystem::create_directories(cache_dir);
      cache[key] = p.gflops;
      write_file_atomic(path, cache.dump(1) + "\n");
      p.source += ", cached in " + path;
    } catch (const std::exception&) {
      // A read-only home is no reason to stop a run: the peak is measured again next time.
    }
  }
  return p;
}

GemmPeak gemm_peak_for_run(double given_gflops, DType t, int threads, const std::string& cache_dir) {
  GemmPeak p;
  if (given_gflops > 0) {
    p.gflops = given_gflops;
    p.what = t == DType::bf16 ? "bf16 GEMM" : "fp32 GEMM";
    p.source = "given by --peak_gflops";
  } else {
    p = gemm_peak_measured(t, threads, cache_dir);
  }
  if (t == DType::bf16 && !kernels::gemm_has_bf16()) {
    const double widened = given_gflops > 0 ? gemm_peak_measured(t, threads, cache_dir).gflops : p.gflops;
    p.widened_ratio = widened / gemm_peak_measured(DType::f32, threads, cache_dir).gflops;
  }
  return p;
}

GemmPeak gpu_gemm_peak(double given_gflops, DType t) {
  GemmPeak p;
  p.what = t == DType::bf16 ? "GPU bf16 GEMM (cuBLASLt)" : "GPU fp32 GEMM (cuBLASLt, no TF32)";
  if (given_gflops > 0) {
    p.gflops = given_gflops;
    p.source = "given by --peak_gflops";
    return p;
  }
#ifdef ZT_HAVE_CUDA
  const int64_t n = t == DType::bf16 ? 8192 : 4096;
  const size_t elems = size_t(n * n);
  DeviceBuffer a(elems * 4, "GEMM peak A"), b(elems * 4, "GEMM peak B"), c(elems * 4, "GEMM peak C");
  // Random-like values, never zeros (a GPU multiplies zeros faster).
  std::vector<float> host(elems);
  for (size_t i = 0; i < elems; ++i) host[i] = float(int64_t((i * 2654435761u) % 2001) - 1000) / 1000.0f;
  copy_to_device(a.data(), host.data(), elems * 4);
  copy_to_device(b.data(), host.data(), elems * 4);
  DeviceBuffer a16, b16;
  const void *pa = a.data(), *pb = b.data();
  if (t == DType::bf16) {
    a16 = DeviceBuffer(elems * 2, "GEMM peak A16");
    b16 = DeviceBuffer(elems * 2, "GEMM peak B16");
    kernels::cuda::to_bf16(a16.as<uint16_t>(), a.as<float>(), int64_t(elems));
    kernels::cuda::to_bf16(b16.as<uint16_t>(), b.as<float>(), int64_t(elems));
    pa = a16.data();
    pb = b16.data();
  }
  std::vector<double> secs;
  for (int i = 0; i < 7; ++i) {
    device_synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    kernels::cuda::gemm(t, false, true, n, n, n, 1.0f, pa, n, pb, n, 0.0f, c.data(), n);
    device_synchronize();
    if (i >= 2) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  p.gflops = 2.0 * double(n) * n * n / secs[secs.size() / 2] / 1e9;
  p.source = "measured";
  return p;
#else
  (void)resolve_device("cuda");  // throws: built without the backend
  return p;
#endif
}

std::string machine_summary() {
  return "CPU " + kernels::cpu_model_name() + ", kernels " + kernels::isa_current() + ", GEMMs oneDNN " +
         kernels::gemm_isa();
}

}  // namespace zt
