// cross_entropy_cuda.h: the fused LM head + softmax cross-entropy on the GPU, with
// kernels/cross_entropy.h's contract: per chunk of tokens one cuBLASLt GEMM makes the chunk's
// logits (chunk * V fp32 in `scratch`, never N * V), a row kernel turns them into their gradient
// in place, and two GEMMs give dx (=) and dw (+=). x, w, targets, dx, dw, scratch and the
// LmHeadCompute buffers are device pointers; token_loss (N) is a host array. Targets are checked
// against [0, V) before any work (the CPU kernel's guard and message).
#pragma once
#include "kernels/cross_entropy.h"

namespace zt::kernels::cuda {

double lmhead_ce(float* dx, float* dw, const float* x, const float* w, const int32_t* targets, const LmHeadDims& d,
                 float grad_scale, float* scratch, int64_t* count, const LmHeadCompute* compute = nullptr,
                 double* token_loss = nullptr);

}  // namespace zt::kernels::cuda
