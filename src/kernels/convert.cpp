// convert.cpp: see convert.h. Blocks of 16 floats per AVX-512 register; OpenMP over
// large arrays (a 124M-parameter model's weights convert in a few milliseconds).
#include "kernels/convert.h"

#include <immintrin.h>
#include <omp.h>

namespace zt::kernels {

namespace {
constexpr int64_t kParallelMin = 1 << 16;  // below this, threads cost more than they save

inline __m256i cvt_bf16(__m512 v) {
#if defined(__AVX512BF16__)
  return (__m256i)_mm512_cvtneps_pbh(v);
#else
  // Round to nearest even by integer arithmetic; NaN keeps a quiet NaN payload.
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
#endif
}
inline __m512 bf16_to_ps(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// Full blocks of 16 without masks (the hot path), then one masked tail. Called from inside a
// parallel loop (the LM head converts one row per iteration) it runs on the calling thread.
template <class F>
void blocks(int64_t n, F f) {
  const int64_t nb = n / 16;
#pragma omp parallel for schedule(static) if (n >= kParallelMin && !omp_in_parallel())
  for (int64_t b = 0; b < nb; ++b) f(b * 16, __mmask16(0xffff));
  if (n % 16) f(nb * 16, __mmask16((1u << (n % 16)) - 1));
}
}  // namespace

void to_lowp(DType t, uint16_t* dst, const float* src, int64_t n) {
  ZT_ASSERT(t == DType::bf16 || t == DType::f16, "to_lowp: ", dtype_name(t), " is not a 16-bit float type");
  if (t == DType::bf16)
    blocks(n, [&](int64_t i, __mmask16 m) {
      _mm256_mask_storeu_epi16(dst + i, m, cvt_bf16(_mm512_maskz_loadu_ps(m, src + i)));
    });
  else
    blocks(n, [&](int64_t i, __mmask16 m) {
      _mm256_mask_storeu_epi16(dst + i, m,
                               _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
    });
}

void to_bf16_keep(uint16_t* dst, float* src, int64_t n) {
  blocks(n, [&](int64_t i, __mmask16 m) {
    const __m256i h = cvt_bf16(_mm512_maskz_loadu_ps(m, src + i));
    _mm256_mask_storeu_epi16(dst + i, m, h);
    _mm512_mask_storeu_ps(src + i, m, bf16_to_ps(h));
  });
}

void from_lowp(DType t, float* dst, const uint16_t* src, int64_t n) {
  ZT_ASSERT(t == DType::bf16 || t == DType::f16, "from_lowp: ", dtype_name(t), " is not a 16-bit float type");
  if (t == DType::bf16)
    blocks(n, [&](int64_t i, __mmask16 m) {
      _mm512_mask_storeu_ps(dst + i, m, bf16_to_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    });
  else
    blocks(n, [&](int64_t i, __mmask16 m) {
      _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    });
}

void round_to_f16(float* dst, const float* src, int64_t n) {
  blocks(n, [&](int64_t i, __mmask16 m) {
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(h));
  });
}

}  // namespace zt::kernels
