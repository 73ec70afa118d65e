// moe.cpp: see moe.h. Rows (tokens, grouped rows) run in parallel; each row's sums run in a
// fixed order, so the results do not depend on the thread count.
#include "kernels/moe.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gemm.h"

namespace zt::kernels {

void moe_router_forward(float* probs, int32_t* idx, float* w, float* lse, const float* logits, const MoeDims& d,
                        bool renorm) {
  const int E = d.E, K = d.K;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.N; ++t) {
    const float* z = logits + t * E;
    float* p = probs + t * E;
    float m = z[0];
    for (int e = 1; e < E; ++e) m = std::max(m, z[e]);
    double s = 0;
    for (int e = 0; e < E; ++e) s += std::exp(double(z[e] - m));
    for (int e = 0; e < E; ++e) p[e] = float(std::exp(double(z[e] - m)) / s);
    lse[t] = float(double(m) + std::log(s));
    // Top-k by repeated selection: K is small (2..8), and the order (descending, lower index on
    // ties) is what torch.topk gives on distinct values.
    int32_t* ix = idx + t * K;
    float* wt = w + t * K;
    double sum = 0;
    for (int k = 0; k < K; ++k) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int j = 0; j < k; ++j) taken |= ix[j] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      ix[k] = best;
      wt[k] = p[best];
      sum += p[best];
    }
    if (renorm)
      for (int k = 0; k < K; ++k) wt[k] = float(double(wt[k]) / sum);
  }
}

void moe_router_backward(float* dlogits, const float* dw, const float* probs, const int32_t* idx, const float* w,
                         const float* lse, const float* dprob, float z_grad, const MoeDims& d, bool renorm) {
  const int E = d.E, K = d.K;
#pragma omp parallel
  {
    std::vector<double> dp(static_cast<size_t>(E));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < d.N; ++t) {
      const float* p = probs + t * E;
      const int32_t* ix = idx + t * K;
      const float* g = dw + t * K;
      for (int e = 0; e < E; ++e) dp[size_t(e)] = dprob ? dprob[e] : 0.0;
      // w_k = s_k / S (renorm): dL/ds_k = (g_k - sum_j g_j w_j) / S; S = sum of the chosen p.
      double S = 0, gw = 0;
      for (int k = 0; k < K; ++k) S += p[ix[k]], gw += double(g[k]) * w[t * K + k];
      for (int k = 0; k < K; ++k) dp[size_t(ix[k])] += renorm ? (g[k] - gw) / S : double(g[k]);
      double pdp = 0;
      for (int e = 0; e < E; ++e) pdp += p[e] * dp[size_t(e)];
      // d lse^2 / dz_e = 2 lse p_e.
      const double zg = double(z_grad) * 2.0 * lse[t];
      float* out = dlogits + t * E;
      for (int e = 0; e < E; ++e) out[e] = float(p[e] * (dp[size_t(e)] - pdp) + zg * p[e]);
    }
  }
}

int64_t moe_group_by_expert(int32_t* counts, int32_t* offsets, int32_t* token_of, int32_t* slot_of, const int32_t* idx,
                            const MoeDims& d, int64_t capacity) {
  const int E = d.E, K = d.K;
  const int64_t NK = d.N * K;
  std::vector<int64_t> wanted(static_cast<size_t>(E), 0);
  for (int64_t a = 0; a < NK; ++a) ++wanted[size_t(idx[a])];
  int64_t dropped = 0;
  offsets[0] = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t kept = capacity > 0 ? std::min(wanted[size_t(e)], capacity) : wanted[size_t(e)];
    dropped += wanted[size_t(e)] - kept;
    counts[e] = int32_t(kept);
    offsets[e + 1] = int32_t(offsets[e] + kept);
  }
  // Stable: assignments are visited in (t, k) order, so each expert's rows keep token order and
  // under a capacity the earliest tokens stay (Switch Transformer's priority).
  std::vector<int64_t> next(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) next[size_t(e)] = offsets[e];
  for (int64_t a = 0; a < NK; ++a) {
    const int e = idx[a];
    if (next[size_t(e)] < offsets[e + 1]) {
      slot_of[a] = int32_t(next[size_t(e)]);
      token_of[next[size_t(e)]++] = int32_t(a / K);
    } else {
      slot_of[a] = -1;
    }
  }
  return dropped;
}

void moe_gather(float* xp, const float* x, const int32_t* token_of, int64_t R, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) std::memcpy(xp + r * C, x + int64_t(token_of[r]) * C, size_t(C) * sizeof(float));
}

void moe_gather_backward(float* dx, const float* dxp, const int32_t* slot_of, const MoeDims& d) {
  const int C = d.C, K = d.K;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.N; ++t)
    for (int k = 0; k < K; ++k) {
      const int32_t s = slot_of[t * K + k];
      if (s < 0) continue;
      const float* g = dxp + int64_t(s) * C;
      float* o = dx + t * C;
      for (int c = 0; c < C; ++c) o[c] += g[c];
    }
}

