// reference.h: naive, obviously-correct versions of every fast kernel, templated on the
// scalar type so tests can run them in double against finite differences and in float
// against the fast kernels. Same argument conventions as ops.h / attention.h /
// cross_entropy.h. Never used on the training path.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/gemm.h"
#include "kernels/nf4.h"
#include "kernels/quant_maps.h"

namespace zt::ref {

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t N, int C, T eps) {
  for (int64_t i = 0; i < N; ++i) {
    T m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    T r = T(1) / std::sqrt(v / C + eps);
    for (int c = 0; c < C; ++c) out[i * C + c] = (x[i * C + c] - m) * r * w[c] + b[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const T* mean, const T* rstd,
                        int64_t N, int C) {
  for (int64_t i = 0; i < N; ++i) {
    T sd = 0, sdx = 0;
    for (int c = 0; c < C; ++c) {
      T xh = (x[i * C + c] - mean[i]) * rstd[i];
      sd += dout[i * C + c] * w[c];
      sdx += dout[i * C + c] * w[c] * xh;
    }
    for (int c = 0; c < C; ++c) {
      T xh = (x[i * C + c] - mean[i]) * rstd[i];
      dx[i * C + c] += rstd[i] * (dout[i * C + c] * w[c] - sd / C - xh * sdx / C);
      dw[c] += dout[i * C + c] * xh;
      db[c] += dout[i * C + c];
    }
  }
}

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int C, T eps) {
  for (int64_t i = 0; i < N; ++i) {
    T v = 0;
    for (int c = 0; c < C; ++c) v += x[i * C + c] * x[i * C + c];
    T r = T(1) / std::sqrt(v / C + eps);
    for (int c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] * r * w[c];
    rstd[i] = r;
  }
}

template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int64_t N, int C) {
  for (int64_t i = 0; i < N; ++i) {
    T sdx = 0;
    for (int c = 0; c < C; ++c) sdx += dout[i * C + c] * w[c] * x[i * C + c] * rstd[i];
    for (int c = 0; c < C; ++c) {
      T xh = x[i * C + c] * rstd[i];
      dx[i * C + c] += rstd[i] * (dout[i * C + c] * w[c] - xh * sdx / C);
      dw[c] += dout[i * C + c] * xh;
    }
  }
}

template <class T>
T gelu(T v) {
  const T s = T(0.7978845608028654);
  return T(0.5) * v * (T(1) + std::tanh(s * (v + T(0.044715) * v * v * v)));
}

template <class T>
void gelu_forward(T* out, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu(x[i]);
}

template <class T>
void gelu_backward(T* dx, const T* dout, const T* x, int64_t n) {
  const T s = T(0.7978845608028654), k = T(0.044715);
  for (int64_t i = 0; i < n; ++i) {
    T v = x[i], t = std::tanh(s * (v + k * v * v * v));
    dx[i] = dout[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * s * (T(1) + T(3) * k * v * v));
  }
}

template <class T>
void swiglu_forward(T* out, const T* x, int64_t N, int F) {
  for (int64_t i = 0; i < N; ++i)
    for (int f = 0; f < F; ++f) {
      T g = x[i * 2 * F + f], u = x[i * 2 * F + F + f];
      out[i * F + f] = g / (T(1) + std::exp(-g)) * u;
    }
}

template <class T>
void swiglu_backward(T* dx, const T* dout, const T* x, int64_t N, int F) {
  for (int64_t i = 0; i < N; ++i)
    for (int f = 0; f < F; ++f) {
      T g = x[i * 2 * F + f], u = x[i * 2 * F + F + f], s = T(1) / (T(1) + std::exp(-g));
      dx[i * 2 * F + F + f] = dout[i * F + f] * g * s;
      dx[i * 2 * F + f] = dout[i * F + f] * u * (s + g * s * (T(1) - s));
    }
}

template <class T>
void geglu_forward(T* out, const T* x, int64_t N, int F) {
  for (int64_t i = 0; i < N; ++i)
    for (int f = 0; f < F; ++f) out[i * F + f] = gelu(x[i * 2 * F + f]) * x[i * 2 * F + F + f];
}

