// gemm_cuda.h: the GPU's matrix multiply, kernels/gemm.h's contract on device pointers:
// row-major C = alpha * op(A) * op(B) + beta * C. A and B are both of type t: f32 runs
// cuBLASLt's fp32 GEMM (CUBLAS_COMPUTE_32F, no TF32: fp32 parity with the CPU); bf16 runs its
// tensor-core GEMM with fp32 accumulation. C is fp32 (c_t = f32) or bf16 (c_t = bf16; only with
// beta = 0, where the product is rounded once at the end).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::kernels::cuda {

void gemm(DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, float beta, void* c, int64_t ldc, DType c_t = DType::f32);

}  // namespace zt::kernels::cuda
