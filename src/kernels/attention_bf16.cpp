// attention_bf16.cpp: flash attention whose products run on AVX512-BF16 dot products
// (--bf16). Same tiling, tasks and fp32 softmax as attention.cpp; what changes is the
// operands of the five tile products: Q, K, V, dO, P and dS are rounded to bf16 and
// multiplied pairwise by vdpbf16ps (two products per fp32 lane, accumulated in fp32), as a
// GPU flash-attention kernel does under bf16. Scores, softmax, the running max / sum, the
// log-sum-exp, D = rowsum(dO * O) and every accumulator (O, dQ, dK, dV) stay fp32.
//
// vdpbf16ps sums pairs along one index of a product, so each operand is stored with that
// index's pairs packed in 32 bits ("pairs along x"): K^T and V^T pairs along the head
// dimension d (lanes over keys j) for S = Q K^T and dP = dO V^T; V and K pairs along keys
// (lanes over d) for O += P V and dQ += dS K; Q and dO pairs along query rows for
// dK += dS^T Q and dV += P^T dO. A task builds its keys' and values' layouts once; query
// tiles and probability tiles are packed as they are made.
//
// This file goes through Highway's foreach_target like the other kernels, but only the AVX-512
// pass compiles the kernel, with AVX512-BF16 added to its target (Highway 1.0.3 has no target
// with vdpbf16ps). attention_bf16_native() chooses it at run time when the CPU has the
// instruction and the level is not forced lower (kernels/isa.h); otherwise the bf16 entry
// points run the fp32 kernels.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_bf16.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/attention_tiles-inl.h"
#include "kernels/fast_math.h"
#include "kernels/isa.h"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
#define ZT_ATTENTION_BF16_DOT 1
HWY_BEFORE_NAMESPACE();
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,avx512f,avx512vl,avx512dq,avx512bw,avx512bf16")
namespace zt::kernels::HWY_NAMESPACE {
namespace {
using namespace attn_tiles;

// dst (n bf16) = src (n fp32), n a multiple of 32, round to nearest even.
inline void cvt_row(uint16_t* dst, const float* src, int n) {
  for (int c = 0; c < n; c += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + c + 16), _mm512_loadu_ps(src + c));
    _mm512_storeu_si512(dst + c, reinterpret_cast<__m512i>(v));
  }
}