template <class T>
void geglu_backward(T* dx, const T* dout, const T* x, int64_t N, int F) {
  for (int64_t i = 0; i < N; ++i)
    for (int f = 0; f < F; ++f) {
      T g = x[i * 2 * F + f], u = x[i * 2 * F + F + f], d = dout[i * F + f], dg = T(0);
      gelu_backward(&dg, &d, &g, 1);  // d gelu(g) / dg times d
      dx[i * 2 * F + F + f] = d * gelu(g);
      dx[i * 2 * F + f] = dg * u;
    }
}

// y (N, M) += b per row; db (M) += column sums of dy.
template <class T>
void bias_forward(T* y, const T* b, int64_t N, int M) {
  for (int64_t i = 0; i < N; ++i)
    for (int j = 0; j < M; ++j) y[i * M + j] += b[j];
}

template <class T>
void bias_backward(T* db, const T* dy, int64_t N, int M) {
  for (int64_t i = 0; i < N; ++i)
    for (int j = 0; j < M; ++j) db[j] += dy[i * M + j];
}

template <class T>
void add(T* y, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// Rotate-half RoPE by explicit angle, (B*T rows), heads NH + KVH at the row start.
// Row r sits at position positions[r] (packed documents), or r % Tn when null.
template <class T>
void rope_forward(T* qkv, int B, int Tn, int NH, int KVH, int HS, int64_t rs, double theta, double sign = 1.0,
                  const int32_t* positions = nullptr) {
  int half = HS / 2;
  for (int64_t r = 0; r < int64_t(B) * Tn; ++r)
    for (int h = 0; h < NH + KVH; ++h)
      for (int i = 0; i < half; ++i) {
        double pos = positions ? double(positions[r]) : double(r % Tn);
        double ang = pos / std::pow(theta, 2.0 * i / HS);
        T c = T(std::cos(ang)), s = T(sign * std::sin(ang));
        T* x = qkv + r * rs + h * HS;
        T a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
      }
}

// Token i reads position row positions[i] of wpe (packed documents), or i % Tn when null.
template <class T>
void embedding_forward(T* out, const int32_t* tok, const T* wte, const T* wpe, int64_t N, int Tn, int C,
                       const int32_t* positions = nullptr) {
  for (int64_t i = 0; i < N; ++i) {
    int64_t p = positions ? positions[i] : i % Tn;
    for (int c = 0; c < C; ++c) out[i * C + c] = wte[int64_t(tok[i]) * C + c] + (wpe ? wpe[p * C + c] : T(0));
  }
}

template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tok, int64_t N, int Tn, int C,
                        const int32_t* positions = nullptr) {
  for (int64_t i = 0; i < N; ++i) {
    int64_t p = positions ? positions[i] : i % Tn;
    for (int c = 0; c < C; ++c) {
      dwte[int64_t(tok[i]) * C + c] += dout[i * C + c];
      if (dwpe) dwpe[p * C + c] += dout[i * C + c];
    }
  }
}

