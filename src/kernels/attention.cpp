// attention.cpp: flash attention forward and backward on the CPU.
// Work is cut into 64x64 tiles of (query rows) x (keys). Inside a tile every product
// runs along a contiguous axis so it vectorizes without horizontal sums: a task's keys
// (and values) are transposed once into (HS, T) so that a score row is a sum of
// key-vectors scaled by q's elements. Forward: one task per (batch, query head), its
// query tiles each an online softmax over key tiles. Backward: one task per (batch, key/value head), which owns
// its dK, dV and its heads' dQ, so no two threads write one gradient (no atomics,
// a fixed summation order, run-to-run identical results).
// The head size is a template parameter for the common 64 and 128 so the compiler
// keeps the per-row accumulators in registers; other sizes take the generic path.
// Packed documents (AttnDims::doc_start): key tiles wholly before the earliest
// document start of a query tile are skipped, so a packed row costs roughly the sum of
// its documents' causal costs (plus partial tiles); inside a tile, keys before a row's
// start are masked like the causal future.
// Compiled once per Highway target (kernels/isa.h); the public functions dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_tiles-inl.h"
#include "kernels/fast_math.h"

HWY_BEFORE_NAMESPACE();
namespace zt::kernels::HWY_NAMESPACE {
namespace {
using namespace attn_tiles;

// acc rows [i, i + 4) (HS each) += p rows [i, i + 4) (TILE each, zero outside each row's
// visible keys) @ v rows [j0, j1): four query rows share every load of a value row.
template <int HSC>
inline void pv_rows4(float* acc, const float* p, const float* v, int64_t rs, int j0, int j1) {
  for (int c = 0; c < HSC; c += 64) fma4x64(acc + c, HSC, true, p + j0, TILE, 1, v + j0 * rs + c, rs, j1 - j0);
}

// One task per (batch, query head): the head's keys are transposed once, then its query
// tiles run an online softmax over their key tiles.
template <int HSC>
void forward_impl(float* out, float* lse, const float* qkv, const AttnDims& dm) {
  const int T = dm.T, NH = dm.NH, KVH = dm.KVH, HS = HSC ? HSC : dm.HS, group = NH / KVH;
  const int64_t rs = dm.row_stride(), os = int64_t(NH) * HS;
  const float scale = dm.softmax_scale();
  const int ntiles = (T + TILE - 1) / TILE;
  const int64_t ld = int64_t(ntiles) * TILE;
  const int64_t tasks = int64_t(dm.B) * NH;
#pragma omp parallel
  {
    std::vector<float> kt(size_t(HS) * ld), s(TILE * TILE), acc(size_t(TILE) * HS), m(TILE), l(TILE), corr(TILE);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int h = int(task % NH), b = int(task / NH), g = h / group;
      const float* base = qkv + int64_t(b) * T * rs;
      const int32_t* doc = dm.doc_start ? dm.doc_start + int64_t(b) * T : nullptr;
      transpose_rows(kt.data(), ld, base + int64_t(NH + g) * HS, rs, T, HS);
      const float* vbase = base + int64_t(NH + KVH + g) * HS;
      for (int qt = 0; qt < ntiles; ++qt) {
        const int q0 = qt * TILE, nq = std::min(TILE, T - q0);
        const float* q = base + int64_t(q0) * rs + int64_t(h) * HS;
        std::fill(acc.begin(), acc.end(), 0.f);
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.f);
        for (int kt_i = tile_first_key(doc, q0, nq) / TILE; kt_i <= qt; ++kt_i) {
          const int k0 = kt_i * TILE, nk = std::min(TILE, T - k0);
          tile_scores(s.data(), q, rs, nq, kt.data() + k0, ld, scale, HS, HSC > 0);
          if (dm.softcap > 0.f) softcap_tile(s.data(), nullptr, nq, nk, dm.softcap);
          int jmin, jmax;  // the keys any row of the tile sees
          softmax_tile(s.data(), nq, q0, k0, nk, doc, 1.0f, m.data(), l.data(), corr.data(), &jmin, &jmax);
          for (int i = 0; i < nq; ++i) {
            float* ai = acc.data() + size_t(i) * HS;
            const float c = corr[i];
#pragma omp simd
            for (int d = 0; d < HS; ++d) ai[d] *= c;
          }
          if (jmin >= jmax) continue;
          const float* v = vbase + int64_t(k0) * rs;
          int i = 0;
          if constexpr (HSC > 0)
            for (; i + 4 <= nq; i += 4)
              pv_rows4<HSC>(acc.data() + size_t(i) * HS, s.data() + i * TILE, v, rs, jmin, jmax);
          for (; i < nq; ++i) {
            const float* si = s.data() + i * TILE;
            float* ai = acc.data() + size_t(i) * HS;
            for (int j = jmin; j < jmax; ++j) {
              const float p = si[j];
              const float* vj = v + j * rs;
#pragma omp simd
              for (int d = 0; d < HS; ++d) ai[d] += p * vj[d];
            }
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
  for (int c = 0; c < HSC; c += 64) fma4x64(acc + c, astride, true, w, wk, wstride, rows + c, rstride, n);
}

template <int HSC>
void backward_impl(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const AttnDims& dm) {
  const int T = dm.T, NH = dm.NH, KVH = dm.KVH, HS = HSC ? HSC : dm.HS, group = NH / KVH;
  const int64_t rs = dm.row_stride(), os = int64_t(NH) * HS;
  const float scale = dm.softmax_scale();
  const int ntiles = (T + TILE - 1) / TILE;
  const int64_t ld = int64_t(ntiles) * TILE;
  const int64_t tasks = int64_t(dm.B) * KVH;
#pragma omp parallel
  {
    std::vector<float> kt(size_t(HS) * ld), vt(size_t(HS) * ld), p(TILE * TILE), ds(TILE * TILE), dq(size_t(TILE) * HS),
        D(TILE);
    const bool cap = dm.softcap > 0.f;
    std::vector<float> dcap(cap ? TILE * TILE : 0);  // 1 - tanh^2 of the capped tile
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
      // The group's keys and values transposed once for all its heads and tiles.
      transpose_rows(kt.data(), ld, base + koff, rs, T, HS);
      transpose_rows(vt.data(), ld, base + voff, rs, T, HS);
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
            tile_scores(p.data(), q, rs, nq, kt.data() + k0, ld, scale, HS, HSC > 0);  // S
            if (cap) softcap_tile(p.data(), dcap.data(), nq, nk, dm.softcap);
            tile_scores(ds.data(), dO, os, nq, vt.data() + k0, ld, 1.0f, HS, HSC > 0);  // dP = dO V^T
            backward_tile(p.data(), ds.data(), nq, q0, k0, nk, doc, lrow, D.data(), 1.0f, scale);
            if (cap)  // through the cap: dS_raw = dS (1 - tanh^2)
              for (int i = 0; i < nq; ++i)
#pragma omp simd
                for (int j = 0; j < nk; ++j) ds[size_t(i) * TILE + j] *= dcap[size_t(i) * TILE + j];
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

void attention_decode_impl(float* out, const float* q, const float* kcache, const float* vcache, int n, int NH, int KVH,
                           int HS, float scale_in, float softcap) {
  const int group = NH / KVH;
  const int64_t ks = int64_t(KVH) * HS;
  const float scale = scale_in > 0.f ? scale_in : 1.0f / std::sqrt(static_cast<float>(HS));
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
        s[j] = softcap > 0.f ? softcap * std::tanh(d * scale / softcap) : d * scale;
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

void attention_forward_impl(float* out, float* lse, const float* qkv, const AttnDims& d) {
  if (d.HS == 64)
    forward_impl<64>(out, lse, qkv, d);
  else if (d.HS == 128)
    forward_impl<128>(out, lse, qkv, d);
  else
    forward_impl<0>(out, lse, qkv, d);
}

void attention_backward_impl(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             const AttnDims& d) {
  if (d.HS == 64)
    backward_impl<64>(dqkv, dout, qkv, out, lse, d);
  else if (d.HS == 128)
    backward_impl<128>(dqkv, dout, qkv, out, lse, d);
  else
    backward_impl<0>(dqkv, dout, qkv, out, lse, d);
}

}  // namespace zt::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zt::kernels {
HWY_EXPORT(attention_forward_impl);
HWY_EXPORT(attention_backward_impl);
HWY_EXPORT(attention_decode_impl);

void attention_doc_start(int32_t* doc_start, const int32_t* positions, int B, int T) {
  for (int64_t r = 0; r < int64_t(B) * T; ++r) doc_start[r] = std::max<int32_t>(0, int32_t(r % T) - positions[r]);
}

void attention_window_start(int32_t* doc_start, int B, int T, int W) {
  for (int64_t r = 0; r < int64_t(B) * T; ++r) doc_start[r] = std::max<int32_t>(doc_start[r], int32_t(r % T) - W + 1);
}

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d) {
  HWY_DYNAMIC_DISPATCH(attention_forward_impl)(out, lse, qkv, d);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d) {
  HWY_DYNAMIC_DISPATCH(attention_backward_impl)(dqkv, dout, qkv, out, lse, d);
}

void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, int n, int NH, int KVH,
                      int HS, float scale, float softcap) {
  HWY_DYNAMIC_DISPATCH(attention_decode_impl)(out, q, kcache, vcache, n, NH, KVH, HS, scale, softcap);
}
}  // namespace zt::kernels
#endif
