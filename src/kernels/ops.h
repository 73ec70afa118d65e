// ops.h: the fast element-wise and row-wise kernels of a transformer step, fp32.
// Contract (../shared/ARCHITECTURE.md): outputs first, no hidden state. Parameter
// gradients accumulate (+=); activation gradients assign (=) except where marked "+="
// because they land on the residual stream. Rows are tokens: N = B*T.
// Naive references of each live in kernels/reference.h.
#pragma once
#include <cstdint>

namespace zt::kernels {

// LayerNorm over C per row. mean/rstd (N) are saved for the backward pass.
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N,
                       int C, float eps);
// dx +=, dw +=, db +=.
void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int C);

// RMSNorm (Llama): out = x * rsqrt(mean(x^2) + eps) * w.
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int C, float eps);
// dx +=, dw +=.
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int C);

// tanh-approximated GELU (HF "gelu_new"). dx may alias dout.
void gelu_forward(float* out, const float* x, int64_t n);
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n);

// SwiGLU: x rows are [gate (F) | up (F)]; out (N, F) = silu(gate) * up.
void swiglu_forward(float* out, const float* x, int64_t N, int F);
// dx (N, 2F) = ...; must not alias dout.
void swiglu_backward(float* dx, const float* dout, const float* x, int64_t N, int F);
// GeGLU (Gemma's gelu_pytorch_tanh MLP): the same layout; out = gelu_tanh(gate) * up.
void geglu_forward(float* out, const float* x, int64_t N, int F);
void geglu_backward(float* dx, const float* dout, const float* x, int64_t N, int F);

// RoPE tables in HF rotate-half layout: cos/sin are (T, HS/2). Row t depends only on
// t, so a longer table starts with the rows of a shorter one.
void rope_table(float* cos, float* sin, int T, int HS, float theta);
// The same from given inverse frequencies (half of them, models/rope.h computes scaled ones):
// cos/sin[t, i] = cos/sin(t * inv_freq[i]) * scale. With rope_table's frequencies and scale
// 1 the tables are bit-identical to rope_table's.
void rope_table_freqs(float* cos, float* sin, int T, int half, const float* inv_freq, float scale);
// Rotates, in place, the NH query heads and KVH key heads at the start of each row of
// qkv (rows of `row_stride` floats). Token t of each sequence sits at position t, or at
// positions[b*T + t] when given (packed documents: HF position_ids, (B, T)); the tables
// must then have a row for every position used. backward applies the inverse rotation.
void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                  int64_t row_stride, const int32_t* positions = nullptr);
void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                   int64_t row_stride, const int32_t* positions = nullptr);

// out (B*T, C) = wte[tokens] (+ wpe[t] when wpe is given; wpe[positions[i]] when
// positions (B*T) is given too, for packed documents).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T, int C,
                       const int32_t* positions = nullptr);
// dwte +=, dwpe += (when given), at the same rows the forward read.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T, int C,
                        const int32_t* positions = nullptr);
// Vocabulary-parallel forms (tensor parallelism): wte holds the rows [v0, v0 + nv) of the
// vocabulary; a token outside them contributes a zero row (the ranks' outputs are summed),
// plus wpe when given (one rank passes it). backward adds to the rows it holds only.
void embedding_forward_vocab(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T,
                             int C, const int32_t* positions, int v0, int nv);
void embedding_backward_vocab(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T,
                              int C, const int32_t* positions, int v0, int nv);

// y (N, M) += b (M) per row; db (M) += column sums of dy.
void bias_forward(float* y, const float* b, int64_t N, int M);
void bias_backward(float* db, const float* dy, int64_t N, int M);

// y = a + b, element-wise (residual).
void add(float* y, const float* a, const float* b, int64_t n);

}  // namespace zt::kernels