// dst[k] = a[k] | b[k] << 16 for k < n (n a multiple of 32): two bf16 rows as pairs.
inline void interleave(uint32_t* dst, const uint16_t* a, const uint16_t* b, int n) {
  alignas(64) static const uint16_t lo_idx[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static const uint16_t hi_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                  24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i il = _mm512_load_si512(lo_idx), ih = _mm512_load_si512(hi_idx);
  for (int c = 0; c < n; c += 32) {
    const __m512i va = _mm512_loadu_si512(a + c), vb = _mm512_loadu_si512(b + c);
    _mm512_storeu_si512(dst + c, _mm512_permutex2var_epi16(va, il, vb));
    _mm512_storeu_si512(dst + c + 16, _mm512_permutex2var_epi16(va, ih, vb));
  }
}

// Pairs along d, lanes over rows: dst[(d / 2) * ld + j] = (x[j][d], x[j][d + 1]) for the n
// rows of src (row stride `stride`), zero for j in [n, ld). K^T, V^T.
void pairs_along_d(uint32_t* dst, int64_t ld, const float* src, int64_t stride, int n, int HS) {
  alignas(64) uint16_t row[512];
  const uint32_t* r32 = reinterpret_cast<const uint32_t*>(row);
  for (int j = 0; j < n; ++j) {
    cvt_row(row, src + j * stride, HS);
    for (int p = 0; p < HS / 2; ++p) dst[p * ld + j] = r32[p];
  }
  for (int p = 0; p < HS / 2; ++p) std::fill(dst + p * ld + n, dst + (p + 1) * ld, 0u);
}

// Pairs along rows, lanes over d: dst[(j / 2) * HS + d] = (x[j][d], x[j + 1][d]) for rows
// j < npad (rows >= n read as zero). V, K (along keys); Q, dO (along a tile's queries).
void pairs_along_rows(uint32_t* dst, const float* src, int64_t stride, int n, int npad, int HS) {
  alignas(64) uint16_t a[512], b[512];
  for (int j = 0; j < npad; j += 2) {
    if (j < n)
      cvt_row(a, src + j * stride, HS);
    else
      std::fill_n(a, HS, uint16_t(0));
    if (j + 1 < n)
      cvt_row(b, src + (j + 1) * stride, HS);
    else
      std::fill_n(b, HS, uint16_t(0));
    interleave(dst + (j / 2) * HS, a, b, HS);
  }
}

// Rows (pairs along the row): dst row i (w / 2 pairs) = bf16(src row i) for i < n.
void rows_bf16(uint32_t* dst, const float* src, int64_t stride, int n, int w) {
  for (int i = 0; i < n; ++i) cvt_row(reinterpret_cast<uint16_t*>(dst + i * (w / 2)), src + i * stride, w);
}

// Transposed pairs of a (TILE, TILE) fp32 tile: dst[j * (TILE / 2) + i / 2] =
// (x[i][j], x[i + 1][j]), for P^T and dS^T (rows beyond the tile's queries are zero).
void tile_pairs_transposed(uint32_t* dst, const float* x) {
  alignas(64) uint16_t a[TILE], b[TILE];
  alignas(64) uint32_t pr[TILE];
  for (int i = 0; i < TILE; i += 2) {
    cvt_row(a, x + i * TILE, TILE);
    cvt_row(b, x + (i + 1) * TILE, TILE);
    interleave(pr, a, b, TILE);
    for (int j = 0; j < TILE; ++j) dst[j * (TILE / 2) + i / 2] = pr[j];
  }
}

// R accumulator rows of 64 fp32 (acc + k * astride) (+)= sum over np pairs p of
// dot2(a[k * ak + p], b[p * bs + lane]) per lane: four zmm of b per pair, loaded once for
// R rows; R x 4 accumulators stay in registers.
template <int R>
inline void dp_rows(float* acc, int64_t astride, bool accumulate, const uint32_t* a, int64_t ak, const uint32_t* b,
                    int64_t bs, int np) {
  __m512 r[R][4];
  for (int k = 0; k < R; ++k)
    for (int c = 0; c < 4; ++c)
      r[k][c] = accumulate ? _mm512_loadu_ps(acc + k * astride + 16 * c) : _mm512_setzero_ps();
  for (int p = 0; p < np; ++p) {
    const uint32_t* bp = b + p * bs;
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp)),
                   b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + 16)),
                   b2 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + 32)),
                   b3 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + 48));
    for (int k = 0; k < R; ++k) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(int(a[k * ak + p])));
      r[k][0] = _mm512_dpbf16_ps(r[k][0], av, b0);
      r[k][1] = _mm512_dpbf16_ps(r[k][1], av, b1);
      r[k][2] = _mm512_dpbf16_ps(r[k][2], av, b2);
      r[k][3] = _mm512_dpbf16_ps(r[k][3], av, b3);
    }
  }
  for (int k = 0; k < R; ++k)
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(acc + k * astride + 16 * c, r[k][c]);
}

// `rows` accumulator rows, four at a time.
inline void dp_block(float* acc, int64_t astride, bool accumulate, const uint32_t* a, int64_t ak, const uint32_t* b,
                     int64_t bs, int np, int rows) {
  int k = 0;
  for (; k + 4 <= rows; k += 4) dp_rows<4>(acc + k * astride, astride, accumulate, a + k * ak, ak, b, bs, np);
  switch (rows - k) {
    case 3:
      dp_rows<3>(acc + k * astride, astride, accumulate, a + k * ak, ak, b, bs, np);
      break;
    case 2:
      dp_rows<2>(acc + k * astride, astride, accumulate, a + k * ak, ak, b, bs, np);
      break;
    case 1:
      dp_rows<1>(acc + k * astride, astride, accumulate, a + k * ak, ak, b, bs, np);
      break;
    default:
      break;
  }
}

