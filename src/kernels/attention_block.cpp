// attention_block.cpp: unmasked attention of a query block against a key / value block
// (attention_block.h), in 64 x 64 tiles with an online softmax like attention.cpp, whose
// tile steps (softmax_tile, backward_tile) it shares. Every key is visible to every query,
// so the causal bound of those steps is lifted by placing the queries after the last key.
// Forward: one task per (batch, query head). Backward: one task per (batch, key / value
// head), which owns its dK, dV and its heads' dQ: no two threads write one gradient, and the
// summation order is fixed (run-to-run identical results).
// The products are plain loops vectorized along a contiguous axis (keys transposed once per
// task to (HS, keys)); slower than attention.cpp's register-blocked micro-kernel, and used for
// the off-diagonal half of each rank's work under context parallelism only.
#include "kernels/attention_block.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_tiles.h"

namespace zt::kernels {
namespace {
using namespace attn_tiles;

// dst (HS, ld) = head column block [col, col + HS) of rows [0, n) of src, transposed and
// zero-padded to ld columns.
void transpose_head(float* dst, int64_t ld, Strided<const float> src, int64_t b, int64_t col, int n, int HS) {
  for (int j = 0; j < n; ++j) {
    const float* r = src.at(b, j) + col;
    for (int d = 0; d < HS; ++d) dst[d * ld + j] = r[d];
  }
  for (int d = 0; d < HS; ++d) std::fill(dst + d * ld + n, dst + (d + 1) * ld, 0.f);
}

// s (rows, TILE) = a rows (HS each, row i at a(i)) @ bt (HS, TILE; stride ld) * scale.
template <class RowAt>
void scores(float* s, int rows, const RowAt& a, const float* bt, int64_t ld, float scale, int HS) {
  for (int i = 0; i < rows; ++i) {
    float acc[TILE] = {};
    const float* ai = a(i);
    for (int d = 0; d < HS; ++d) {
      const float ad = ai[d] * scale;
      const float* bd = bt + d * ld;
#pragma omp simd
      for (int j = 0; j < TILE; ++j) acc[j] += ad * bd[j];
    }
    std::copy_n(acc, TILE, s + i * TILE);
  }
}

inline void axpy(float* y, float a, const float* x, int n) {
#pragma omp simd
  for (int d = 0; d < n; ++d) y[d] += a * x[d];
}

}  // namespace

void attention_block_forward(Strided<float> out, float* lse, Strided<const float> q, Strided<const float> k,
                             Strided<const float> v, const BlockDims& dm) {
  const int NH = dm.NH, HS = dm.HS, group = NH / dm.KVH, nk = dm.nk, nq_all = dm.nq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t ld = int64_t((nk + TILE - 1) / TILE) * TILE;
  const int64_t tasks = int64_t(dm.B) * NH;
#pragma omp parallel
  {
    std::vector<float> kt(size_t(HS) * ld), s(TILE * TILE), acc(size_t(TILE) * HS), m(TILE), l(TILE), corr(TILE);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int h = int(task % NH), b = int(task / NH), g = h / group;
      transpose_head(kt.data(), ld, k, b, int64_t(g) * HS, nk, HS);
      for (int q0 = 0; q0 < nq_all; q0 += TILE) {
        const int nq = std::min(TILE, nq_all - q0);
        std::fill(acc.begin(), acc.end(), 0.f);
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.f);
        for (int k0 = 0; k0 < nk; k0 += TILE) {
          const int nkt = std::min(TILE, nk - k0);
          scores(
              s.data(), nq, [&](int i) { return q.at(b, q0 + i) + int64_t(h) * HS; }, kt.data() + k0, ld, scale, HS);
          int jmin, jmax;
          // Query position nk: past every key, so all of the tile's keys are visible.
          softmax_tile(s.data(), nq, nk, k0, nkt, nullptr, 1.0f, m.data(), l.data(), corr.data(), &jmin, &jmax);
          for (int i = 0; i < nq; ++i) {
            float* ai = acc.data() + size_t(i) * HS;
            const float c = corr[i];
#pragma omp simd
            for (int d = 0; d < HS; ++d) ai[d] *= c;
            const float* si = s.data() + i * TILE;
            for (int j = jmin; j < jmax; ++j) axpy(ai, si[j], v.at(b, k0 + j) + int64_t(g) * HS, HS);
          }
        }
        for (int i = 0; i < nq; ++i) {
          const float inv = 1.0f / l[i];
          float* o = out.at(b, q0 + i) + int64_t(h) * HS;
          for (int d = 0; d < HS; ++d) o[d] = acc[size_t(i) * HS + d] * inv;
          lse[b * dm.lse_b + h * dm.lse_h + q0 + i] = m[i] + std::log(l[i]);
        }
      }
    }
  }
}

