// ops.cpp: OpenMP-parallel, auto-vectorized implementations of kernels/ops.h.
// Row kernels parallelize over rows; parameter-gradient reductions use per-thread
// partial sums so no two threads write the same address.
// Compiled once per Highway target (kernels/isa.h): the loops are plain C++ that the compiler
// vectorizes for each target's width; the public functions at the end dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/ops.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/fast_math.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace zt::kernels::HWY_NAMESPACE {
namespace {

// Sums per-thread partial column sums into dst (+=).
struct ThreadPartials {
  int threads;
  int C;
  std::vector<float> data;
  ThreadPartials(int nparts, int c) : threads(omp_get_max_threads()), C(c), data(size_t(threads) * nparts * c, 0.f) {}
  float* slot(int part) {
    return data.data() + (size_t(omp_get_thread_num()) * (data.size() / threads)) + size_t(part) * C;
  }
  void reduce_into(float* dst, int part, int nparts) {
    if (!dst) return;  // a frozen weight (LoRA's base) takes no gradient
    for (int t = 0; t < threads; ++t) {
      const float* p = data.data() + size_t(t) * nparts * C + size_t(part) * C;
      for (int c = 0; c < C; ++c) dst[c] += p[c];
    }
  }
};

}  // namespace

void layernorm_forward_impl(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N,
                       int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * C;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += xi[c];
    float m = s / C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += (xi[c] - m) * (xi[c] - m);
    float r = 1.0f / std::sqrt(v / C + eps);
    float* oi = out + i * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) oi[c] = (xi[c] - m) * r * w[c] + b[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

void layernorm_backward_impl(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int C) {
  ThreadPartials part(2, C);
#pragma omp parallel
  {
    float* pw = part.slot(0);
    float* pb = part.slot(1);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* xi = x + i * C;
      const float* gi = dout + i * C;
      float m = mean[i], r = rstd[i];
      float sd = 0.f, sdx = 0.f;
#pragma omp simd reduction(+ : sd, sdx)
      for (int c = 0; c < C; ++c) {
        float xh = (xi[c] - m) * r;
        float dn = gi[c] * w[c];
        sd += dn;
        sdx += dn * xh;
      }
      sd /= C;
      sdx /= C;
      float* dxi = dx + i * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        float xh = (xi[c] - m) * r;
        float dn = gi[c] * w[c];
        dxi[c] += r * (dn - sd - xh * sdx);
        pw[c] += gi[c] * xh;
        pb[c] += gi[c];
      }
    }
  }
  part.reduce_into(dw, 0, 2);
  part.reduce_into(db, 1, 2);
}

void rmsnorm_forward_impl(float* out, float* rstd, const float* x, const float* w, int64_t N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += xi[c] * xi[c];
    float r = 1.0f / std::sqrt(v / C + eps);
    float* oi = out + i * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) oi[c] = xi[c] * r * w[c];
    rstd[i] = r;
  }
}

void rmsnorm_backward_impl(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int C) {
  ThreadPartials part(1, C);
#pragma omp parallel
  {
    float* pw = part.slot(0);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* xi = x + i * C;
      const float* gi = dout + i * C;
      float r = rstd[i];
      float sdx = 0.f;
#pragma omp simd reduction(+ : sdx)
      for (int c = 0; c < C; ++c) sdx += gi[c] * w[c] * xi[c] * r;
      sdx /= C;
      float* dxi = dx + i * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        float xh = xi[c] * r;
        dxi[c] += r * (gi[c] * w[c] - xh * sdx);
        pw[c] += gi[c] * xh;
      }
    }
  }
  part.reduce_into(dw, 0, 1);
}

namespace {
constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluK = 0.044715f;
}  // namespace

void gelu_forward_impl(float* out, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    out[i] = 0.5f * v * (1.0f + fast_tanh(kGeluS * (v + kGeluK * v * v * v)));
  }
}

void gelu_backward_impl(float* dx, const float* dout, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kGeluS * (v + kGeluK * v * v * v);
    // sech^2(u) = 4e / (e+1)^2 with e = exp(-2|u|) in (0, 1]: exact where 1 - tanh^2 would
    // cancel, and never overflows (with exp(+2u), 4e / (e+1)^2 was inf / inf = NaN for v > ~10).
    float e = fast_exp(-2.0f * std::fabs(u)), r = 1.0f / (e + 1.0f);
    float t = std::copysign((1.0f - e) * r, u);
    float sech2 = 4.0f * e * r * r;
    float du = kGeluS * (1.0f + 3.0f * kGeluK * v * v);
    dx[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * v * sech2 * du);
  }
}

