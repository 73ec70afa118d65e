// bench_moe.cpp: the expert GEMMs of an E-expert top-K layer against a dense SwiGLU FFN of the same
// width at the same tokens per expert, in one run (docs/moe.md). Prints one JSON line: the GFLOP/s of
// each and their ratio (the issue asks >= 0.75), for the grouped GEMMs alone (forward: [gate; up] and
// down; backward: both weight gradients and both input gradients; routing perfectly balanced so every
// expert gets the dense FFN's rows) and for the whole layer (nn::Moe forward + backward: router,
// grouping, gather, SwiGLU, combine, on random routing) counted at the same useful FLOPs. The two are
// timed alternately, repeat by repeat, so a machine's drift hits both; the median repeat is reported.
// usage: zt_bench_moe [C F E K tokens_per_expert repeats]   (defaults 512 1408 8 2 256 7)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/memory.h"
#include "core/rng.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/ops.h"
#include "nn/moe.h"

namespace {
using namespace zt;
using clk = std::chrono::steady_clock;

std::vector<float> random_vec(size_t n, uint64_t seed, double scale) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(r.normal() * scale);
  return v;
}

double seconds_of(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }

// One expert's (or the dense FFN's) GEMMs, forward and backward, on rows x (n, C): 6 GEMMs of 2nCF
// (gate/up) or nCF (down) multiply-adds each way.
struct Ffn {
  int64_t C, F;
  std::vector<float> w_in, w_out, dw_in, dw_out;  // (2F, C), (C, F)
  Ffn(int64_t c, int64_t f, int64_t experts)
      : C(c),
        F(f),
        w_in(random_vec(size_t(experts * 2 * f * c), 1, 0.02)),
        w_out(random_vec(size_t(experts * c * f), 2, 0.02)),
        dw_in(w_in.size()),
        dw_out(w_out.size()) {}
};

double dense_pass(Ffn& f, const std::vector<float>& x, int64_t n, std::vector<float>& h, std::vector<float>& a,
                  std::vector<float>& y, std::vector<float>& dh) {
  const auto t0 = clk::now();
  const int64_t C = f.C, F = f.F;
  kernels::gemm(false, true, n, 2 * F, C, 1.f, x.data(), C, f.w_in.data(), C, 0.f, h.data(), 2 * F);
  kernels::swiglu_forward(a.data(), h.data(), n, int(F));
  kernels::gemm(false, true, n, C, F, 1.f, a.data(), F, f.w_out.data(), F, 0.f, y.data(), C);
  // backward with y as its own output gradient
  kernels::gemm(true, false, C, F, n, 1.f, y.data(), C, a.data(), F, 1.f, f.dw_out.data(), F);
  kernels::gemm(false, false, n, F, C, 1.f, y.data(), C, f.w_out.data(), F, 0.f, a.data(), F);
  kernels::swiglu_backward(dh.data(), a.data(), h.data(), n, int(F));
  kernels::gemm(true, false, 2 * F, C, n, 1.f, dh.data(), 2 * F, x.data(), C, 1.f, f.dw_in.data(), C);
  kernels::gemm(false, false, n, C, 2 * F, 1.f, dh.data(), 2 * F, f.w_in.data(), C, 0.f, y.data(), C);
  return seconds_of(t0);
}

// The same on E experts' contiguous row groups through the grouped kernels (weights per expert
// in separate (2F, C) and (C, F) arrays, strides 2FC and CF).
double grouped_pass(Ffn& f, const std::vector<int32_t>& off, int E, const std::vector<float>& x, std::vector<float>& h,
                    std::vector<float>& a, std::vector<float>& y, std::vector<float>& dh) {
  const auto t0 = clk::now();
  const int64_t C = f.C, F = f.F, R = off[size_t(E)], si = 2 * F * C, so = C * F;
  kernels::moe_grouped_gemm(off.data(), E, true, 2 * F, C, x.data(), C, f.w_in.data(), si, C, 0.f, h.data(), 2 * F);
  kernels::swiglu_forward(a.data(), h.data(), R, int(F));
  kernels::moe_grouped_gemm(off.data(), E, true, C, F, a.data(), F, f.w_out.data(), so, F, 0.f, y.data(), C);
  kernels::moe_grouped_wgrad(off.data(), E, C, F, y.data(), C, a.data(), F, f.dw_out.data(), so, F);
  kernels::moe_grouped_gemm(off.data(), E, false, F, C, y.data(), C, f.w_out.data(), so, F, 0.f, a.data(), F);
  kernels::swiglu_backward(dh.data(), a.data(), h.data(), R, int(F));
  kernels::moe_grouped_wgrad(off.data(), E, 2 * F, C, dh.data(), 2 * F, x.data(), C, f.dw_in.data(), si, C);
  kernels::moe_grouped_gemm(off.data(), E, false, C, 2 * F, dh.data(), 2 * F, f.w_in.data(), si, C, 0.f, y.data(), C);
  return seconds_of(t0);
}