void forward_bf16(float* out, float* lse, const float* qkv, const AttnDims& dm) {
  const int T = dm.T, NH = dm.NH, KVH = dm.KVH, HS = dm.HS, group = NH / KVH, HP = HS / 2;
  const int64_t rs = dm.row_stride(), os = int64_t(NH) * HS;
  const float scale = dm.softmax_scale();
  const int ntiles = (T + TILE - 1) / TILE;
  const int64_t ld = int64_t(ntiles) * TILE;
  const int64_t tasks = int64_t(dm.B) * NH;
#pragma omp parallel
  {
    std::vector<uint32_t> kt(size_t(HP) * ld), v2(size_t(ld / 2) * HS), qb(size_t(TILE) * HP), pb(TILE * TILE / 2);
    std::vector<float> s(TILE * TILE), acc(size_t(TILE) * HS), m(TILE), l(TILE), corr(TILE);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int h = int(task % NH), b = int(task / NH), g = h / group;
      const float* base = qkv + int64_t(b) * T * rs;
      const int32_t* doc = dm.doc_start ? dm.doc_start + int64_t(b) * T : nullptr;
      pairs_along_d(kt.data(), ld, base + int64_t(NH + g) * HS, rs, T, HS);
      pairs_along_rows(v2.data(), base + int64_t(NH + KVH + g) * HS, rs, T, int(ld), HS);
      for (int qt = 0; qt < ntiles; ++qt) {
        const int q0 = qt * TILE, nq = std::min(TILE, T - q0);
        rows_bf16(qb.data(), base + int64_t(q0) * rs + int64_t(h) * HS, rs, nq, HS);
        std::fill(acc.begin(), acc.end(), 0.f);
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.f);
        for (int kt_i = tile_first_key(doc, q0, nq) / TILE; kt_i <= qt; ++kt_i) {
          const int k0 = kt_i * TILE, nk = std::min(TILE, T - k0);
          dp_block(s.data(), TILE, false, qb.data(), HP, kt.data() + k0, ld, HP, nq);
          int jmin, jmax;
          softmax_tile(s.data(), nq, q0, k0, nk, doc, scale, m.data(), l.data(), corr.data(), &jmin, &jmax);
          for (int i = 0; i < nq; ++i) {
            float* ai = acc.data() + size_t(i) * HS;
            const float c = corr[i];
#pragma omp simd
            for (int d = 0; d < HS; ++d) ai[d] *= c;
          }
          if (jmin >= jmax) continue;
          rows_bf16(pb.data(), s.data(), TILE, nq, TILE);
          const int p0 = jmin / 2, p1 = (jmax + 1) / 2;
          for (int c = 0; c < HS; c += 64)
            dp_block(acc.data() + c, HS, true, pb.data() + p0, TILE / 2, v2.data() + (k0 / 2 + p0) * HS + c, HS,
                     p1 - p0, nq);
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

void backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const AttnDims& dm) {
  const int T = dm.T, NH = dm.NH, KVH = dm.KVH, HS = dm.HS, group = NH / KVH, HP = HS / 2;
  const int64_t rs = dm.row_stride(), os = int64_t(NH) * HS;
  const float scale = dm.softmax_scale();
  const int ntiles = (T + TILE - 1) / TILE;
  const int64_t ld = int64_t(ntiles) * TILE;
  const int64_t tasks = int64_t(dm.B) * KVH;
#pragma omp parallel
  {
    std::vector<uint32_t> kt(size_t(HP) * ld), vt(size_t(HP) * ld), k2(size_t(ld / 2) * HS), qb(size_t(TILE) * HP),
        dob(size_t(TILE) * HP), q2(size_t(TILE / 2) * HS), do2(size_t(TILE / 2) * HS), pt(TILE * TILE / 2),
        dst(TILE * TILE / 2), dsb(TILE * TILE / 2);
    std::vector<float> p(TILE * TILE), ds(TILE * TILE), dq(size_t(TILE) * HS), D(TILE);
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
      pairs_along_d(kt.data(), ld, base + koff, rs, T, HS);
      pairs_along_d(vt.data(), ld, base + voff, rs, T, HS);
      pairs_along_rows(k2.data(), base + koff, rs, T, int(ld), HS);
      const int32_t* doc = dm.doc_start ? dm.doc_start + int64_t(b) * T : nullptr;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const int64_t qoff = int64_t(h) * HS;
        for (int qt = 0; qt < ntiles; ++qt) {
          const int q0 = qt * TILE, nq = std::min(TILE, T - q0);
          const float* q = base + int64_t(q0) * rs + qoff;
          const float* dO = dout + (int64_t(b) * T + q0) * os + qoff;
          const float* o = out + (int64_t(b) * T + q0) * os + qoff;
          const float* lrow = lse + (int64_t(b) * NH + h) * T + q0;
          rows_bf16(qb.data(), q, rs, nq, HS);
          rows_bf16(dob.data(), dO, os, nq, HS);
          // D = rowsum(dO * O) from the bf16 dO that dP = dO V^T multiplies, so dP - D keeps
          // the identity sum_j P_ij (dP_ij - D_i) = 0 (with one key, dS is exactly zero).
          for (int i = 0; i < nq; ++i) {
            const uint16_t* di = reinterpret_cast<const uint16_t*>(dob.data() + i * HP);
            float sdo = 0.f;
#pragma omp simd reduction(+ : sdo)
            for (int d = 0; d < HS; ++d) sdo += bf16_to_f32(di[d]) * o[i * os + d];
            D[i] = sdo;
          }
          pairs_along_rows(q2.data(), q, rs, nq, TILE, HS);
          pairs_along_rows(do2.data(), dO, os, nq, TILE, HS);
          std::fill(dq.begin(), dq.end(), 0.f);
          const int np_q = (nq + 1) / 2;
          for (int kti = tile_first_key(doc, q0, nq) / TILE; kti <= qt; ++kti) {
            const int k0 = kti * TILE, nk = std::min(TILE, T - k0);
            dp_block(p.data(), TILE, false, qb.data(), HP, kt.data() + k0, ld, HP, nq);    // S
            dp_block(ds.data(), TILE, false, dob.data(), HP, vt.data() + k0, ld, HP, nq);  // dP = dO V^T
            backward_tile(p.data(), ds.data(), nq, q0, k0, nk, doc, lrow, D.data(), scale, scale);
            tile_pairs_transposed(pt.data(), p.data());
            tile_pairs_transposed(dst.data(), ds.data());
            rows_bf16(dsb.data(), ds.data(), TILE, nq, TILE);
            float* dk = dbase + int64_t(k0) * rs + koff;
            float* dv = dbase + int64_t(k0) * rs + voff;
            for (int c = 0; c < HS; c += 64) {
              dp_block(dv + c, rs, true, pt.data(), TILE / 2, do2.data() + c, HS, np_q, nk);  // dV += P^T dO
              dp_block(dk + c, rs, true, dst.data(), TILE / 2, q2.data() + c, HS, np_q, nk);  // dK += dS^T Q
              dp_block(dq.data() + c, HS, true, dsb.data(), TILE / 2, k2.data() + (k0 / 2) * HS + c, HS, (nk + 1) / 2,
                       nq);  // dQ += dS K
            }
          }
          for (int i = 0; i < nq; ++i) std::copy_n(dq.data() + size_t(i) * HS, HS, dbase + int64_t(q0 + i) * rs + qoff);
        }
      }
    }
  }
}

}  // namespace

