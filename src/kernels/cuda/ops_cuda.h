// ops_cuda.h: the element-wise and row-wise kernels of a transformer step on the GPU, with the
// signatures and the contract of kernels/ops.h (outputs first; parameter gradients +=, activation
// gradients = unless marked +=), fp32 storage and fp32 arithmetic. Every pointer is a device
// pointer; launches go to the default stream, in order. Each kernel is tested against the naive
// reference of kernels/reference.h (tests/cuda/test_cuda_ops.cpp).
// Parameter-gradient reductions over rows (dw, db, dwte) add per-block partial sums with
// atomics: the same sums as the CPU up to the order of fp32 additions, not bit-identical run
// to run (docs/gpu.md).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::kernels::cuda {

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N,
                       int C, float eps);
void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int C);
// w_offset: the norm scales by (w + w_offset); Gemma's (1 + w) RMSNorm passes 1 (dw is the same).
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int C, float eps,
                     float w_offset = 0.f);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int C, float w_offset = 0.f);
void gelu_forward(float* out, const float* x, int64_t n);
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n);
void swiglu_forward(float* out, const float* x, int64_t N, int F);
void swiglu_backward(float* dx, const float* dout, const float* x, int64_t N, int F);
void geglu_forward(float* out, const float* x, int64_t N, int F);
void geglu_backward(float* dx, const float* dout, const float* x, int64_t N, int F);
// cos/sin (positions, HS/2) tables on the device (kernels::rope_table computes them on the host).
void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                  int64_t row_stride, const int32_t* positions = nullptr);
void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                   int64_t row_stride, const int32_t* positions = nullptr);
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T, int C,
                       const int32_t* positions = nullptr);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T, int C,
                        const int32_t* positions = nullptr);
void bias_forward(float* y, const float* b, int64_t N, int M);
void bias_backward(float* db, const float* dy, int64_t N, int M);
void add(float* y, const float* a, const float* b, int64_t n);

// fp32 <-> bf16 (round to nearest even, NaN stays NaN: core/tensor.h's f32_to_bf16).
void to_bf16(uint16_t* dst, const float* src, int64_t n);
void from_bf16(float* dst, const uint16_t* src, int64_t n);
// Both at once (a bf16-kept tensor, kernels/convert.h): dst = bf16(src), then src = dst in fp32.
void to_bf16_keep(uint16_t* dst, float* src, int64_t n);

// Gradient clipping (optim/clip.cpp): the sum of squares in double (one partial per block, summed
// on the host), and x = x * a * b with the products rounded in that order (b = 1: one rounding).
double sum_squares(const float* x, int64_t n);
void scale(float* x, int64_t n, float a, float b = 1.0f);

// AdamW with optim/adamw.cpp's arithmetic over every piece of a flat parameter buffer in one
// launch. Piece i updates params[0, numel) from grads, with its state at exp_avg/exp_avg_sq +
// state_offset; decay marks the pieces weight decay applies to. `step` counts from 1.
struct AdamWPiece {
  float* params;
  const float* grads;
  int64_t state_offset, numel;
  bool decay;
};
struct AdamWHyper {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
};
void adamw_step(const AdamWPiece* pieces, int n_pieces, float* exp_avg, float* exp_avg_sq, const AdamWHyper& h);

}  // namespace zt::kernels::cuda
