// gemm_libs: measures fp32 GEMM throughput of one library on the shapes a GPT-2 124M
// training step issues (forward, grad-input and grad-weight products). Built three
// times (oneDNN, OpenBLAS, BLIS) by scripts/bench_gemm_libs.sh; the numbers choose
// ztrain's GEMM backend (docs/kernels.md). Not part of ztrain itself.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#if defined(USE_DNNL)
#include <oneapi/dnnl/dnnl.h>
static const char* kLib = "onednn";
static void sgemm(bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c) {
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, a, ta ? m : k, b, tb ? k : n, 0.f, c, n);
}
#else
#include <cblas.h>
#if defined(USE_BLIS)
static const char* kLib = "blis";
#else
static const char* kLib = "openblas";
#endif
static void sgemm(bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.f, a,
              ta ? m : k, b, tb ? k : n, 0.f, c, n);
}
#endif

int main(int argc, char** argv) {
  long tokens = argc > 1 ? atol(argv[1]) : 2048;  // B*T
  struct Shape {
    const char* name;
    bool ta, tb;
    long m, n, k;
  };
  const long C = 768, V = 50257;
  std::vector<Shape> shapes = {
      {"qkv fwd", false, false, tokens, 3 * C, C},  {"fc fwd", false, false, tokens, 4 * C, C},
      {"proj fwd", false, false, tokens, C, 4 * C}, {"fc dX", false, true, tokens, C, 4 * C},
      {"fc dW", true, false, C, 4 * C, tokens},     {"lmhead fwd", false, true, 256, V, C},
      {"lmhead dW", true, false, V, C, 256},        {"square 2048", false, false, 2048, 2048, 2048},
  };
  double total_flop = 0, total_s = 0;
  for (auto& s : shapes) {
    std::vector<float> a(s.m * s.k, 0.5f), b(s.k * s.n, 0.25f), c(s.m * s.n);
    sgemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), b.data(), c.data());
    int reps = 0;
    auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    while (el < 0.5) {
      sgemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), b.data(), c.data());
      ++reps;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    double flop = 2.0 * s.m * s.n * s.k * reps;
    total_flop += flop;
    total_s += el;
    printf("%-9s %-12s M=%-6ld N=%-6ld K=%-6ld %7.1f GFLOP/s\n", kLib, s.name, s.m, s.n, s.k, flop / el * 1e-9);
  }
  printf("%-9s %-12s %7.1f GFLOP/s (time-weighted over the shapes)\n", kLib, "overall", total_flop / total_s * 1e-9);
}
