// attention_tiles-inl.h: what the fp32 and bf16 flash-attention kernels share (attention.cpp,
// attention_bf16.cpp; the fp32 ones also with ring attention's unmasked blocks,
// attention_block.cpp): the tile size, the first key a query tile may see, a masked row
// maximum, the keys' transpose, the 4 x 64 multiply-add micro-kernel, the soft-cap and the
// softmax / backward tile steps. Internal to src/kernels. A Highway "-inl" header: included by files
// that foreach_target compiles once per target, it is compiled into each target's namespace
// (the guard toggles per target), so every target gets its own vector width.
#if defined(ZT_KERNELS_ATTENTION_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZT_KERNELS_ATTENTION_TILES_INL_H_
#undef ZT_KERNELS_ATTENTION_TILES_INL_H_
#else
#define ZT_KERNELS_ATTENTION_TILES_INL_H_
#endif
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/fast_math.h"

HWY_BEFORE_NAMESPACE();
namespace zt::kernels::HWY_NAMESPACE::attn_tiles {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int TILE = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The first key any row of a query tile [q0, q0 + nq) may see: 0 without documents.
inline int tile_first_key(const int32_t* doc, int q0, int nq) {
  if (!doc) return 0;
  int lo = q0 + nq - 1;
  for (int i = 0; i < nq; ++i) lo = std::min(lo, int(doc[q0 + i]));
  return std::max(lo, 0);
}

// max(init, s[j] for first <= j < valid), s a TILE-float row: vectorized by hand, because the
// compiler leaves a float max-reduction scalar (NaN ordering) even under omp simd.
inline float row_max(const float* s, int first, int valid, float init) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int N = int(hn::Lanes(d));
  auto mx = hn::Set(d, init);
  const auto lo = hn::Set(di, first), hi = hn::Set(di, valid);
  for (int c = 0; c < TILE; c += N) {
    const auto j = hn::Iota(di, c);
    const auto in = hn::RebindMask(d, hn::AndNot(hn::Lt(j, lo), hn::Lt(j, hi)));
    mx = hn::IfThenElse(in, hn::Max(mx, hn::LoadU(d, s + c)), mx);
  }
  return hn::GetLane(hn::MaxOfLanes(d, mx));
}

// dst (HS, ld) = src rows (n, HS) transposed, zero-padded to columns [n, ld): a head's keys
// (or values) transposed once per task, so the score products of every tile read key
// columns contiguously. Rows are read 16 at a time so each written line gets 16 values.
inline void transpose_rows(float* dst, int64_t ld, const float* src, int64_t stride, int n, int HS) {
  int j0 = 0;
  for (; j0 + 16 <= n; j0 += 16)
    for (int d = 0; d < HS; ++d) {
      float* o = dst + d * ld + j0;
#pragma omp simd
      for (int j = 0; j < 16; ++j) o[j] = src[(j0 + j) * stride + d];
    }
  for (int j = j0; j < n; ++j)
    for (int d = 0; d < HS; ++d) dst[d * ld + j] = src[j * stride + d];
  for (int d = 0; d < HS; ++d) std::fill(dst + d * ld + n, dst + (d + 1) * ld, 0.f);
}

// The one micro-kernel behind every product of a tile: four accumulator rows of 64 floats
// (acc + k * astride, k < 4) get sum_j w[k * wk + j * wj] * x[j * xs + c] over j < n,
// added to them (accumulate) or written (not). Four rows x V vectors of accumulators stay in
// registers while each vector of x is loaded once for four multiply-adds: V = 4 where the
// register file has 32 vectors (AVX-512: the whole 64 columns in one pass; NEON), V = 2 on
// AVX2's 16 (a pass per 16 columns). Written with Highway ops because the compiler spilled
// the same loop written over arrays. Every element sums over j in order, like the scalable
// targets' (SVE: sizeless vectors cannot form arrays) portable form below.
inline void fma4x64(float* acc, int64_t astride, bool accumulate, const float* w, int64_t wk, int64_t wj,
                    const float* x, int64_t xs, int n) {
#if !HWY_HAVE_SCALABLE
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr int N = int(hn::MaxLanes(d));
  constexpr int kVecs = HWY_ARCH_X86 && HWY_TARGET >= HWY_AVX2 ? 2 : 4;
  constexpr int kCols = kVecs * N < TILE ? kVecs * N : TILE;
  constexpr int kUse = kCols / N;
  for (int c0 = 0; c0 < TILE; c0 += kCols) {
    V r[4][kUse];
    for (int k = 0; k < 4; ++k)
      for (int c = 0; c < kUse; ++c) r[k][c] = accumulate ? hn::LoadU(d, acc + k * astride + c0 + c * N) : hn::Zero(d);
    for (int j = 0; j < n; ++j) {
      const float* xj = x + j * xs + c0;
      V xv[kUse];
      for (int c = 0; c < kUse; ++c) xv[c] = hn::LoadU(d, xj + c * N);
      const float* wjp = w + j * wj;
      for (int k = 0; k < 4; ++k) {
        const V b = hn::Set(d, wjp[k * wk]);
        for (int c = 0; c < kUse; ++c) r[k][c] = hn::MulAdd(b, xv[c], r[k][c]);
      }
    }
    for (int k = 0; k < 4; ++k)
      for (int c = 0; c < kUse; ++c) hn::StoreU(r[k][c], d, acc + k * astride + c0 + c * N);
  }
#else
  for (int k = 0; k < 4; ++k) {
    float r[64];
    for (int c = 0; c < 64; ++c) r[c] = accumulate ? acc[k * astride + c] : 0.f;
    for (int j = 0; j < n; ++j) {
      const float wv = w[k * wk + j * wj];
      const float* xj = x + j * xs;
#pragma omp simd
      for (int c = 0; c < 64; ++c) r[c] += wv * xj[c];
    }
    for (int c = 0; c < 64; ++c) acc[k * astride + c] = r[c];
  }
#endif
}