// Materialises the full (T, T) probability matrix per (b, h). Query t sees keys
// j0..t, j0 = d.doc_start[b*T + t] with packed documents, else 0.
template <class T>
void attention_forward(T* out, T* lse, const T* qkv, const kernels::AttnDims& d) {
  int64_t rs = d.row_stride(), os = int64_t(d.NH) * d.HS;
  T scale = d.scale > 0 ? T(d.scale) : T(1) / std::sqrt(T(d.HS));
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.NH; ++h) {
      int g = h / (d.NH / d.KVH);
      for (int t = 0; t < d.T; ++t) {
        const T* q = qkv + (int64_t(b) * d.T + t) * rs + h * d.HS;
        const int j0 = d.doc_start ? d.doc_start[int64_t(b) * d.T + t] : 0;
        std::vector<T> s(t + 1);
        T mx = -1e30;
        for (int j = j0; j <= t; ++j) {
          const T* k = qkv + (int64_t(b) * d.T + j) * rs + (d.NH + g) * d.HS;
          T acc = 0;
          for (int i = 0; i < d.HS; ++i) acc += q[i] * k[i];
          s[j] = d.softcap > 0 ? T(d.softcap) * std::tanh(acc * scale / T(d.softcap)) : acc * scale;
          mx = std::max(mx, s[j]);
        }
        T sum = 0;
        for (int j = j0; j <= t; ++j) sum += std::exp(s[j] - mx);
        T* o = out + (int64_t(b) * d.T + t) * os + h * d.HS;
        for (int i = 0; i < d.HS; ++i) o[i] = 0;
        for (int j = j0; j <= t; ++j) {
          T p = std::exp(s[j] - mx) / sum;
          const T* v = qkv + (int64_t(b) * d.T + j) * rs + (d.NH + d.KVH + g) * d.HS;
          for (int i = 0; i < d.HS; ++i) o[i] += p * v[i];
        }
        lse[(int64_t(b) * d.NH + h) * d.T + t] = mx + std::log(sum);
      }
    }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const kernels::AttnDims& d) {
  int64_t rs = d.row_stride(), os = int64_t(d.NH) * d.HS;
  T scale = d.scale > 0 ? T(d.scale) : T(1) / std::sqrt(T(d.HS));
  for (int64_t i = 0; i < int64_t(d.B) * d.T * rs; ++i) dqkv[i] = 0;
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.NH; ++h) {
      int g = h / (d.NH / d.KVH);
      for (int t = 0; t < d.T; ++t) {
        int64_t qr = (int64_t(b) * d.T + t) * rs;
        const T* q = qkv + qr + h * d.HS;
        const T* dO = dout + (int64_t(b) * d.T + t) * os + h * d.HS;
        const int j0 = d.doc_start ? d.doc_start[int64_t(b) * d.T + t] : 0;
        std::vector<T> p(t + 1), dp(t + 1), dcap(t + 1, T(1));
        T mx = -1e30, sum = 0;
        for (int j = j0; j <= t; ++j) {
          const T* k = qkv + (int64_t(b) * d.T + j) * rs + (d.NH + g) * d.HS;
          T acc = 0;
          for (int i = 0; i < d.HS; ++i) acc += q[i] * k[i];
          p[j] = acc * scale;
          if (d.softcap > 0) {  // Gemma 2: c tanh(s / c), whose derivative is 1 - tanh^2
            const T th = std::tanh(p[j] / T(d.softcap));
            p[j] = T(d.softcap) * th;
            dcap[j] = T(1) - th * th;
          }
          mx = std::max(mx, p[j]);
        }
        for (int j = j0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
        T pdp = 0;
        for (int j = j0; j <= t; ++j) {
          p[j] /= sum;
          const T* v = qkv + (int64_t(b) * d.T + j) * rs + (d.NH + d.KVH + g) * d.HS;
          T acc = 0;
          for (int i = 0; i < d.HS; ++i) acc += dO[i] * v[i];
          dp[j] = acc;
          pdp += p[j] * acc;
        }
        for (int j = j0; j <= t; ++j) {
          int64_t kr = (int64_t(b) * d.T + j) * rs;
          T ds = p[j] * (dp[j] - pdp) * scale * dcap[j];
          for (int i = 0; i < d.HS; ++i) {
            dqkv[qr + h * d.HS + i] += ds * qkv[kr + (d.NH + g) * d.HS + i];
            dqkv[kr + (d.NH + g) * d.HS + i] += ds * q[i];
            dqkv[kr + (d.NH + d.KVH + g) * d.HS + i] += p[j] * dO[i];
          }
        }
      }
    }
}

