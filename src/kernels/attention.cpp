// attention.cpp: flash attention forward and backward on the CPU.
// Work is cut into 64x64 tiles of (query rows) x (keys). Inside a tile every product
// runs along a contiguous axis so it vectorizes without horizontal sums: K and V tiles
// are transposed once into (HS, 64) so that a score row is a sum of key-vectors
// scaled by q's elements. Forward: one task per (batch, query head, query tile), online
// softmax over key tiles. Backward: one task per (batch, key/value head), which owns
// its dK, dV and its heads' dQ, so no two threads write one gradient (no atomics,
// a fixed summation order, run-to-run identical results).
// The head size is a template parameter for the common 64 and 128 so the compiler
// keeps the per-row accumulators in registers; other sizes take the generic path.
// Packed documents (AttnDims::doc_start): key tiles wholly before the earliest
// document start of a query tile are skipped, so a packed row costs roughly the sum of
// its documents' causal costs (plus partial tiles); inside a tile, keys before a row's
// start are masked like the causal future.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/fast_math.h"

namespace zt::kernels {
namespace {
constexpr int TILE = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// dst (HS, TILE) = src rows (n, HS) transposed, zero-padded to TILE columns.
inline void transpose_tile(float* dst, const float* src, int64_t stride, int n, int HS) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < HS; ++d) dst[d * TILE + j] = src[j * stride + d];
  for (int j = n; j < TILE; ++j)
    for (int d = 0; d < HS; ++d) dst[d * TILE + j] = 0.f;
}

// The first key any row of a query tile [q0, q0 + nq) may see: 0 without documents.
inline int tile_first_key(const int32_t* doc, int q0, int nq) {
  if (!doc) return 0;
  int lo = q0 + nq - 1;
  for (int i = 0; i < nq; ++i) lo = std::min(lo, int(doc[q0 + i]));
  return std::max(lo, 0);
}

// s (rows, TILE) = a rows (rows, HS) @ bt (HS, TILE) * scale. Four rows at a time share each
// load of bt (4 x 64 accumulators fit the 32 AVX-512 registers), which the one-row loop spent
// one load per multiply-add on; every element still sums over d in order, so the scores are
// bit-identical to the one-row form.
template <int HSC>
inline void tile_scores(float* s, const float* a, int64_t stride, int rows, const float* bt, float scale, int hs) {
  const int HS = HSC ? HSC : hs;
  int i = 0;
  if (HSC)
    for (; i + 4 <= rows; i += 4) {
      float acc0[TILE] = {}, acc1[TILE] = {}, acc2[TILE] = {}, acc3[TILE] = {};
      const float *a0 = a + i * stride, *a1 = a0 + stride, *a2 = a1 + stride, *a3 = a2 + stride;
      for (int d = 0; d < HS; ++d) {
        const float x0 = a0[d], x1 = a1[d], x2 = a2[d], x3 = a3[d];
        const float* b = bt + d * TILE;
#pragma omp simd
        for (int j = 0; j < TILE; ++j) {
          acc0[j] += x0 * b[j];
          acc1[j] += x1 * b[j];
          acc2[j] += x2 * b[j];
          acc3[j] += x3 * b[j];
        }
      }
#pragma omp simd
      for (int j = 0; j < TILE; ++j) {
        s[i * TILE + j] = acc0[j] * scale;
        s[(i + 1) * TILE + j] = acc1[j] * scale;
        s[(i + 2) * TILE + j] = acc2[j] * scale;
        s[(i + 3) * TILE + j] = acc3[j] * scale;
      }
    }
  for (; i < rows; ++i) {
    float acc[TILE] = {};
    const float* ai = a + i * stride;
    for (int d = 0; d < HS; ++d) {
      const float ad = ai[d];
      const float* b = bt + d * TILE;
#pragma omp simd
      for (int j = 0; j < TILE; ++j) acc[j] += ad * b[j];
    }
#pragma omp simd
    for (int j = 0; j < TILE; ++j) s[i * TILE + j] = acc[j] * scale;
  }
}