void swiglu_forward_impl(float* out, const float* x, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = x + i * 2 * F;
    const float* u = g + F;
    float* o = out + i * F;
#pragma omp simd
    for (int f = 0; f < F; ++f) o[f] = g[f] / (1.0f + fast_exp(-g[f])) * u[f];
  }
}

void swiglu_backward_impl(float* dx, const float* dout, const float* x, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = x + i * 2 * F;
    const float* u = g + F;
    const float* d = dout + i * F;
    float* dg = dx + i * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      float s = 1.0f / (1.0f + fast_exp(-g[f]));
      float silu = g[f] * s;
      du[f] = d[f] * silu;
      dg[f] = d[f] * u[f] * s * (1.0f + g[f] * (1.0f - s));
    }
  }
}

// GeGLU (Gemma): gelu_tanh(gate) * up, the same [gate | up] layout as SwiGLU.
void geglu_forward_impl(float* out, const float* x, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = x + i * 2 * F;
    const float* u = g + F;
    float* o = out + i * F;
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      const float v = g[f];
      o[f] = 0.5f * v * (1.0f + fast_tanh(kGeluS * (v + kGeluK * v * v * v))) * u[f];
    }
  }
}

void geglu_backward_impl(float* dx, const float* dout, const float* x, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = x + i * 2 * F;
    const float* u = g + F;
    const float* d = dout + i * F;
    float* dg = dx + i * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      const float v = g[f], w = kGeluS * (v + kGeluK * v * v * v);
      // tanh and sech^2 from one exp(-2|w|), as gelu_backward_impl does (no overflow, no cancellation).
      const float e = fast_exp(-2.0f * std::fabs(w)), r = 1.0f / (e + 1.0f);
      const float t = std::copysign((1.0f - e) * r, w), sech2 = 4.0f * e * r * r;
      const float dw = kGeluS * (1.0f + 3.0f * kGeluK * v * v);
      du[f] = d[f] * 0.5f * v * (1.0f + t);
      dg[f] = d[f] * u[f] * (0.5f * (1.0f + t) + 0.5f * v * sech2 * dw);
    }
  }
}

void rope_table_impl(float* cos_t, float* sin_t, int T, int HS, float theta) {
  int half = HS / 2;
  for (int i = 0; i < half; ++i) {
    // Same float32 arithmetic as HF: inv_freq = 1 / theta^(2i/HS), angle = t * inv_freq.
    float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(HS));
    for (int t = 0; t < T; ++t) {
      float a = static_cast<float>(t) * inv_freq;
      cos_t[t * half + i] = std::cos(a);
      sin_t[t * half + i] = std::sin(a);
    }
  }
}

void rope_table_freqs_impl(float* cos_t, float* sin_t, int T, int half, const float* inv_freq, float scale) {
  for (int i = 0; i < half; ++i)
    for (int t = 0; t < T; ++t) {
      float a = static_cast<float>(t) * inv_freq[i];
      cos_t[t * half + i] = scale == 1.0f ? std::cos(a) : std::cos(a) * scale;
      sin_t[t * half + i] = scale == 1.0f ? std::sin(a) : std::sin(a) * scale;
    }
}

namespace {
void rope_apply(float* qkv, const float* cos_t, const float* sin_t, int B, int T, int NH, int KVH, int HS,
                int64_t row_stride, float sign, const int32_t* positions) {
  int half = HS / 2;
  int heads = NH + KVH;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < int64_t(B) * T; ++r) {
    int t = positions ? positions[r] : static_cast<int>(r % T);
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    float* row = qkv + r * row_stride;
    for (int h = 0; h < heads; ++h) {
      float* x1 = row + h * HS;
      float* x2 = x1 + half;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        float a = x1[i], b = x2[i], sn = sign * s[i];
        x1[i] = a * c[i] - b * sn;
        x2[i] = b * c[i] + a * sn;
      }
    }
  }
}
}  // namespace