void moe_combine(float* y, const float* yp, const float* w, const int32_t* slot_of, const MoeDims& d) {
  const int C = d.C, K = d.K;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.N; ++t) {
    float* o = y + t * C;
    std::memset(o, 0, size_t(C) * sizeof(float));
    for (int k = 0; k < K; ++k) {
      const int32_t s = slot_of[t * K + k];
      if (s < 0) continue;
      const float wk = w[t * K + k];
      const float* r = yp + int64_t(s) * C;
      for (int c = 0; c < C; ++c) o[c] += wk * r[c];
    }
  }
}

void moe_combine_backward(float* dyp, float* dw, const float* dy, const float* yp, const float* w,
                          const int32_t* slot_of, const MoeDims& d) {
  const int C = d.C, K = d.K;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.N; ++t) {
    const float* g = dy + t * C;
    for (int k = 0; k < K; ++k) {
      const int32_t s = slot_of[t * K + k];
      if (s < 0) {
        dw[t * K + k] = 0.f;
        continue;
      }
      const float wk = w[t * K + k];
      const float* r = yp + int64_t(s) * C;
      float* o = dyp + int64_t(s) * C;
      double dot = 0;
      for (int c = 0; c < C; ++c) {
        dot += double(g[c]) * r[c];
        o[c] = wk * g[c];
      }
      dw[t * K + k] = float(dot);
    }
  }
}

namespace {
// f(e, first row, rows) for each expert that has rows.
template <class F>
void for_each_expert(const int32_t* offsets, int E, F f) {
  for (int e = 0; e < E; ++e)
    if (offsets[e + 1] > offsets[e]) f(e, int64_t(offsets[e]), int64_t(offsets[e + 1] - offsets[e]));
}
}  // namespace

void moe_grouped_gemm(const int32_t* offsets, int E, bool trans_b, int64_t n, int64_t k, const float* a, int64_t lda,
                      const float* b, int64_t b_stride, int64_t ldb, float beta, float* c, int64_t ldc) {
  moe_grouped_gemm_typed(DType::f32, offsets, E, trans_b, n, k, a, lda, b, b_stride, ldb, beta, c, ldc);
}

void moe_grouped_wgrad(const int32_t* offsets, int E, int64_t n, int64_t k, const float* dy, int64_t lddy,
                       const float* x, int64_t ldx, float* dw, int64_t dw_stride, int64_t lddw) {
  moe_grouped_wgrad_typed(DType::f32, offsets, E, n, k, dy, lddy, x, ldx, dw, dw_stride, lddw);
}

// One GEMM per expert over its rows (gemm_typed: f32 to gemm(), bf16 to oneDNN's bf16 matmul); oneDNN
// threads each one.
void moe_grouped_gemm_typed(DType t, const int32_t* offsets, int E, bool trans_b, int64_t n, int64_t k, const void* a,
                            int64_t lda, const void* b, int64_t b_stride, int64_t ldb, float beta, float* c,
                            int64_t ldc) {
  const int64_t es = int64_t(dtype_size(t));
  const char* A = static_cast<const char*>(a);
  const char* B = static_cast<const char*>(b);
  for_each_expert(offsets, E, [&](int e, int64_t r0, int64_t rows) {
    gemm_typed(t, false, trans_b, rows, n, k, 1.f, A + r0 * lda * es, lda, B + e * b_stride * es, ldb, beta,
               c + r0 * ldc, ldc);
  });
}

void moe_grouped_wgrad_typed(DType t, const int32_t* offsets, int E, int64_t n, int64_t k, const void* dy, int64_t lddy,
                             const void* x, int64_t ldx, float* dw, int64_t dw_stride, int64_t lddw) {
  const int64_t es = int64_t(dtype_size(t));
  const char* DY = static_cast<const char*>(dy);
  const char* X = static_cast<const char*>(x);
  for_each_expert(offsets, E, [&](int e, int64_t r0, int64_t rows) {
    gemm_typed(t, true, false, n, k, rows, 1.f, DY + r0 * lddy * es, lddy, X + r0 * ldx * es, ldx, 1.f,
               dw + e * dw_stride, lddw);
  });
}

void moe_shared_gate_forward(float* y, const float* o, const float* g, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    const float s = 1.f / (1.f + std::exp(-g[t]));
    for (int c = 0; c < C; ++c) y[t * C + c] += s * o[t * C + c];
  }
}

void moe_shared_gate_backward(float* do_, float* dg, const float* dy, const float* o, const float* g, int64_t N,
                              int C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    const float s = 1.f / (1.f + std::exp(-g[t]));
    double dot = 0;
    for (int c = 0; c < C; ++c) {
      dot += double(dy[t * C + c]) * o[t * C + c];
      do_[t * C + c] = s * dy[t * C + c];
    }
    dg[t] = float(dot * s * (1.0 - s));
  }
}

}  // namespace zt::kernels
