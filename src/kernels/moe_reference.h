// moe_reference.h: the naive mixture-of-experts layer (nn/moe.h), token by token and templated on
// the scalar type, so tests run it in double against finite differences and compare the fast
// kernels (kernels/moe.h: grouping, grouped GEMMs, combine) to it. Never used on the training path.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace zt::ref {

template <class T>
struct MoeRefLayer {
  int C = 0, E = 0, K = 0, F = 0, Fs = 0;
  bool shared_gate = false, renorm = true;
  int64_t capacity = 0;        // > 0: an expert keeps its first `capacity` assignments in token order
  const T* router = nullptr;   // (E, C)
  const T* experts = nullptr;  // per expert: gate (F, C), up (F, C), down (C, F)
  const T* sh_in = nullptr;    // (2 Fs, C): gate then up
  const T* sh_out = nullptr;   // (C, Fs)
  const T* sh_gate = nullptr;  // (1, C)
};

namespace moe_detail {
template <class T>
T dot(const T* a, const T* b, int n) {
  T s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
// out (C) += scale * down (silu(gate x) * up x): one SwiGLU MLP on one token.
template <class T>
void swiglu_mlp(T* out, const T* x, const T* gate, const T* up, const T* down, int C, int F, T scale) {
  std::vector<T> a(static_cast<size_t>(F));
  for (int f = 0; f < F; ++f) {
    const T g = dot(gate + int64_t(f) * C, x, C), u = dot(up + int64_t(f) * C, x, C);
    a[size_t(f)] = g / (T(1) + std::exp(-g)) * u;
  }
  for (int c = 0; c < C; ++c) out[c] += scale * dot(down + int64_t(c) * F, a.data(), F);
}
}  // namespace moe_detail

// y (N, C) from x (N, C); probs (N, E) and lse (N) of the router when given.
template <class T>
void moe_layer_forward(T* y, const T* x, const MoeRefLayer<T>& m, int64_t N, T* probs = nullptr, T* lse = nullptr) {
  using namespace moe_detail;
  const int C = m.C, E = m.E;
  std::vector<int64_t> used(static_cast<size_t>(E), 0);
  std::vector<T> p(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t) {
    const T* xt = x + t * C;
    T* yt = y + t * C;
    std::fill(yt, yt + C, T(0));
    T mx = -1e30, s = 0;
    for (int e = 0; e < E; ++e) p[size_t(e)] = dot(m.router + int64_t(e) * C, xt, C), mx = std::max(mx, p[size_t(e)]);
    for (int e = 0; e < E; ++e) s += std::exp(p[size_t(e)] - mx);
    if (lse) lse[t] = mx + std::log(s);
    for (int e = 0; e < E; ++e) p[size_t(e)] = std::exp(p[size_t(e)] - mx) / s;
    if (probs) std::copy(p.begin(), p.end(), probs + t * E);
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
    T sum = 0;
    for (int k = 0; k < m.K; ++k) sum += p[size_t(order[size_t(k)])];
    for (int k = 0; k < m.K; ++k) {
      const int e = order[size_t(k)];
      if (m.capacity > 0 && used[size_t(e)]++ >= m.capacity) continue;
      const T* W = m.experts + int64_t(e) * 3 * m.F * C;
      const T wk = m.renorm ? p[size_t(e)] / sum : p[size_t(e)];
      swiglu_mlp(yt, xt, W, W + int64_t(m.F) * C, W + 2 * int64_t(m.F) * C, C, m.F, wk);
    }
    if (m.Fs > 0) {
      const T g = m.shared_gate ? T(1) / (T(1) + std::exp(-dot(m.sh_gate, xt, C))) : T(1);
      swiglu_mlp(yt, xt, m.sh_in, m.sh_in + int64_t(m.Fs) * C, m.sh_out, C, m.Fs, g);
    }
  }
}

}  // namespace zt::ref
