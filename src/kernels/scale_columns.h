// scale_columns.h: per-column scaling and per-column dot products of row-major matrices, IA3's
// elementwise work (nn/ia3.cpp) beside the GEMMs. Memory-bound, so plain loops over OpenMP threads
// serve on every ISA; each is its own reference (tests/test_lora.cpp checks them in double).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::kernels {

// dst[i, begin + j] = src[i, begin + j] * s[j] for rows i < N and j < cols, rows `ld` elements
// apart in both; dtype t is f32 or bf16 (bf16 rounds the product once). dst may be src.
void scale_columns(DType t, void* dst, const void* src, int64_t N, int64_t ld, int64_t begin, int64_t cols,
                   const float* s);
// y[i, begin + j] = y[i, begin + j] * s[j] + shift[j], fp32, rows ld apart.
void scale_shift_columns(float* y, int64_t N, int64_t ld, int64_t begin, int64_t cols, const float* s,
                         const float* shift);
// y[i, begin + j] += s[j] * z[i, j], fp32; y's rows ldy apart, z's ldz.
void add_scaled_columns(float* y, int64_t ldy, int64_t begin, const float* z, int64_t ldz, int64_t N, int64_t cols,
                        const float* s);
// n[j] = || a[j, :] + w(j, :) || for rows j < rows over in columns: a fp32 (rows, in), contiguous, or
// null (w alone); w's element (j, i) at w[j * wj + i * wi] (a row of an (out, in) weight, or a column
// of an (in, out) one). Sums in double; DoRA's weight norms. squared: n[j] = the sum of squares (a
// row-parallel slice's share, summed over the group before the root).
void row_norms_of_sum(float* n, const float* a, const float* w, int64_t wj, int64_t wi, int64_t rows, int64_t in,
                      bool squared = false);
// acc[j] += sum over rows i < N of a[i, j] * b[i, j], j < cols: a in dtype ta (f32 or bf16), rows
// lda apart; b fp32, rows ldb apart. Each column sums in double, in row order, on one thread, so
// the result does not depend on the thread count.
void column_dot_add(float* acc, DType ta, const void* a, int64_t lda, const float* b, int64_t ldb, int64_t N,
                    int64_t cols);

}  // namespace zt::kernels
