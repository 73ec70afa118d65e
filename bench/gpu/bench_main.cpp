// bench_main.cpp: zt_cuda_bench, the GPU throughput figures of bench/gpu_check.sh, each against
// a ceiling measured in the same run: the bf16 GEMM rate (8192^3 through cuBLASLt) and the
// device-to-device copy bandwidth. Prints one table line per case: name, ms, and TFLOP/s or GB/s
// with the fraction of the measured ceiling. Random inputs (never zeros); median of 10 timed runs
// after 3 warm-ups, timed with CUDA events.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/cross_entropy_cuda.h"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#if __has_include("bench_attention.h")
#include "bench_attention.h"
#define ZT_BENCH_ATTENTION 1
#endif

namespace {

using namespace zt;
namespace kc = zt::kernels::cuda;

double median_ms(const std::function<void()>& f, int reps = 10) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  ZT_CUDA_CHECK(cudaEventCreate(&a));
  ZT_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    ZT_CUDA_CHECK(cudaEventRecord(a));
    f();
    ZT_CUDA_CHECK(cudaEventRecord(b));
    ZT_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Random values straight on the device: a host fill of gigabytes would dominate the bench.
__attribute__((unused)) void fill_random(DeviceBuffer& b, size_t floats, uint32_t seed) {
  std::vector<float> h(std::min<size_t>(floats, size_t(1) << 20));
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : h) {
    s = s * 1664525u + 1013904223u;
    x = float(int32_t(s >> 8) % 2001 - 1000) / 1000.0f;
  }
  for (size_t off = 0; off < floats; off += h.size())
    copy_to_device(b.as<float>() + off, h.data(), std::min(h.size(), floats - off) * sizeof(float));
}

struct Gemm {
  const char* name;
  int64_t m, n, k;
  bool ta, tb;
};

double bench_gemm(FILE* out, const Gemm& g, DType t, double peak_tflops) {
  const size_t es = dtype_size(t);
  DeviceBuffer af(size_t(g.m * g.k) * 4, "A"), bf(size_t(g.k * g.n) * 4, "B"), c(size_t(g.m * g.n) * 4, "C");
  fill_random(af, size_t(g.m * g.k), 1);
  fill_random(bf, size_t(g.k * g.n), 2);
  DeviceBuffer a16(size_t(g.m * g.k) * es, "A16"), b16(size_t(g.k * g.n) * es, "B16");
  const void *pa = af.data(), *pb = bf.data();
  if (t == DType::bf16) {
    kc::to_bf16(a16.as<uint16_t>(), af.as<float>(), g.m * g.k);
    kc::to_bf16(b16.as<uint16_t>(), bf.as<float>(), g.k * g.n);
    pa = a16.data();
    pb = b16.data();
  }
  const int64_t lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
  const double ms =
      median_ms([&] { kc::gemm(t, g.ta, g.tb, g.m, g.n, g.k, 1.0f, pa, lda, pb, ldb, 0.0f, c.data(), g.n); });
  const double tflops = 2.0 * g.m * g.n * g.k / (ms * 1e-3) / 1e12;
  std::fprintf(out, "%-34s %-4s %9.3f ms %8.1f TFLOP/s", g.name, t == DType::bf16 ? "bf16" : "f32", ms, tflops);
  if (peak_tflops > 0) std::fprintf(out, "  %5.1f%% of measured bf16 peak", 100.0 * tflops / peak_tflops);
  std::fprintf(out, "\n");
  return tflops;
}