void attention_block_backward(Strided<float> dq, Strided<float> dk, Strided<float> dv, Strided<const float> dout,
                              const float* lse, const float* D, Strided<const float> q, Strided<const float> k,
                              Strided<const float> v, const BlockDims& dm) {
  const int NH = dm.NH, KVH = dm.KVH, HS = dm.HS, group = NH / KVH, nk = dm.nk, nq_all = dm.nq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t ld = int64_t((nk + TILE - 1) / TILE) * TILE;
  const int64_t tasks = int64_t(dm.B) * KVH;
#pragma omp parallel
  {
    std::vector<float> kt(size_t(HS) * ld), vt(size_t(HS) * ld), p(TILE * TILE), ds(TILE * TILE),
        dqa(size_t(TILE) * HS), dka(size_t(nk) * HS), dva(size_t(nk) * HS);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int g = int(task % KVH), b = int(task / KVH);
      const int64_t gc = int64_t(g) * HS;
      transpose_head(kt.data(), ld, k, b, gc, nk, HS);
      transpose_head(vt.data(), ld, v, b, gc, nk, HS);
      std::fill(dka.begin(), dka.end(), 0.f);
      std::fill(dva.begin(), dva.end(), 0.f);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const int64_t hc = int64_t(h) * HS;
        for (int q0 = 0; q0 < nq_all; q0 += TILE) {
          const int nq = std::min(TILE, nq_all - q0);
          const float* lrow = lse + b * dm.lse_b + h * dm.lse_h + q0;
          const float* Drow = D + b * dm.lse_b + h * dm.lse_h + q0;
          auto qrow = [&](int i) { return q.at(b, q0 + i) + hc; };
          auto dorow = [&](int i) { return dout.at(b, q0 + i) + hc; };
          std::fill(dqa.begin(), dqa.end(), 0.f);
          for (int k0 = 0; k0 < nk; k0 += TILE) {
            const int nkt = std::min(TILE, nk - k0);
            scores(p.data(), nq, qrow, kt.data() + k0, ld, scale, HS);   // S
            scores(ds.data(), nq, dorow, vt.data() + k0, ld, 1.0f, HS);  // dP = dO V^T
            backward_tile(p.data(), ds.data(), nq, nk, k0, nkt, nullptr, lrow, Drow, 1.0f, scale);
            for (int j = 0; j < nkt; ++j) {
              float* dvj = dva.data() + size_t(k0 + j) * HS;
              float* dkj = dka.data() + size_t(k0 + j) * HS;
              for (int i = 0; i < nq; ++i) {
                axpy(dvj, p[i * TILE + j], dorow(i), HS);  // dV += P^T dO
                axpy(dkj, ds[i * TILE + j], qrow(i), HS);  // dK += dS^T Q
              }
            }
            for (int i = 0; i < nq; ++i) {
              float* dqi = dqa.data() + size_t(i) * HS;
              const float* dsi = ds.data() + i * TILE;
              for (int j = 0; j < nkt; ++j) axpy(dqi, dsi[j], k.at(b, k0 + j) + gc, HS);  // dQ += dS K
            }
          }
          for (int i = 0; i < nq; ++i) axpy(dq.at(b, q0 + i) + hc, 1.0f, dqa.data() + size_t(i) * HS, HS);
        }
      }
      for (int j = 0; j < nk; ++j) {
        axpy(dk.at(b, j) + gc, 1.0f, dka.data() + size_t(j) * HS, HS);
        axpy(dv.at(b, j) + gc, 1.0f, dva.data() + size_t(j) * HS, HS);
      }
    }
  }
}

}  // namespace zt::kernels