// One query row per head against n cached key/value rows (KVH*HS each), plain softmax with
// every cached position visible: the last query row of attention_forward over those n positions.
template <class T>
void attention_decode(T* out, const T* q, const T* kcache, const T* vcache, int n, int NH, int KVH, int HS,
                      float scale_in = 0.f, float softcap = 0.f) {
  const T scale = scale_in > 0.f ? T(scale_in) : T(1) / std::sqrt(T(HS));
  for (int h = 0; h < NH; ++h) {
    const int g = h / (NH / KVH);
    std::vector<T> s(static_cast<size_t>(n));
    T mx = -1e30;
    for (int j = 0; j < n; ++j) {
      T acc = 0;
      for (int i = 0; i < HS; ++i) acc += q[h * HS + i] * kcache[(int64_t(j) * KVH + g) * HS + i];
      s[size_t(j)] = softcap > 0.f ? T(softcap) * std::tanh(acc * scale / T(softcap)) : acc * scale;
      mx = std::max(mx, s[size_t(j)]);
    }
    T sum = 0;
    for (int j = 0; j < n; ++j) sum += std::exp(s[size_t(j)] - mx);
    for (int i = 0; i < HS; ++i) {
      T o = 0;
      for (int j = 0; j < n; ++j) o += std::exp(s[size_t(j)] - mx) / sum * vcache[(int64_t(j) * KVH + g) * HS + i];
      out[h * HS + i] = o;
    }
  }
}

// Unfused LM head + cross entropy: full (N, V) logits.
template <class T>
double lmhead_ce(T* dx, T* dw, const T* x, const T* w, const int32_t* tgt, int64_t N, int C, int V, T grad_scale,
                 T softcap = T(0)) {
  std::vector<T> z(size_t(N) * V), dcap(size_t(N) * V, T(1));
  kernels::gemm_ref<T>(false, true, N, V, C, T(1), x, C, w, C, T(0), z.data(), V);
  if (softcap > T(0))  // Gemma 2: logits c tanh(z / c)
    for (size_t i = 0; i < z.size(); ++i) {
      const T t = std::tanh(z[i] / softcap);
      z[i] = softcap * t;
      dcap[i] = T(1) - t * t;
    }
  double loss = 0;
  for (int64_t i = 0; i < N; ++i) {
    T* zi = z.data() + i * V;
    if (tgt[i] == kernels::kIgnoreIndex) {
      for (int v = 0; v < V; ++v) zi[v] = 0;
      continue;
    }
    T mx = zi[0];
    for (int v = 0; v < V; ++v) mx = std::max(mx, zi[v]);
    T sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(zi[v] - mx);
    loss += double(std::log(sum) - (zi[tgt[i]] - mx));
    for (int v = 0; v < V; ++v) zi[v] = std::exp(zi[v] - mx) / sum * grad_scale;
    zi[tgt[i]] -= grad_scale;
    for (int v = 0; v < V; ++v) zi[v] *= dcap[size_t(i) * V + v];
  }
  if (dx) {
    kernels::gemm_ref<T>(false, false, N, C, V, T(1), z.data(), V, w, C, T(0), dx, C);
    kernels::gemm_ref<T>(true, false, V, C, N, T(1), z.data(), V, x, C, T(1), dw, C);
  }
  return loss;
}

// NF4 (kernels/nf4.h). bitsandbytes' dQuantizeNF4 as its decision tree, test by test.
inline uint8_t nf4_code_tree(float x) {
  const float* t = kernels::kNf4Threshold;
  if (x > t[7]) {
    if (x > t[11]) {
      if (x > t[13]) return x > t[14] ? 15 : 14;
      return x > t[12] ? 13 : 12;
    }
    if (x > t[9]) return x > t[10] ? 11 : 10;
    return x > t[8] ? 9 : 8;
  }
  if (x > t[3]) {
    if (x > t[5]) return x > t[6] ? 7 : 6;
    return x > t[4] ? 5 : 4;
  }
  if (x > t[1]) return x > t[2] ? 3 : 2;
  return x > t[0] ? 1 : 0;
}

// quantize_4bit (nf4, no double quantization), one block after another: the codes unpacked (one
// per element) and the blocks' absmax. An all-zero block: code 0 (the GPU's NaN).
inline void nf4_quantize(const float* w, int64_t n, int bs, std::vector<uint8_t>& code, std::vector<float>& absmax) {
  code.assign(size_t(n), 0);
  absmax.clear();
  for (int64_t lo = 0; lo < n; lo += bs) {
    const int64_t hi = std::min<int64_t>(n, lo + bs);
    float am = 0;
    for (int64_t i = lo; i < hi; ++i) am = std::max(am, std::fabs(w[i]));
    absmax.push_back(am);
    for (int64_t i = lo; i < hi; ++i) code[size_t(i)] = am == 0 ? 0 : nf4_code_tree(w[i] * (1.f / am));
  }
}