void rope_forward_impl(float* qkv, const float* cos_t, const float* sin_t, int B, int T, int NH, int KVH, int HS,
                  int64_t row_stride, const int32_t* positions) {
  rope_apply(qkv, cos_t, sin_t, B, T, NH, KVH, HS, row_stride, 1.0f, positions);
}

void rope_backward_impl(float* dqkv, const float* cos_t, const float* sin_t, int B, int T, int NH, int KVH, int HS,
                   int64_t row_stride, const int32_t* positions) {
  // The rotation is orthogonal: its transpose is the rotation by -angle.
  rope_apply(dqkv, cos_t, sin_t, B, T, NH, KVH, HS, row_stride, -1.0f, positions);
}

void embedding_forward_impl(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T, int C,
                       const int32_t* positions) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* e = wte + int64_t(tokens[i]) * C;
    float* o = out + i * C;
    if (wpe) {
      const float* p = wpe + (positions ? int64_t(positions[i]) : i % T) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = e[c];
    }
  }
}

void embedding_backward_impl(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T, int C,
                        const int32_t* positions) {
  // Split the channels between threads: every thread sees every token, so repeated
  // token ids never race, and the accumulation order per address stays fixed.
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int c0 = int(int64_t(C) * id / nt), c1 = int(int64_t(C) * (id + 1) / nt);
    for (int64_t i = 0; i < N; ++i) {
      const float* g = dout + i * C;
      float* e = dwte + int64_t(tokens[i]) * C;
      for (int c = c0; c < c1; ++c) e[c] += g[c];
      if (dwpe) {
        float* p = dwpe + (positions ? int64_t(positions[i]) : i % T) * C;
        for (int c = c0; c < c1; ++c) p[c] += g[c];
      }
    }
  }
}

void embedding_forward_vocab_impl(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T,
                             int C, const int32_t* positions, int v0, int nv) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t v = int64_t(tokens[i]) - v0;
    const float* e = v >= 0 && v < nv ? wte + v * C : nullptr;
    const float* p = wpe ? wpe + (positions ? int64_t(positions[i]) : i % T) * C : nullptr;
    float* o = out + i * C;
    for (int c = 0; c < C; ++c) o[c] = (e ? e[c] : 0.f) + (p ? p[c] : 0.f);
  }
}

void embedding_backward_vocab_impl(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T,
                              int C, const int32_t* positions, int v0, int nv) {
  // As embedding_backward: channels split between threads, a fixed order per address.
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int c0 = int(int64_t(C) * id / nt), c1 = int(int64_t(C) * (id + 1) / nt);
    for (int64_t i = 0; i < N; ++i) {
      const float* g = dout + i * C;
      const int64_t v = int64_t(tokens[i]) - v0;
      if (v >= 0 && v < nv) {
        float* e = dwte + v * C;
        for (int c = c0; c < c1; ++c) e[c] += g[c];
      }
      if (dwpe) {
        float* p = dwpe + (positions ? int64_t(positions[i]) : i % T) * C;
        for (int c = c0; c < c1; ++c) p[c] += g[c];
      }
    }
  }
}

void bias_forward_impl(float* y, const float* b, int64_t N, int M) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* yi = y + i * M;
#pragma omp simd
    for (int j = 0; j < M; ++j) yi[j] += b[j];
  }
}

void bias_backward_impl(float* db, const float* dy, int64_t N, int M) {
  ThreadPartials part(1, M);
#pragma omp parallel
  {
    float* p = part.slot(0);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* g = dy + i * M;
#pragma omp simd
      for (int j = 0; j < M; ++j) p[j] += g[j];
    }
  }
  part.reduce_into(db, 0, 1);
}

