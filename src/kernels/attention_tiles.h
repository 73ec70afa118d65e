// attention_tiles.h: what the fp32 and bf16 flash-attention kernels share (attention.cpp,
// attention_bf16.cpp): the tile size, the first key a query tile may see, and a masked row
// maximum. Internal to src/kernels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/fast_math.h"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace zt::kernels::attn_tiles {

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
#if defined(__AVX512F__)
  __m512 mx = _mm512_set1_ps(init);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int c = 0; c < TILE; c += 16) {
    const __m512i j = _mm512_add_epi32(lane, _mm512_set1_epi32(c));
    const __mmask16 in =
        _mm512_cmpge_epi32_mask(j, _mm512_set1_epi32(first)) & _mm512_cmplt_epi32_mask(j, _mm512_set1_epi32(valid));
    mx = _mm512_mask_max_ps(mx, in, mx, _mm512_loadu_ps(s + c));
  }
  // The horizontal max by hand: GCC 12's _mm512_reduce_max_ps trips -Wmaybe-uninitialized.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx);
  float r = lanes[0];
  for (int k = 1; k < 16; ++k) r = std::max(r, lanes[k]);
  return r;
#else
  float mx = init;
  for (int j = first; j < valid; ++j) mx = std::max(mx, s[j]);
  return mx;
#endif
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

}  // namespace zt::kernels::attn_tiles
