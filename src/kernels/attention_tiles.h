// attention_tiles.h: what the fp32 and bf16 flash-attention kernels share (attention.cpp,
// attention_bf16.cpp): the tile size, the first key a query tile may see, and a masked row
// maximum. Internal to src/kernels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
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

}  // namespace zt::kernels::attn_tiles