// bitsandbytes' dQuantize<0> in closed form: j = the number of codes below x; the answer is j - 1
// or j, the nearer by the float32 midpoint (a + b) * 0.5f, a tie going to the even index (the
// search's last pivot is always even, and x equal to a midpoint stays with it). NaN: code 0.
inline uint8_t dynamic_quantize_bnb(const float* map, float x) {
  int j = 0;
  while (j < 256 && map[j] < x) ++j;
  if (j == 0) return 0;
  if (j == 256) return 255;
  const float mid = (map[j - 1] + map[j]) * 0.5f;
  if (x == mid) return uint8_t(j % 2 == 0 ? j : j - 1);
  return uint8_t(x > mid ? j : j - 1);
}

// quantize_4bit's compress_statistics: offset = the mean of the absmax values (in double, rounded
// once), then blocks of 256 of absmax - offset coded with the signed dynamic map by their
// absmax (0 when all equal the mean: code 0, the GPU's NaN).
inline void nf4_double_quantize(const std::vector<float>& absmax, std::vector<uint8_t>& q, std::vector<float>& scale,
                                float& offset) {
  double sum = 0;
  for (float a : absmax) sum += a;
  offset = float(sum / double(absmax.size()));
  q.assign(absmax.size(), 0);
  scale.clear();
  for (size_t lo = 0; lo < absmax.size(); lo += kernels::kNf4NestedBlock) {
    const size_t hi = std::min(absmax.size(), lo + kernels::kNf4NestedBlock);
    float am = 0;
    for (size_t i = lo; i < hi; ++i) am = std::max(am, std::fabs(absmax[i] - offset));
    scale.push_back(am);
    for (size_t i = lo; i < hi; ++i)
      q[i] = am == 0 ? 0 : dynamic_quantize_bnb(kernels::kDynamicSigned, (absmax[i] - offset) * (1.f / am));
  }
}

// Element i's code in the packed bytes: the high nibble holds the even element.
inline int nf4_unpack(const uint8_t* packed, int64_t i) { return i % 2 == 0 ? packed[i / 2] >> 4 : packed[i / 2] & 15; }

// Block b's absmax: stored, or dequantize_blockwise's code * scale then + offset.
inline float nf4_absmax(const kernels::Nf4View& q, int64_t b) {
  if (!q.nested()) return q.absmax[b];
  // Rounded to float before the sum, as bitsandbytes' two ops: the volatile keeps the compiler
  // (GCC contracts a * b + c by default) from fusing them into one FMA.
  volatile float decoded = kernels::kDynamicSigned[q.qabsmax[b]] * q.absmax_scale[b / kernels::kNf4NestedBlock];
  return decoded + q.offset;
}

// dequantize_4bit, element by element.
inline void nf4_dequantize(const kernels::Nf4View& q, float* out) {
  for (int64_t i = 0; i < q.numel(); ++i)
    out[i] = kernels::kNf4Code[nf4_unpack(q.codes, i)] * nf4_absmax(q, i / q.blocksize);
}

// The frozen Linear on the whole dequantized weight w (out, in), in T: y = x w^T, dx = dy w.
template <class T>
void nf4_linear_forward(T* y, const T* x, const T* w, int64_t N, int64_t out, int64_t in) {
  kernels::gemm_ref<T>(false, true, N, out, in, T(1), x, in, w, in, T(0), y, out);
}
template <class T>
void nf4_linear_backward_input(T* dx, const T* dy, const T* w, int64_t N, int64_t out, int64_t in) {
  kernels::gemm_ref<T>(false, false, N, in, out, T(1), dy, out, w, in, T(0), dx, in);
}

}  // namespace zt::ref
