// attention_cuda.h: causal grouped-query attention on the GPU (kernels/attention.h's layout and
// semantics: qkv rows [q heads | k heads | v heads], out (B*T, NH*HS), lse (B, NH, T), optional
// packed-document doc_start). Plain C++: no CUDA header, so host code and tests include it.
//
// bf16=false: fp32 products everywhere (FlashAttention-2 tiling on CUDA cores).
// bf16=true: Q, K, V, dO and the probability tiles P, dS are rounded to bf16 for the products,
// with fp32 accumulation, softmax, lse and outputs (attention_bf16.cpp's semantics). HS 64 and
// 128 run on tensor cores (mma.sync bf16 m16n8k16); other head sizes run the CUDA-core kernels
// with the same rounding. d.scale (0: 1 / sqrt(HS)) and d.softcap (Gemma 2) are honoured.
#pragma once
#include "kernels/attention.h"

namespace zt::kernels::cuda {

// All pointers are device pointers; d.doc_start, when set, is a device pointer too.
// HS must be a multiple of 8 and at most 256 (anything else throws zt::Error).
void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d, bool bf16);
// dqkv is assigned (=) in full: q, k and v parts; k/v rows that no query sees get zero.
// out and lse are the forward pass's.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d, bool bf16);

// True when (HS, bf16, softcap) runs the tensor-core kernels (soft-capped scores run the
// CUDA-core kernels, which have the cap).
bool attention_uses_tensor_cores(int HS, bool bf16, float softcap = 0.f);

namespace detail {
// attention_tc.cu: the tensor-core kernels (bf16, HS 64 or 128), the same contracts as above
// (dims already checked).
void attention_forward_tc(float* out, float* lse, const float* qkv, const AttnDims& d);
void attention_backward_tc(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                           const AttnDims& d);
}  // namespace detail

}  // namespace zt::kernels::cuda
