// gemm.cpp: oneDNN sgemm behind ztrain's gemm signature. oneDNN picks its AVX-512
// kernels from the CPU itself, so OPENBLAS_CORETYPE and friends cannot slow it down.
#include "kernels/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"

namespace zt::kernels {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  ZT_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st));
}

}  // namespace zt::kernels
