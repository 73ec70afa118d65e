// gemm_peak.cpp: see gemm_peak.h.
#include "train/gemm_peak.h"

#include <omp.h>

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

std::string machine_summary() {
  return "CPU " + kernels::cpu_model_name() + ", kernels " + kernels::isa_current() + ", GEMMs oneDNN " +
         kernels::gemm_isa();
}

}  // namespace zt
