// attention_block.cpp: unmasked attention of a query block against a key / value block
// (attention_block.h), in 64 x 64 tiles with an online softmax like attention.cpp, whose
// tile steps (tile_scores, softcap_tile, softmax_tile, backward_tile) it shares. Every key is visible
// to every query, so the causal bound of those steps is lifted by placing the queries after the
// last key; a sliding window's first visible key per query (BlockDims::first) takes the place of
// their document start, and key tiles before a query tile's earliest such key are skipped.
// Forward: one task per (batch, query head). Backward: one task per (batch, key / value
// head), which owns its dK, dV and its heads' dQ: no two threads write one gradient, and the
// summation order is fixed (run-to-run identical results).
// The products use attention.cpp's 4 x 64 micro-kernel (attention_tiles.h fma4x64) when the
// head size is a multiple of 64, plain vectorized loops otherwise; keys and values are
// transposed once per task to (HS, keys).
// Compiled once per Highway target (kernels/isa.h); the public functions dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_block.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_block.h"
#include "kernels/attention_tiles-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zt::kernels::HWY_NAMESPACE {
namespace {
using namespace attn_tiles;

// acc rows [0, n) (HS each, stride HS) += sum over k < m of w[i * wi + k * wk] * x rows k
// (stride xs): the products P V, P^T dO, dS^T Q and dS K. Four accumulator rows at a time
// through the micro-kernel (HS a multiple of 64), the rest with plain loops.
void weighted(float* acc, int n, const float* w, int64_t wi, int64_t wk, const float* x, int64_t xs, int m, int HS) {
  int i = 0;
  if (HS % 64 == 0)
    for (; i + 4 <= n; i += 4)
      for (int c = 0; c < HS; c += 64) fma4x64(acc + int64_t(i) * HS + c, HS, true, w + i * wi, wi, wk, x + c, xs, m);
  for (; i < n; ++i) {
    float* ai = acc + int64_t(i) * HS;
    for (int k = 0; k < m; ++k) {
      const float wv = w[i * wi + k * wk];
      const float* xk = x + k * xs;
#pragma omp simd
      for (int d = 0; d < HS; ++d) ai[d] += wv * xk[d];
    }
  }
}

// A query tile's window bounds where the tile steps read a row's first key: the steps place the
// queries at position nk, so row i's bound goes to doc[nk + i]. Null without a window.
const int32_t* window_rows(std::vector<int32_t>& doc, const int32_t* first, int q0, int nq, int nk) {
  if (!first) return nullptr;
  std::copy_n(first + q0, nq, doc.data() + nk);
  return doc.data();
}

}  // namespace

void attention_block_forward_impl(Strided<float> out, float* lse, Strided<const float> q, Strided<const float> k,
                                  Strided<const float> v, const BlockDims& dm) {
  const int NH = dm.NH, HS = dm.HS, group = NH / dm.KVH, nk = dm.nk, nq_all = dm.nq;
  const float scale = dm.softmax_scale();
  const int64_t ld = int64_t((nk + TILE - 1) / TILE) * TILE;
  const int64_t tasks = int64_t(dm.B) * NH;
#pragma omp parallel
  {
    std::vector<float> kt(size_t(HS) * ld), s(TILE * TILE), acc(size_t(TILE) * HS), m(TILE), l(TILE), corr(TILE);
    std::vector<int32_t> doc(dm.first ? size_t(nk) + TILE : 0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int h = int(task % NH), b = int(task / NH), g = h / group;
      transpose_rows(kt.data(), ld, k.at(b, 0) + int64_t(g) * HS, k.rs, nk, HS);
      const float* vb = v.at(b, 0) + int64_t(g) * HS;
      for (int q0 = 0; q0 < nq_all; q0 += TILE) {
        const int nq = std::min(TILE, nq_all - q0);
        // The tile steps place the queries at position nk (past every key); a window's first keys
        // go where they look for a row's document start.
        const int32_t* first = window_rows(doc, dm.first, q0, nq, nk);
        std::fill(acc.begin(), acc.end(), 0.f);
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.f);
        for (int k0 = tile_first_key(first, nk, nq) / TILE * TILE; k0 < nk; k0 += TILE) {
          const int nkt = std::min(TILE, nk - k0);
          tile_scores(s.data(), q.at(b, q0) + int64_t(h) * HS, q.rs, nq, kt.data() + k0, ld, scale, HS, HS % 64 == 0);
          if (dm.softcap > 0.f) softcap_tile(s.data(), nullptr, nq, nkt, dm.softcap);
          int jmin, jmax;
          softmax_tile(s.data(), nq, nk, k0, nkt, first, 1.0f, m.data(), l.data(), corr.data(), &jmin, &jmax);
          for (int i = 0; i < nq; ++i) {
            float* ai = acc.data() + size_t(i) * HS;
            const float c = corr[i];
#pragma omp simd
            for (int d = 0; d < HS; ++d) ai[d] *= c;
          }
          if (jmin < jmax)  // acc += P V
            weighted(acc.data(), nq, s.data() + jmin, TILE, 1, vb + (k0 + jmin) * v.rs, v.rs, jmax - jmin, HS);
        }
        for (int i = 0; i < nq; ++i) {
          const bool none = l[i] == 0.f;  // a row whose window ends before these keys
          const float inv = none ? 0.f : 1.0f / l[i];
          float* o = out.at(b, q0 + i) + int64_t(h) * HS;
          for (int d = 0; d < HS; ++d) o[d] = acc[size_t(i) * HS + d] * inv;
          lse[b * dm.lse_b + h * dm.lse_h + q0 + i] = none ? kNegInf : m[i] + std::log(l[i]);
        }
      }
    }
  }
}

