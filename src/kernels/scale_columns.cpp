// scale_columns.cpp: see scale_columns.h.
#include "kernels/scale_columns.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zt::kernels {

void scale_columns(DType t, void* dst, const void* src, int64_t N, int64_t ld, int64_t begin, int64_t cols,
                   const float* s) {
  ZT_ASSERT(t == DType::f32 || t == DType::bf16, "scale_columns runs on f32 or bf16");
  if (t == DType::f32) {
    float* d = static_cast<float*>(dst) + begin;
    const float* x = static_cast<const float*>(src) + begin;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < cols; ++j) d[i * ld + j] = x[i * ld + j] * s[j];
    return;
  }
  uint16_t* d = static_cast<uint16_t*>(dst) + begin;
  const uint16_t* x = static_cast<const uint16_t*>(src) + begin;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < cols; ++j) d[i * ld + j] = f32_to_bf16(bf16_to_f32(x[i * ld + j]) * s[j]);
}

void scale_shift_columns(float* y, int64_t N, int64_t ld, int64_t begin, int64_t cols, const float* s,
                         const float* shift) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < cols; ++j) y[i * ld + begin + j] = y[i * ld + begin + j] * s[j] + shift[j];
}

void add_scaled_columns(float* y, int64_t ldy, int64_t begin, const float* z, int64_t ldz, int64_t N, int64_t cols,
                        const float* s) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < cols; ++j) y[i * ldy + begin + j] += s[j] * z[i * ldz + j];
}

void row_norms_of_sum(float* n, const float* a, const float* w, int64_t wj, int64_t wi, int64_t rows, int64_t in,
                      bool squared) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < rows; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < in; ++i) {
      const double v = double(w[j * wj + i * wi]) + (a ? double(a[j * in + i]) : 0.0);
      sum += v * v;
    }
    n[j] = float(squared ? sum : std::sqrt(sum));
  }
}

void column_dot_add(float* acc, DType ta, const void* a, int64_t lda, const float* b, int64_t ldb, int64_t N,
                    int64_t cols) {
  ZT_ASSERT(ta == DType::f32 || ta == DType::bf16, "column_dot_add reads f32 or bf16");
  constexpr int64_t kBlock = 64;  // columns per task: a thread walks all rows of its block
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kBlock, j1 = std::min(cols, j0 + kBlock);
    double sum[kBlock] = {};
    for (int64_t i = 0; i < N; ++i) {
      const float* bi = b + i * ldb;
      if (ta == DType::f32) {
        const float* ai = static_cast<const float*>(a) + i * lda;
        for (int64_t j = j0; j < j1; ++j) sum[j - j0] += double(ai[j]) * bi[j];
      } else {
        const uint16_t* ai = static_cast<const uint16_t*>(a) + i * lda;
        for (int64_t j = j0; j < j1; ++j) sum[j - j0] += double(bf16_to_f32(ai[j])) * bi[j];
      }
    }
    for (int64_t j = j0; j < j1; ++j) acc[j] += float(sum[j - j0]);
  }
}

}  // namespace zt::kernels