// The whole nn::Moe layer, forward and backward, over N tokens.
struct Layer {
  nn::Moe m;
  std::vector<float> router, experts, drouter, dexperts;
  std::vector<double> mem;
  nn::MoeActs acts;
  nn::MoeScratch scratch;
  Layer(int64_t C, int64_t F, int E, int K, int64_t N)
      : router(random_vec(size_t(E * C), 3, 0.02)),
        experts(random_vec(size_t(E * 3 * F * C), 4, 0.02)),
        drouter(router.size()),
        dexperts(experts.size()) {
    m.shape = {int(C), E, K, int(F), 0, false, true, 0.0};
    m.router.in = int(C), m.router.out = E;
    m.router.w = m.router.wc = TensorView::of(router.data(), {E, C});
    m.router.dw = TensorView::of(drouter.data(), {E, C});
    m.experts = TensorView::of(experts.data(), {int64_t(experts.size())});
    m.dexperts = TensorView::of(dexperts.data(), {int64_t(experts.size())});
    Carver size;
    nn::Moe::carve_acts(size, m.shape, N);
    nn::Moe::carve_scratch(size, m.shape, N);
    mem.resize(size.used() / sizeof(double) + 8);
    Carver c(mem.data());
    acts = nn::Moe::carve_acts(c, m.shape, N);
    scratch = nn::Moe::carve_scratch(c, m.shape, N);
  }
  double pass(std::vector<float>& x, std::vector<float>& y, std::vector<float>& dx, int64_t N, int64_t C) {
    const auto t0 = clk::now();
    m.forward(TensorView::of(y.data(), {N, C}), TensorView::of(x.data(), {N, C}), acts);
    m.backward(TensorView::of(dx.data(), {N, C}), TensorView::of(y.data(), {N, C}), TensorView::of(x.data(), {N, C}),
               acts, scratch);
    return seconds_of(t0);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t C = argc > 1 ? std::atoll(argv[1]) : 512, F = argc > 2 ? std::atoll(argv[2]) : 1408;
  const int E = argc > 3 ? std::atoi(argv[3]) : 8, K = argc > 4 ? std::atoi(argv[4]) : 2;
  const int64_t n = argc > 5 ? std::atoll(argv[5]) : 256;
  const int repeats = argc > 6 ? std::atoi(argv[6]) : 7;
  const int64_t R = n * E, N = R / K;  // grouped rows; the layer's tokens (N K = R assignments)
  Ffn dense(C, F, 1), grouped(C, F, E);
  std::vector<float> xd = random_vec(size_t(n * C), 5, 1.0), xg = random_vec(size_t(R * C), 6, 1.0);
  std::vector<float> h(size_t(R * 2 * F)), a(size_t(R * F)), y(size_t(R * C)), dh(size_t(R * 2 * F));
  std::vector<int32_t> off(size_t(E) + 1);
  for (int e = 0; e <= E; ++e) off[size_t(e)] = int32_t(e * n);
  Layer layer(C, F, E, K, N);
  std::vector<float> xl = random_vec(size_t(N * C), 7, 1.0), yl(size_t(N * C)), dxl(size_t(N * C));
  std::vector<double> td, tg, tl;
  for (int r = 0; r <= repeats; ++r) {  // repeat 0 warms up (oneDNN's kernels, the pages)
    const double d = dense_pass(dense, xd, n, h, a, y, dh);
    const double g = grouped_pass(grouped, off, E, xg, h, a, y, dh);
    const double l = layer.pass(xl, yl, dxl, N, C);
    if (r > 0) td.push_back(d), tg.push_back(g), tl.push_back(l);
  }
  // Multiply-adds x 2: forward 3 nCF-sized GEMMs (2nCF + nCF), backward twice that.
  const double flops_dense = 2.0 * 9.0 * double(n) * C * F, flops_moe = flops_dense * E;
  const double gd = flops_dense / median(td) / 1e9, gg = flops_moe / median(tg) / 1e9;
  const double gl = flops_moe / median(tl) / 1e9;
  std::printf(
      "{\"C\": %lld, \"F\": %lld, \"experts\": %d, \"top_k\": %d, \"tokens_per_expert\": %lld, \"threads\": %d, "
      "\"dense_gflops\": %.2f, \"grouped_gflops\": %.2f, \"grouped_over_dense\": %.3f, \"layer_gflops\": %.2f, "
      "\"layer_over_dense\": %.3f}\n",
      (long long)C, (long long)F, E, K, (long long)n, omp_get_max_threads(), gd, gg, gg / gd, gl, gl / gd);
  return 0;
}
