// gemm_libs: measures fp32 GEMM throughput of one library on the shapes a GPT-2 124M
// training step issues (forward, grad-input and grad-weight products). Built three
// times (oneDNN, OpenBLAS, BLIS) by scripts/bench_gemm_libs.sh; the numbers choose
// ztrain's GEMM backend (docs/kernels.md). Not part of ztrain itself.
// The oneDNN build (zt_gemm_peak) also takes "bf16" as its second argument: the same shapes
// through oneDNN's bf16 matmul (bf16 inputs, fp32 output), the path --bf16 trains on.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#if defined(USE_DNNL)
#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
static const char* kLib_ = "onednn";
static const char* kLib = kLib_;
static bool g_bf16 = false;
static bool g_widened = false;  // bf16 without a oneDNN bf16 matmul (see bf16_matmul)
// bf16 operands made once per shape (from the fp32 test values) and reused.
static void bf16_matmul(bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c) {
  using dt = dnnl::memory::data_type;
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  static dnnl::stream st(eng);
  static long key[5] = {-1, -1, -1, -1, -1};
  static std::vector<uint16_t> a16, b16;
  static dnnl::matmul mm;
  static dnnl::memory am, bm;
  auto to16 = [](const float* x, size_t n, std::vector<uint16_t>& out) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &x[i], 4);
      out[i] = uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
  };
  const dnnl::memory::desc ad({m, k}, dt::bf16, ta ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
  const dnnl::memory::desc bd({k, n}, dt::bf16, tb ? dnnl::memory::dims{1, k} : dnnl::memory::dims{n, 1});
  const dnnl::memory::desc cd({m, n}, dt::f32, dnnl::memory::dims{n, 1});
  if (key[0] != m || key[1] != n || key[2] != k || key[3] != ta || key[4] != tb) {
    to16(a, size_t(m) * k, a16);
    to16(b, size_t(k) * n, b16);
    try {
      mm = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
    } catch (const dnnl::error&) {
      // No bf16 matmul on this CPU (AVX2): time what ztrain does there instead, widening both
      // operands to fp32 on every call and running sgemm (kernels/gemm.cpp).
      if (!g_widened) std::fprintf(stderr, "gemm_libs: oneDNN has no bf16 matmul here; timing widened sgemm\n");
      g_widened = true;
    }
    if (!g_widened) {
      am = dnnl::memory(ad, eng, a16.data());
      bm = dnnl::memory(bd, eng, b16.data());
    }
    key[0] = m, key[1] = n, key[2] = k, key[3] = ta, key[4] = tb;
  }
  if (g_widened) {
    static std::vector<float> a32, b32;
    auto widen = [](const std::vector<uint16_t>& x, std::vector<float>& out) {
      out.resize(x.size());
#pragma omp parallel for simd
      for (size_t i = 0; i < x.size(); ++i) {
        const uint32_t u = uint32_t(x[i]) << 16;
        std::memcpy(&out[i], &u, 4);
      }
    };
    widen(a16, a32);
    widen(b16, b32);
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, a32.data(), ta ? m : k, b32.data(), tb ? k : n, 0.f, c,
               n);
    return;
  }
  dnnl::memory cm(cd, eng, c);
  mm.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  st.wait();
}
static void sgemm(bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c) {
  if (g_bf16) return bf16_matmul(ta, tb, m, n, k, a, b, c);
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
#if defined(USE_DNNL)
  g_bf16 = argc > 2 && std::strcmp(argv[2], "bf16") == 0;
  if (g_bf16) kLib = "onednn-bf16";
#endif
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
    // Each repetition timed alone: the best is the library's speed on this machine (a shared
    // VM's neighbours only ever slow a repetition down); the mean is printed beside it.
    int reps = 0;
    double el = 0, best = 1e30;
    while (el < 0.5 || reps < 3) {
      auto t0 = std::chrono::steady_clock::now();
      sgemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), b.data(), c.data());
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, dt);
      el += dt;
      ++reps;
    }
    const double one = 2.0 * s.m * s.n * s.k;
    total_flop += one * reps;
    total_s += el;
    printf("%-9s %-12s M=%-6ld N=%-6ld K=%-6ld %7.1f GFLOP/s (mean %7.1f)\n", kLib, s.name, s.m, s.n, s.k,
           one / best * 1e-9, one * reps / el * 1e-9);
  }
  printf("%-9s %-12s %7.1f GFLOP/s (time-weighted over the shapes)\n", kLib, "overall", total_flop / total_s * 1e-9);
}