template <int HSC>
void forward_impl(float* out, float* lse, const float* qkv, const AttnDims& dm) {
  const int T = dm.T, NH = dm.NH, KVH = dm.KVH, HS = HSC ? HSC : dm.HS, group = NH / KVH;
  const int64_t rs = dm.row_stride(), os = int64_t(NH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int ntiles = (T + TILE - 1) / TILE;
  const int64_t tasks = int64_t(dm.B) * NH * ntiles;
#pragma omp parallel
  {
    std::vector<float> kt(size_t(HS) * TILE), s(TILE * TILE), acc(size_t(TILE) * HS), m(TILE), l(TILE);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int qt = ntiles - 1 - int(task % ntiles);  // biggest tiles first for balance
      const int h = int((task / ntiles) % NH), b = int(task / (int64_t(ntiles) * NH)), g = h / group;
      const int q0 = qt * TILE, nq = std::min(TILE, T - q0);
      const float* base = qkv + int64_t(b) * T * rs;
      const float* q = base + int64_t(q0) * rs + int64_t(h) * HS;
      const int32_t* doc = dm.doc_start ? dm.doc_start + int64_t(b) * T : nullptr;
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.f);
      for (int kt_i = tile_first_key(doc, q0, nq) / TILE; kt_i <= qt; ++kt_i) {
        const int k0 = kt_i * TILE, nk = std::min(TILE, T - k0);
        transpose_tile(kt.data(), base + int64_t(k0) * rs + int64_t(NH + g) * HS, rs, nk, HS);
        tile_scores<HSC>(s.data(), q, rs, nq, kt.data(), scale, HS);
        const float* v = base + int64_t(k0) * rs + int64_t(NH + KVH + g) * HS;
        for (int i = 0; i < nq; ++i) {
          float* si = s.data() + i * TILE;
          const int valid = std::min(nk, q0 + i - k0 + 1);            // causal: keys <= query position
          const int first = doc ? std::max(0, doc[q0 + i] - k0) : 0;  // keys >= its document start
          if (first >= valid) continue;                               // this row's document starts after this tile
          float mx = m[i];
          for (int j = first; j < valid; ++j) mx = std::max(mx, si[j]);
          float sum = 0.f;
#pragma omp simd reduction(+ : sum)
          for (int j = 0; j < TILE; ++j) {
            float p = j >= first && j < valid ? fast_exp(si[j] - mx) : 0.f;
            si[j] = p;
            sum += p;
          }
          const float corr = fast_exp(m[i] - mx);
          l[i] = l[i] * corr + sum;
          m[i] = mx;
          float* ai = acc.data() + size_t(i) * HS;
          float r[HSC ? HSC : 1];
          float* rr = HSC ? r : ai;
#pragma omp simd
          for (int d = 0; d < HS; ++d) rr[d] = ai[d] * corr;
          for (int j = first; j < valid; ++j) {
            const float p = si[j];
            const float* vj = v + j * rs;
#pragma omp simd
            for (int d = 0; d < HS; ++d) rr[d] += p * vj[d];
          }
          if (HSC)
            for (int d = 0; d < HS; ++d) ai[d] = rr[d];
        }
      }
      for (int i = 0; i < nq; ++i) {
        const float inv = 1.0f / l[i];
        float* o = out + (int64_t(b) * T + q0 + i) * os + int64_t(h) * HS;
        for (int d = 0; d < HS; ++d) o[d] = acc[size_t(i) * HS + d] * inv;
        lse[(int64_t(b) * NH + h) * T + q0 + i] = m[i] + std::log(l[i]);
      }
    }
  }
}

// acc (HS) += sum_j w[j * wstride] * rows[j] for j < n: the column-weighted row sum
// behind dV += P^T dO, dK += dS^T Q and dQ += dS K.
template <int HSC>
inline void weighted_rows(float* acc, const float* w, int wstride, const float* rows, int64_t rstride, int n, int hs) {
  const int HS = HSC ? HSC : hs;
  float r[HSC ? HSC : 1];
  float* rr = HSC ? r : acc;
  if (HSC)
    for (int d = 0; d < HS; ++d) rr[d] = acc[d];
  for (int j = 0; j < n; ++j) {
    const float wj = w[j * wstride];
    const float* x = rows + j * rstride;
#pragma omp simd
    for (int d = 0; d < HS; ++d) rr[d] += wj * x[d];
  }
  if (HSC)
    for (int d = 0; d < HS; ++d) acc[d] = rr[d];
}

