// attention.cpp: flash attention forward and backward on the CPU.
// Forward: one task per (batch, query head, block of BQ query rows); keys in tiles of BK
// so a K/V tile is reused from cache by every row of the query block. Backward: one
// task per (batch, key/value head) so each task owns its dK, dV and its group's dQ and
// no two threads write the same gradient (no atomics, deterministic order).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/fast_math.h"

namespace zt::kernels {
namespace {
constexpr int BQ = 32;
constexpr int BK = 64;

inline float dot(const float* a, const float* b, int n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
inline void axpy(float* y, float a, const float* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d) {
  const int T = d.T, HS = d.HS, NH = d.NH, group = d.NH / d.KVH;
  const int64_t rs = d.row_stride(), os = int64_t(NH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int nqb = (T + BQ - 1) / BQ;
  const int64_t tasks = int64_t(d.B) * NH * nqb;
#pragma omp parallel
  {
    std::vector<float> acc(size_t(BQ) * HS), m(BQ), l(BQ);
    float s[BK];
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      // Largest query blocks first (they see the most keys) for better balance.
      int qb = nqb - 1 - int(task % nqb);
      int h = int((task / nqb) % NH), b = int(task / (int64_t(nqb) * NH));
      int g = h / group;
      int q0 = qb * BQ, q1 = std::min(q0 + BQ, T);
      const float* base = qkv + int64_t(b) * T * rs;
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.f);
      for (int k0 = 0; k0 < q1; k0 += BK) {
        int k1 = std::min(k0 + BK, q1);
        for (int t = std::max(q0, k0); t < q1; ++t) {
          int r = t - q0, kend = std::min(k1, t + 1);
          const float* q = base + int64_t(t) * rs + int64_t(h) * HS;
          float mx = m[r];
          for (int j = k0; j < kend; ++j) {
            s[j - k0] = dot(q, base + int64_t(j) * rs + int64_t(NH + g) * HS, HS) * scale;
            mx = std::max(mx, s[j - k0]);
          }
          float corr = fast_exp(m[r] - mx), sum = 0.f;
          int n = kend - k0;
#pragma omp simd reduction(+ : sum)
          for (int j = 0; j < n; ++j) {
            s[j] = fast_exp(s[j] - mx);
            sum += s[j];
          }
          float* a = acc.data() + size_t(r) * HS;
          if (corr != 1.0f)
            for (int i = 0; i < HS; ++i) a[i] *= corr;
          for (int j = 0; j < n; ++j) axpy(a, s[j], base + int64_t(k0 + j) * rs + int64_t(NH + d.KVH + g) * HS, HS);
          l[r] = l[r] * corr + sum;
          m[r] = mx;
        }
      }
      for (int t = q0; t < q1; ++t) {
        int r = t - q0;
        float inv = 1.0f / l[r];
        float* o = out + (int64_t(b) * T + t) * os + int64_t(h) * HS;
        const float* a = acc.data() + size_t(r) * HS;
        for (int i = 0; i < HS; ++i) o[i] = a[i] * inv;
        lse[(int64_t(b) * NH + h) * T + t] = m[r] + std::log(l[r]);
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d) {
  const int T = d.T, HS = d.HS, NH = d.NH, KVH = d.KVH, group = d.NH / d.KVH;
  const int64_t rs = d.row_stride(), os = int64_t(NH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t tasks = int64_t(d.B) * KVH;
#pragma omp parallel
  {
    std::vector<float> D(T), dq(HS);
    float p[BK], ds[BK];
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      int g = int(task % KVH), b = int(task / KVH);
      const float* base = qkv + int64_t(b) * T * rs;
      float* dbase = dqkv + int64_t(b) * T * rs;
      const int64_t koff = int64_t(NH + g) * HS, voff = int64_t(NH + KVH + g) * HS;
      for (int t = 0; t < T; ++t) {
        std::fill_n(dbase + t * rs + koff, HS, 0.f);
        std::fill_n(dbase + t * rs + voff, HS, 0.f);
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float* ob = out + int64_t(b) * T * os + int64_t(h) * HS;
        const float* dob = dout + int64_t(b) * T * os + int64_t(h) * HS;
        const float* lrow = lse + (int64_t(b) * NH + h) * T;
        for (int t = 0; t < T; ++t) D[t] = dot(dob + t * os, ob + t * os, HS);
        for (int t = 0; t < T; ++t) {
          const float* q = base + t * rs + int64_t(h) * HS;
          const float* dO = dob + t * os;
          std::fill(dq.begin(), dq.end(), 0.f);
          for (int k0 = 0; k0 <= t; k0 += BK) {
            int n = std::min(BK, t + 1 - k0);
            for (int j = 0; j < n; ++j) {
              const float* krow = base + int64_t(k0 + j) * rs + koff;
              const float* vrow = base + int64_t(k0 + j) * rs + voff;
              p[j] = dot(q, krow, HS) * scale - lrow[t];
              ds[j] = dot(dO, vrow, HS);
            }
#pragma omp simd
            for (int j = 0; j < n; ++j) {
              p[j] = fast_exp(p[j]);
              ds[j] = p[j] * (ds[j] - D[t]) * scale;
            }
            for (int j = 0; j < n; ++j) {
              const float* krow = base + int64_t(k0 + j) * rs + koff;
              float* dk = dbase + int64_t(k0 + j) * rs + koff;
              float* dv = dbase + int64_t(k0 + j) * rs + voff;
              axpy(dv, p[j], dO, HS);
              axpy(dq.data(), ds[j], krow, HS);
              axpy(dk, ds[j], q, HS);
            }
          }
          float* dqo = dbase + t * rs + int64_t(h) * HS;
          for (int i = 0; i < HS; ++i) dqo[i] = dq[i];
        }
      }
    }
  }
}

}  // namespace zt::kernels