void attention_forward_bf16_dot(float* out, float* lse, const float* qkv, const AttnDims& d) {
  forward_bf16(out, lse, qkv, d);
}
void attention_backward_bf16_dot(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                 const AttnDims& d) {
  backward_bf16(dqkv, dout, qkv, out, lse, d);
}
}  // namespace zt::kernels::HWY_NAMESPACE
#pragma GCC pop_options
HWY_AFTER_NAMESPACE();
#endif  // AVX3 pass

#if HWY_ONCE
namespace zt::kernels {

bool attention_bf16_native(int HS) {
#if defined(ZT_ATTENTION_BF16_DOT)
  return isa_bf16_dot() && HS % 64 == 0 && HS <= 512;
#else
  return false;
#endif
}

void attention_forward_bf16(float* out, float* lse, const float* qkv, const AttnDims& d) {
#if defined(ZT_ATTENTION_BF16_DOT)
  if (attention_bf16_native(d.HS)) return N_AVX3::attention_forward_bf16_dot(out, lse, qkv, d);
#endif
  attention_forward(out, lse, qkv, d);
}

void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             const AttnDims& d) {
#if defined(ZT_ATTENTION_BF16_DOT)
  if (attention_bf16_native(d.HS)) return N_AVX3::attention_backward_bf16_dot(dqkv, dout, qkv, out, lse, d);
#endif
  attention_backward(dqkv, dout, qkv, out, lse, d);
}

}  // namespace zt::kernels
#endif  // HWY_ONCE
