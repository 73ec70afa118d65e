// gemm.h: the one matrix-multiply entry point of ztrain, row-major,
// C = alpha * op(A) * op(B) + beta * C, with op = transpose when the flag is set.
// The fast path is oneDNN's sgemm (chosen by measurement, docs/kernels.md); gemm_ref is
// the naive reference, templated so tests can run it in double.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::kernels {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product with A and B both of type `t`: f32 goes to gemm(); bf16 runs oneDNN's
// bf16 matmul (AVX512-BF16 dot products, or AVX-512 emulation; fp32 accumulation, fp32 C),
// chosen over kernels of our own by measurement on the model's shapes (docs/kernels.md).
// Primitives are cached per shape, layout, alpha and beta (a training step reuses a handful of
// shapes). Where oneDNN has no bf16 matmul (AVX2, aarch64) the bf16 operands are widened to
// fp32 in panels of the reduction dimension (at most 16 MiB of scratch) and multiplied by sgemm:
// the same exact products, fp32 sums.
void gemm_typed(DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Tests: send bf16 products through the widened path even where oneDNN has a bf16 matmul, with
// panels of at most panel_floats floats of A and B slices (0 = the default); on = false restores both.
void gemm_bf16_force_widened(bool on, int64_t panel_floats = 0);

template <class T>
void gemm_ref(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
              int64_t ldb, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        T av = trans_a ? a[p * lda + i] : a[i * lda + p];
        T bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        s += static_cast<double>(av) * static_cast<double>(bv);
      }
      c[i * ldc + j] = static_cast<T>(alpha * s + (beta == T(0) ? 0.0 : static_cast<double>(beta * c[i * ldc + j])));
    }
}

}  // namespace zt::kernels