void attention_block_backward_impl(Strided<float> dq, Strided<float> dk, Strided<float> dv, Strided<const float> dout,
                                   const float* lse, const float* D, Strided<const float> q, Strided<const float> k,
                                   Strided<const float> v, const BlockDims& dm) {
  const int NH = dm.NH, KVH = dm.KVH, HS = dm.HS, group = NH / KVH, nk = dm.nk, nq_all = dm.nq;
  const float scale = dm.softmax_scale();
  const int64_t ld = int64_t((nk + TILE - 1) / TILE) * TILE;
  const int64_t tasks = int64_t(dm.B) * KVH;
  const bool cap = dm.softcap > 0.f;
#pragma omp parallel
  {
    std::vector<float> kt(size_t(HS) * ld), vt(size_t(HS) * ld), p(TILE * TILE), ds(TILE * TILE),
        dqa(size_t(TILE) * HS), dka(size_t(nk) * HS), dva(size_t(nk) * HS), dcap(cap ? TILE * TILE : 0);
    std::vector<int32_t> doc(dm.first ? size_t(nk) + TILE : 0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int g = int(task % KVH), b = int(task / KVH);
      const int64_t gc = int64_t(g) * HS;
      const float* kb = k.at(b, 0) + gc;
      transpose_rows(kt.data(), ld, kb, k.rs, nk, HS);
      transpose_rows(vt.data(), ld, v.at(b, 0) + gc, v.rs, nk, HS);
      std::fill(dka.begin(), dka.end(), 0.f);
      std::fill(dva.begin(), dva.end(), 0.f);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const int64_t hc = int64_t(h) * HS;
        for (int q0 = 0; q0 < nq_all; q0 += TILE) {
          const int nq = std::min(TILE, nq_all - q0);
          const float* lrow = lse + b * dm.lse_b + h * dm.lse_h + q0;
          const float* Drow = D + b * dm.lse_b + h * dm.lse_h + q0;
          const float* qr = q.at(b, q0) + hc;
          const float* dor = dout.at(b, q0) + hc;
          const int32_t* first = window_rows(doc, dm.first, q0, nq, nk);
          std::fill(dqa.begin(), dqa.end(), 0.f);
          for (int k0 = tile_first_key(first, nk, nq) / TILE * TILE; k0 < nk; k0 += TILE) {
            const int nkt = std::min(TILE, nk - k0);
            tile_scores(p.data(), qr, q.rs, nq, kt.data() + k0, ld, scale, HS, HS % 64 == 0);  // S
            if (cap) softcap_tile(p.data(), dcap.data(), nq, nkt, dm.softcap);
            tile_scores(ds.data(), dor, dout.rs, nq, vt.data() + k0, ld, 1.0f, HS, HS % 64 == 0);  // dP = dO V^T
            backward_tile(p.data(), ds.data(), nq, nk, k0, nkt, first, lrow, Drow, 1.0f, scale);
            if (cap)  // through the cap: dS_raw = dS (1 - tanh^2)
              for (int i = 0; i < nq; ++i)
#pragma omp simd
                for (int j = 0; j < nkt; ++j) ds[size_t(i) * TILE + j] *= dcap[size_t(i) * TILE + j];
            float* dvk = dva.data() + size_t(k0) * HS;
            float* dkk = dka.data() + size_t(k0) * HS;
            weighted(dvk, nkt, p.data(), 1, TILE, dor, dout.rs, nq, HS);                           // dV += P^T dO
            weighted(dkk, nkt, ds.data(), 1, TILE, qr, q.rs, nq, HS);                              // dK += dS^T Q
            weighted(dqa.data(), nq, ds.data(), TILE, 1, kb + int64_t(k0) * k.rs, k.rs, nkt, HS);  // dQ += dS K
          }
          for (int i = 0; i < nq; ++i) {
            float* o = dq.at(b, q0 + i) + hc;
            const float* a = dqa.data() + size_t(i) * HS;
#pragma omp simd
            for (int d = 0; d < HS; ++d) o[d] += a[d];
          }
        }
      }
      for (int j = 0; j < nk; ++j) {
        float* dkj = dk.at(b, j) + gc;
        float* dvj = dv.at(b, j) + gc;
        const float* ka = dka.data() + size_t(j) * HS;
        const float* va = dva.data() + size_t(j) * HS;
#pragma omp simd
        for (int d = 0; d < HS; ++d) dkj[d] += ka[d], dvj[d] += va[d];
      }
    }
  }
}

}  // namespace zt::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zt::kernels {
HWY_EXPORT(attention_block_forward_impl);
HWY_EXPORT(attention_block_backward_impl);

void attention_block_forward(Strided<float> out, float* lse, Strided<const float> q, Strided<const float> k,
                             Strided<const float> v, const BlockDims& d) {
  HWY_DYNAMIC_DISPATCH(attention_block_forward_impl)(out, lse, q, k, v, d);
}

void attention_block_backward(Strided<float> dq, Strided<float> dk, Strided<float> dv, Strided<const float> dout,
                              const float* lse, const float* D, Strided<const float> q, Strided<const float> k,
                              Strided<const float> v, const BlockDims& d) {
  HWY_DYNAMIC_DISPATCH(attention_block_backward_impl)(dq, dk, dv, dout, lse, D, q, k, v, d);
}
}  // namespace zt::kernels
#endif