// Four accumulators at once (acc + k * astride with weights w[k * wk + j * wstride], k < 4):
// each row is loaded once for four multiply-adds. Same order per element as weighted_rows.
template <int HSC>
inline void weighted_rows4(float* acc, int64_t astride, const float* w, int wstride, int wk, const float* rows,
                           int64_t rstride, int n) {
  constexpr int HS = HSC;
  float r0[HS], r1[HS], r2[HS], r3[HS];
  for (int d = 0; d < HS; ++d) {
    r0[d] = acc[d];
    r1[d] = acc[astride + d];
    r2[d] = acc[2 * astride + d];
    r3[d] = acc[3 * astride + d];
  }
  for (int j = 0; j < n; ++j) {
    const float* wj = w + j * wstride;
    const float w0 = wj[0], w1 = wj[wk], w2 = wj[2 * wk], w3 = wj[3 * wk];
    const float* x = rows + j * rstride;
#pragma omp simd
    for (int d = 0; d < HS; ++d) {
      r0[d] += w0 * x[d];
      r1[d] += w1 * x[d];
      r2[d] += w2 * x[d];
      r3[d] += w3 * x[d];
    }
  }
  for (int d = 0; d < HS; ++d) {
    acc[d] = r0[d];
    acc[astride + d] = r1[d];
    acc[2 * astride + d] = r2[d];
    acc[3 * astride + d] = r3[d];
  }
}

template <int HSC>
void backward_impl(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const AttnDims& dm) {
  const int T = dm.T, NH = dm.NH, KVH = dm.KVH, HS = HSC ? HSC : dm.HS, group = NH / KVH;
  const int64_t rs = dm.row_stride(), os = int64_t(NH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int ntiles = (T + TILE - 1) / TILE;
  const int64_t tasks = int64_t(dm.B) * KVH;
#pragma omp parallel
  {
    std::vector<float> kt(size_t(HS) * TILE), vt(size_t(HS) * TILE), p(TILE * TILE), ds(TILE * TILE),
        dq(size_t(TILE) * HS), D(TILE);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int g = int(task % KVH), b = int(task / KVH);
      const float* base = qkv + int64_t(b) * T * rs;
      float* dbase = dqkv + int64_t(b) * T * rs;
      const int64_t koff = int64_t(NH + g) * HS, voff = int64_t(NH + KVH + g) * HS;
      for (int t = 0; t < T; ++t) {
        std::fill_n(dbase + t * rs + koff, HS, 0.f);
        std::fill_n(dbase + t * rs + voff, HS, 0.f);
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const int64_t qoff = int64_t(h) * HS;
        for (int qt = 0; qt < ntiles; ++qt) {
          const int q0 = qt * TILE, nq = std::min(TILE, T - q0);
          const float* q = base + int64_t(q0) * rs + qoff;
          const float* dO = dout + (int64_t(b) * T + q0) * os + qoff;
          const float* o = out + (int64_t(b) * T + q0) * os + qoff;
          const float* lrow = lse + (int64_t(b) * NH + h) * T + q0;
          const int32_t* doc = dm.doc_start ? dm.doc_start + int64_t(b) * T : nullptr;
          for (int i = 0; i < nq; ++i) {
            float sdo = 0.f;
#pragma omp simd reduction(+ : sdo)
            for (int d = 0; d < HS; ++d) sdo += dO[i * os + d] * o[i * os + d];
            D[i] = sdo;
          }
          std::fill(dq.begin(), dq.end(), 0.f);
          for (int kti = tile_first_key(doc, q0, nq) / TILE; kti <= qt; ++kti) {
            const int k0 = kti * TILE, nk = std::min(TILE, T - k0);
            const float* k = base + int64_t(k0) * rs + koff;
            const float* v = base + int64_t(k0) * rs + voff;
            transpose_tile(kt.data(), k, rs, nk, HS);
            transpose_tile(vt.data(), v, rs, nk, HS);
            tile_scores<HSC>(p.data(), q, rs, nq, kt.data(), scale, HS);   // S
            tile_scores<HSC>(ds.data(), dO, os, nq, vt.data(), 1.0f, HS);  // dP = dO V^T
            for (int i = 0; i < nq; ++i) {
              const int valid = std::min(nk, q0 + i - k0 + 1);
              const int first = doc ? std::max(0, doc[q0 + i] - k0) : 0;
              float* pi = p.data() + i * TILE;
              float* dsi = ds.data() + i * TILE;
              const float li = lrow[i], Di = D[i];
#pragma omp simd
              for (int j = 0; j < TILE; ++j) {
                float pj = j >= first && j < valid ? fast_exp(pi[j] - li) : 0.f;
                pi[j] = pj;
                dsi[j] = pj * (dsi[j] - Di) * scale;
              }
            }
            // Rows past the tile's end hold stale values; zero them so column sums skip them.
            for (int i = nq; i < TILE; ++i) {
              std::fill_n(p.data() + i * TILE, TILE, 0.f);
              std::fill_n(ds.data() + i * TILE, TILE, 0.f);
            }
            float* dk = dbase + int64_t(k0) * rs + koff;
            float* dv = dbase + int64_t(k0) * rs + voff;
            int j = 0, i = 0;
            if constexpr (HSC > 0) {
              for (; j + 4 <= nk; j += 4) {
                weighted_rows4<HSC>(dv + j * rs, rs, p.data() + j, TILE, 1, dO, os, nq);
                weighted_rows4<HSC>(dk + j * rs, rs, ds.data() + j, TILE, 1, q, rs, nq);
              }
              for (; i + 4 <= nq; i += 4)
                weighted_rows4<HSC>(dq.data() + size_t(i) * HS, HS, ds.data() + i * TILE, 1, TILE, k, rs, nk);
            }
            for (; j < nk; ++j) {
              weighted_rows<HSC>(dv + j * rs, p.data() + j, TILE, dO, os, nq, HS);
              weighted_rows<HSC>(dk + j * rs, ds.data() + j, TILE, q, rs, nq, HS);
            }
            for (; i < nq; ++i) weighted_rows<HSC>(dq.data() + size_t(i) * HS, ds.data() + i * TILE, 1, k, rs, nk, HS);
          }
          for (int i = 0; i < nq; ++i) std::copy_n(dq.data() + size_t(i) * HS, HS, dbase + int64_t(q0 + i) * rs + qoff);
        }
      }
    }
  }
}

}  // namespace

