// convert.cpp: see convert.h. Blocks of 16 floats per AVX-512 register; OpenMP over
// large arrays (a 124M-parameter model's weights convert in a few milliseconds).
#include "kernels/convert.h"

#include <immintrin.h>

#include <cmath>

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

// Full blocks of 16 without masks (the hot path), then one masked tail.
template <class F>
void blocks(int64_t n, F f, bool parallel = true) {
  const int64_t nb = n / 16;
#pragma omp parallel for schedule(static) if (parallel && n >= kParallelMin)
  for (int64_t b = 0; b < nb; ++b) f(b * 16, __mmask16(0xffff));
  if (n % 16) f(nb * 16, __mmask16((1u << (n % 16)) - 1));
}
}  // namespace

namespace {
void to_lowp_impl(DType t, uint16_t* dst, const float* src, int64_t n, bool parallel) {
  ZT_ASSERT(t == DType::bf16 || t == DType::f16, "to_lowp: ", dtype_name(t), " is not a 16-bit float type");
  if (t == DType::bf16)
    blocks(
        n,
        [&](int64_t i, __mmask16 m) {
          _mm256_mask_storeu_epi16(dst + i, m, cvt_bf16(_mm512_maskz_loadu_ps(m, src + i)));
        },
        parallel);
  else
    blocks(
        n,
        [&](int64_t i, __mmask16 m) {
          _mm256_mask_storeu_epi16(dst + i, m,
                                   _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
        },
        parallel);
}
}  // namespace

void to_lowp(DType t, uint16_t* dst, const float* src, int64_t n) { to_lowp_impl(t, dst, src, n, true); }
void to_lowp_serial(DType t, uint16_t* dst, const float* src, int64_t n) { to_lowp_impl(t, dst, src, n, false); }

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

void to_lowp_rows(DType t, uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  if (ld == cols) return to_lowp(t, dst, src, rows * cols);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    // Each row is small next to the threads' share, so rows convert serially inside.
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 m = cols - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - c)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(m, src + r * ld + c);
      _mm256_mask_storeu_epi16(dst + r * cols + c, m,
                               t == DType::bf16 ? cvt_bf16(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
  }
}

void round_to_f16(float* dst, const float* src, int64_t n) {
  blocks(n, [&](int64_t i, __mmask16 m) {
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(h));
  });
}

bool all_finite(const float* x, int64_t n) {
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(x[i]);
  return !bad;
}

}  // namespace zt::kernels
