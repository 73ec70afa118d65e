// planner_measure.cpp: the two speeds `ztrain plan` measures in one process (planner.h).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/profile.h"
#include "kernels/gemm.h"
#include "models/layout.h"
#include "plan/planner.h"

namespace zt::parallel {

namespace {
using Clock = std::chrono::steady_clock;

// Runs f on one thread until `seconds` have passed (at least twice after a warm-up call);
// returns the calls per second.
template <class F>
double rate_one_thread(double seconds, F f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  f();  // warm-up: first-touch pages, oneDNN's kernel selection
  int calls = 0;
  const auto t0 = Clock::now();
  double t = 0;
  while (calls < 2 || t < seconds) {
    f();
    ++calls;
    t = prof::seconds_since(t0);
  }
  omp_set_num_threads(saved);
  return calls / t;
}
}  // namespace

// The block's MLP input GEMM, (rows, C) x (C, F): the largest share of a step's FLOPs.
GemmSpeed measure_gemm_speed(const ModelConfig& cfg, double seconds) {
  const int64_t k = cfg.n_embd, n = cfg.ffn;
  auto gflops = [&](int64_t m) {
    std::vector<float> a(size_t(m * k), 0.5f), b(size_t(k * n), 0.25f), c(size_t(m * n), 0.f);
    const double per_s = rate_one_thread(
        seconds, [&] { kernels::gemm(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c.data(), n); });
    return per_s * 2.0 * double(m) * double(n) * double(k) / 1e9;
  };
  const double big = gflops(2048), small = gflops(128);
  // rate(r) = peak r / (r + r0) through both points; r0 = 0 when the small one is not slower.
  const double q = std::min(1.0, small / big);
  const double r0 = q >= 1 ? 0.0 : 128.0 * 2048.0 * (1 - q) / std::max(1e-9, 2048.0 * q - 128.0);
  return {big * (2048.0 + r0) / 2048.0, std::clamp(r0, 0.0, 4096.0)};
}

double measure_copy_gbps(double seconds) {
  const size_t bytes = size_t(64) << 20;  // well beyond the caches
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double per_s = rate_one_thread(seconds, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  return per_s * 2.0 * double(bytes) / 1e9;  // read + write
}

}  // namespace zt::parallel