void add_impl(float* y, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace zt::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zt::kernels {
HWY_EXPORT(layernorm_forward_impl);
HWY_EXPORT(layernorm_backward_impl);
HWY_EXPORT(rmsnorm_forward_impl);
HWY_EXPORT(rmsnorm_backward_impl);
HWY_EXPORT(gelu_forward_impl);
HWY_EXPORT(gelu_backward_impl);
HWY_EXPORT(swiglu_forward_impl);
HWY_EXPORT(swiglu_backward_impl);
HWY_EXPORT(geglu_forward_impl);
HWY_EXPORT(geglu_backward_impl);
HWY_EXPORT(rope_table_impl);
HWY_EXPORT(rope_table_freqs_impl);
HWY_EXPORT(rope_forward_impl);
HWY_EXPORT(rope_backward_impl);
HWY_EXPORT(embedding_forward_impl);
HWY_EXPORT(embedding_backward_impl);
HWY_EXPORT(embedding_forward_vocab_impl);
HWY_EXPORT(embedding_backward_vocab_impl);
HWY_EXPORT(bias_forward_impl);
HWY_EXPORT(bias_backward_impl);
HWY_EXPORT(add_impl);

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N, int C, float eps) {
  HWY_DYNAMIC_DISPATCH(layernorm_forward_impl)(out, mean, rstd, x, w, b, N, C, eps);
}

void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w, const float* mean, const float* rstd, int64_t N, int C) {
  HWY_DYNAMIC_DISPATCH(layernorm_backward_impl)(dx, dw, db, dout, x, w, mean, rstd, N, C);
}

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int C, float eps) {
  HWY_DYNAMIC_DISPATCH(rmsnorm_forward_impl)(out, rstd, x, w, N, C, eps);
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int64_t N, int C) {
  HWY_DYNAMIC_DISPATCH(rmsnorm_backward_impl)(dx, dw, dout, x, w, rstd, N, C);
}

void gelu_forward(float* out, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(gelu_forward_impl)(out, x, n);
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(gelu_backward_impl)(dx, dout, x, n);
}

void swiglu_forward(float* out, const float* x, int64_t N, int F) {
  HWY_DYNAMIC_DISPATCH(swiglu_forward_impl)(out, x, N, F);
}

void swiglu_backward(float* dx, const float* dout, const float* x, int64_t N, int F) {
  HWY_DYNAMIC_DISPATCH(swiglu_backward_impl)(dx, dout, x, N, F);
}

void geglu_forward(float* out, const float* x, int64_t N, int F) {
  HWY_DYNAMIC_DISPATCH(geglu_forward_impl)(out, x, N, F);
}

void geglu_backward(float* dx, const float* dout, const float* x, int64_t N, int F) {
  HWY_DYNAMIC_DISPATCH(geglu_backward_impl)(dx, dout, x, N, F);
}

void rope_table(float* cos, float* sin, int T, int HS, float theta) {
  HWY_DYNAMIC_DISPATCH(rope_table_impl)(cos, sin, T, HS, theta);
}

void rope_table_freqs(float* cos, float* sin, int T, int half, const float* inv_freq, float scale) {
  HWY_DYNAMIC_DISPATCH(rope_table_freqs_impl)(cos, sin, T, half, inv_freq, scale);
}

void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS, int64_t row_stride, const int32_t* positions) {
  HWY_DYNAMIC_DISPATCH(rope_forward_impl)(qkv, cos, sin, B, T, NH, KVH, HS, row_stride, positions);
}

void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS, int64_t row_stride, const int32_t* positions) {
  HWY_DYNAMIC_DISPATCH(rope_backward_impl)(dqkv, cos, sin, B, T, NH, KVH, HS, row_stride, positions);
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T, int C, const int32_t* positions) {
  HWY_DYNAMIC_DISPATCH(embedding_forward_impl)(out, tokens, wte, wpe, N, T, C, positions);
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T, int C, const int32_t* positions) {
  HWY_DYNAMIC_DISPATCH(embedding_backward_impl)(dwte, dwpe, dout, tokens, N, T, C, positions);
}

void embedding_forward_vocab(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T, int C, const int32_t* positions, int v0, int nv) {
  HWY_DYNAMIC_DISPATCH(embedding_forward_vocab_impl)(out, tokens, wte, wpe, N, T, C, positions, v0, nv);
}

void embedding_backward_vocab(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T, int C, const int32_t* positions, int v0, int nv) {
  HWY_DYNAMIC_DISPATCH(embedding_backward_vocab_impl)(dwte, dwpe, dout, tokens, N, T, C, positions, v0, nv);
}

void bias_forward(float* y, const float* b, int64_t N, int M) {
  HWY_DYNAMIC_DISPATCH(bias_forward_impl)(y, b, N, M);
}

void bias_backward(float* db, const float* dy, int64_t N, int M) {
  HWY_DYNAMIC_DISPATCH(bias_backward_impl)(db, dy, N, M);
}

void add(float* y, const float* a, const float* b, int64_t n) {
  HWY_DYNAMIC_DISPATCH(add_impl)(y, a, b, n);
}
}  // namespace zt::kernels
#endif