void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, int n, int NH, int KVH,
                      int HS) {
  const int group = NH / KVH;
  const int64_t ks = int64_t(KVH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    std::vector<float> s(n);
#pragma omp for schedule(static)
    for (int h = 0; h < NH; ++h) {
      const float* qh = q + int64_t(h) * HS;
      const int64_t off = int64_t(h / group) * HS;
      float mx = kNegInf;
      for (int j = 0; j < n; ++j) {
        const float* kj = kcache + j * ks + off;
        float d = 0.f;
#pragma omp simd reduction(+ : d)
        for (int i = 0; i < HS; ++i) d += qh[i] * kj[i];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      float sum = 0.f;
      for (int j = 0; j < n; ++j) sum += (s[j] = fast_exp(s[j] - mx));
      float* o = out + int64_t(h) * HS;
      std::fill_n(o, HS, 0.f);
      for (int j = 0; j < n; ++j) {
        const float p = s[j] / sum;
        const float* vj = vcache + j * ks + off;
#pragma omp simd
        for (int i = 0; i < HS; ++i) o[i] += p * vj[i];
      }
    }
  }
}

void attention_doc_start(int32_t* doc_start, const int32_t* positions, int B, int T) {
  for (int64_t r = 0; r < int64_t(B) * T; ++r) doc_start[r] = std::max<int32_t>(0, int32_t(r % T) - positions[r]);
}

void attention_window_start(int32_t* doc_start, int B, int T, int W) {
  for (int64_t r = 0; r < int64_t(B) * T; ++r) doc_start[r] = std::max<int32_t>(doc_start[r], int32_t(r % T) - W + 1);
}

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d) {
  if (d.HS == 64)
    forward_impl<64>(out, lse, qkv, d);
  else if (d.HS == 128)
    forward_impl<128>(out, lse, qkv, d);
  else
    forward_impl<0>(out, lse, qkv, d);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d) {
  if (d.HS == 64)
    backward_impl<64>(dqkv, dout, qkv, out, lse, d);
  else if (d.HS == 128)
    backward_impl<128>(dqkv, dout, qkv, out, lse, d);
  else
    backward_impl<0>(dqkv, dout, qkv, out, lse, d);
}

}  // namespace zt::kernels