// s (rows, TILE) = a rows (HS each, row i at a + i * stride) @ bt (HS, TILE; row stride ldb) *
// scale: four rows at a time through fma4x64 when `micro` (the caller's head size is a multiple of
// 64), the rest one row at a time in the same order. The scores of both attention kernels.
inline void tile_scores(float* s, const float* a, int64_t stride, int rows, const float* bt, int64_t ldb, float scale,
                        int HS, bool micro) {
  int i = 0;
  if (micro)
    for (; i + 4 <= rows; i += 4) {
      fma4x64(s + i * TILE, TILE, false, a + i * stride, stride, 1, bt, ldb, HS);
      if (scale != 1.0f) {
#pragma omp simd
        for (int j = 0; j < 4 * TILE; ++j) s[i * TILE + j] *= scale;
      }
    }
  for (; i < rows; ++i) {
    float acc[TILE] = {};
    const float* ai = a + i * stride;
    for (int d = 0; d < HS; ++d) {
      const float ad = ai[d];
      const float* b = bt + d * ldb;
#pragma omp simd
      for (int j = 0; j < TILE; ++j) acc[j] += ad * b[j];
    }
#pragma omp simd
    for (int j = 0; j < TILE; ++j) s[i * TILE + j] = acc[j] * scale;
  }
}

// Gemma 2's soft-capping of a score tile in place: s = c tanh(s / c) over its nq x nk scores,
// and (dcap non-null) the derivative 1 - tanh^2 for backward. Plain std::tanh: the cap saturates
// scores far out, where an approximate tanh would lose the gradient's last digits.
inline void softcap_tile(float* s, float* dcap, int nq, int nk, float c) {
  for (int i = 0; i < nq; ++i)
    for (int j = 0; j < nk; ++j) {
      const float t = std::tanh(s[size_t(i) * TILE + j] / c);
      s[size_t(i) * TILE + j] = c * t;
      if (dcap) dcap[size_t(i) * TILE + j] = 1.0f - t * t;
    }
}

// One key tile of the forward's online softmax for query rows [0, nq) of a tile at q0 against
// keys from k0 (nk of them): scores s (rows of TILE, times `scale` first unless it is 1) become
// probabilities in place, zero outside each row's visible keys [first, valid); m / l (running max
// and sum) are updated and corr gets each row's rescale of its accumulator (1 for a row that sees
// no key here). Returns the span [*jmin, *jmax) of keys any row sees (empty: jmin >= jmax).
inline void softmax_tile(float* s, int nq, int q0, int k0, int nk, const int32_t* doc, float scale, float* m, float* l,
                         float* corr, int* jmin, int* jmax) {
  *jmin = TILE;
  *jmax = 0;
  for (int i = 0; i < nq; ++i) {
    float* si = s + i * TILE;
    const int valid = std::min(nk, q0 + i - k0 + 1);            // causal: keys <= query position
    const int first = doc ? std::max(0, doc[q0 + i] - k0) : 0;  // keys >= its document start
    if (first >= valid) {  // this row's document starts after this tile: nothing to add
      std::fill_n(si, TILE, 0.f);
      corr[i] = 1.f;
      continue;
    }
    *jmin = std::min(*jmin, first);
    *jmax = std::max(*jmax, valid);
    if (scale != 1.0f) {
#pragma omp simd
      for (int j = 0; j < TILE; ++j) si[j] *= scale;
    }
    const float mx = row_max(si, first, valid, m[i]);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < TILE; ++j) {
      float p = j >= first && j < valid ? fast_exp(si[j] - mx) : 0.f;
      si[j] = p;
      sum += p;
    }
    corr[i] = fast_exp(m[i] - mx);
    l[i] = l[i] * corr[i] + sum;
    m[i] = mx;
  }
}

// One key tile of the backward: scores p (times s_scale first; 1 when already scaled) become
// P = exp(S - lse) inside each row's visible keys and 0 outside, and dP in ds becomes
// dS = P (dP - D) scale. Rows nq..TILE of both are zeroed so column sums over a tile skip them.
inline void backward_tile(float* p, float* ds, int nq, int q0, int k0, int nk, const int32_t* doc, const float* lse,
                          const float* D, float s_scale, float scale) {
  for (int i = 0; i < nq; ++i) {
    const int valid = std::min(nk, q0 + i - k0 + 1);
    const int first = doc ? std::max(0, doc[q0 + i] - k0) : 0;
    float* pi = p + i * TILE;
    float* dsi = ds + i * TILE;
    const float li = lse[i], Di = D[i];
#pragma omp simd
    for (int j = 0; j < TILE; ++j) {
      float pj = j >= first && j < valid ? fast_exp(pi[j] * s_scale - li) : 0.f;
      pi[j] = pj;
      dsi[j] = pj * (dsi[j] - Di) * scale;
    }
  }
  for (int i = nq; i < TILE; ++i) {
    std::fill_n(p + i * TILE, TILE, 0.f);
    std::fill_n(ds + i * TILE, TILE, 0.f);
  }
}

}  // namespace zt::kernels::HWY_NAMESPACE::attn_tiles
HWY_AFTER_NAMESPACE();

#endif  // ZT_KERNELS_ATTENTION_TILES_INL_H_