double bench_copy(FILE* out) {
  const size_t bytes = size_t(4) << 30;
  DeviceBuffer a(bytes, "copy source"), b(bytes, "copy target");
  fill_random(a, bytes / 4, 3);
  const double ms = median_ms([&] { ZT_CUDA_CHECK(cudaMemcpy(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); });
  const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  std::fprintf(out, "%-39s %9.3f ms %8.0f GB/s (read + write): the bandwidth ceiling\n", "device copy 4 GiB", ms, gbs);
  return gbs;
}

void bench_memory_bound(FILE* out, double copy_gbs) {
  const int64_t N = 8 * 1024, C = 768;  // GPT-2 124M, B=8, T=1024
  DeviceBuffer x(N * C * 4, "x"), y(N * C * 4, "y"), w(C * 4, "w"), b(C * 4, "b"), m(N * 4, "m"), r(N * 4, "r");
  fill_random(x, N * C, 4);
  fill_random(w, C, 5);
  fill_random(b, C, 6);
  auto line = [&](const char* name, double bytes, const std::function<void()>& f) {
    const double ms = median_ms(f);
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::fprintf(out, "%-39s %9.3f ms %8.0f GB/s  %5.1f%% of copy\n", name, ms, gbs, 100.0 * gbs / copy_gbs);
  };
  line("layernorm fwd (8192 x 768)", 2.0 * N * C * 4, [&] {
    kc::layernorm_forward(y.as<float>(), m.as<float>(), r.as<float>(), x.as<float>(), w.as<float>(), b.as<float>(), N,
                          int(C), 1e-5f);
  });
  line("gelu fwd (8192 x 3072)", 2.0 * N * C * 4, [&] { kc::gelu_forward(y.as<float>(), x.as<float>(), N * C); });
}

void bench_lm_head(FILE* out, double peak_tflops) {
  const int64_t N = 8 * 1024;
  const int C = 768, V = 50304;
  const int64_t chunk = 2048;
  DeviceBuffer x(N * C * 2, "x"), w(int64_t(V) * C * 2, "w"), xf(N * C * 4, "xf"), wf(int64_t(V) * C * 4, "wf");
  DeviceBuffer dx(N * C * 4, "dx"), dw(int64_t(V) * C * 4, "dw"), scratch(chunk * V * 4, "scratch"),
      dl(chunk * V * 2, "dlogits"), tgt(N * 4, "targets");
  fill_random(xf, N * C, 7);
  fill_random(wf, int64_t(V) * C, 8);
  kc::to_bf16(x.as<uint16_t>(), xf.as<float>(), N * C);
  kc::to_bf16(w.as<uint16_t>(), wf.as<float>(), int64_t(V) * C);
  std::vector<int32_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[i] = int32_t((i * 7919) % V);
  copy_to_device(tgt.data(), t.data(), t.size() * 4);
  kernels::LmHeadCompute k{DType::bf16, x.data(), w.data(), dl.data(), false};
  int64_t count = 0;
  const double ms = median_ms(
      [&] {
        kc::lmhead_ce(dx.as<float>(), dw.as<float>(), xf.as<float>(), wf.as<float>(), tgt.as<int32_t>(),
                      kernels::LmHeadDims{N, C, V, chunk}, 1.0f / N, scratch.as<float>(), &count, &k);
      },
      5);
  const double tflops = 6.0 * N * C * V / (ms * 1e-3) / 1e12;
  std::fprintf(out, "%-39s %9.3f ms %8.1f TFLOP/s  %5.1f%% of measured bf16 peak\n",
               "lm head + CE fwd+bwd (8192, 768, 50304)", ms, tflops, 100.0 * tflops / peak_tflops);
}

}  // namespace

int main() {
  try {
    if (cuda_device_count() == 0) {
      std::printf("zt_cuda_bench: no GPU present\n");
      return 77;
    }
    const CudaDeviceInfo info = cuda_device_info();
    std::printf("device: %s, sm_%d%d, %d SMs, %.1f GiB\n", info.name.c_str(), info.major, info.minor,
                info.multiprocessors, info.total_bytes / 1073741824.0);
    FILE* out = stdout;
    const double copy_gbs = bench_copy(out);
    const double peak =
        bench_gemm(out, {"gemm 8192^3 (the bf16 ceiling)", 8192, 8192, 8192, false, true}, DType::bf16, 0);
    bench_gemm(out, {"gemm 8192^3 fp32 (no TF32)", 8192, 8192, 8192, false, true}, DType::f32, peak);
    // GPT-2 124M at B=8, T=1024: the forward shapes of one block, and a backward weight gradient.
    const Gemm gpt2[] = {{"gpt2 qkv   (8192 x 2304 x 768)", 8192, 2304, 768, false, true},
                         {"gpt2 fc    (8192 x 3072 x 768)", 8192, 3072, 768, false, true},
                         {"gpt2 proj  (8192 x 768 x 3072)", 8192, 768, 3072, false, true},
                         {"gpt2 dW fc (3072 x 768 x 8192)", 3072, 768, 8192, true, false}};
    for (const Gemm& g : gpt2) bench_gemm(out, g, DType::bf16, peak);
    bench_memory_bound(out, copy_gbs);
    bench_lm_head(out, peak);
#ifdef ZT_BENCH_ATTENTION
    bench_attention(out);
#endif
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt_cuda_bench: error: %s\n", e.what());
    return 1;
  }
}
