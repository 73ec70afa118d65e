// moe.h: the mixture-of-experts kernels (fp32, CPU): top-k softmax routing and its backward
// (through the renormalised top-k weights, the load-balancing loss and the router z-loss), the
// grouping of tokens by expert (a counting sort: counts, offsets and the permutation, with an
// optional capacity), the gather into and the weighted combine out of that grouped order, and
// GEMMs over the experts' contiguous row groups (one gemm() call per expert, never per token).
// Naive references live in kernels/reference.h (moe_*_ref); tests/test_moe.cpp compares them.
// What this is not: an expert-parallel exchange (that needs dist) or a GPU kernel; the layer
// calls these through kernels/dispatch.h so both can follow behind the same calls.
// Dimension glossary: N tokens, C width, E experts, K experts per token, R = N K grouped rows.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::kernels {

struct MoeDims {
  int64_t N = 0;  // tokens
  int C = 0;      // width
  int E = 0;      // experts
  int K = 0;      // experts per token (top-k)
};

// probs (N, E) = softmax(logits) in fp32; idx / w (N, K): the K largest probabilities in
// descending order (ties: the lower expert first) and their weights, divided by their sum when
// renorm (Mixtral always; Qwen's norm_topk_prob). lse (N): log-sum-exp of each row (z-loss).
void moe_router_forward(float* probs, int32_t* idx, float* w, float* lse, const float* logits, const MoeDims& d,
                        bool renorm);

// dlogits (N, E) = the gradient through softmax of: dw (N, K) (the combine's weight gradients,
// through the renormalisation when renorm), dprob (E, may be null) added to every token's
// probabilities (the load-balancing loss: d aux / d p_te is the same for all t), and z_grad (may be
// 0) times d lse^2 / d logits (the router z-loss).
void moe_router_backward(float* dlogits, const float* dw, const float* probs, const int32_t* idx, const float* w,
                         const float* lse, const float* dprob, float z_grad, const MoeDims& d, bool renorm);

// The grouped order: assignments (t, k) sorted by expert, stable in (t, k). counts (E): rows each
// expert keeps; offsets (E + 1): where each expert's rows start; token_of (R): the token of each
// grouped row; slot_of (N K): the grouped row of assignment (t, k), -1 when dropped. capacity > 0:
// an expert keeps its first `capacity` assignments in token order and drops the rest. Returns the
// number dropped. Rows past offsets[E] are unused (R = N K minus the dropped).
int64_t moe_group_by_expert(int32_t* counts, int32_t* offsets, int32_t* token_of, int32_t* slot_of, const int32_t* idx,
                            const MoeDims& d, int64_t capacity);

// xp (R, C) = x rows in grouped order (R = offsets[E]).
void moe_gather(float* xp, const float* x, const int32_t* token_of, int64_t R, int C);
// dx (N, C) += the grouped rows' gradients summed back onto their tokens.
void moe_gather_backward(float* dx, const float* dxp, const int32_t* slot_of, const MoeDims& d);
// y (N, C) = sum_k w[t, k] yp[slot_of(t, k)] (dropped assignments add nothing).
void moe_combine(float* y, const float* yp, const float* w, const int32_t* slot_of, const MoeDims& d);
// dyp (R, C) = w[t, k] dy[t]; dw (N, K) = <dy[t], yp[slot]> (0 when dropped).
void moe_combine_backward(float* dyp, float* dw, const float* dy, const float* yp, const float* w,
                          const int32_t* slot_of, const MoeDims& d);

// Per expert e with rows [offsets[e], offsets[e+1]): C_e (rows, n) = A_e (rows, k) op(B_e), B_e at
// b + e * b_stride, op = transpose when trans_b (B_e stored (n, k), nn.Linear's [out, in]). beta 0
// (=) or 1 (+=).
void moe_grouped_gemm(const int32_t* offsets, int E, bool trans_b, int64_t n, int64_t k, const float* a, int64_t lda,
                      const float* b, int64_t b_stride, int64_t ldb, float beta, float* c, int64_t ldc);
// The weight gradients: dW_e (n, k) += dY_e^T (n x rows) X_e (rows, k), dW_e at dw + e * dw_stride.
void moe_grouped_wgrad(const int32_t* offsets, int E, int64_t n, int64_t k, const float* dy, int64_t lddy,
                       const float* x, int64_t ldx, float* dw, int64_t dw_stride, int64_t lddw);

// The same two with A and B (dy and x) of type t (bf16: oneDNN's bf16 matmul, fp32 accumulation and
// output; kernels/gemm.h gemm_typed); leading dimensions and strides in elements.
void moe_grouped_gemm_typed(DType t, const int32_t* offsets, int E, bool trans_b, int64_t n, int64_t k, const void* a,
                            int64_t lda, const void* b, int64_t b_stride, int64_t ldb, float beta, float* c,
                            int64_t ldc);
void moe_grouped_wgrad_typed(DType t, const int32_t* offsets, int E, int64_t n, int64_t k, const void* dy, int64_t lddy,
                             const void* x, int64_t ldx, float* dw, int64_t dw_stride, int64_t lddw);

// Qwen2-MoE's gated shared expert: y (N, C) += sigmoid(g[t]) o[t] (g (N): the gate's logits).
void moe_shared_gate_forward(float* y, const float* o, const float* g, int64_t N, int C);
// do_ (N, C) = sigmoid(g) dy; dg (N) = <dy, o> sigmoid'(g).
void moe_shared_gate_backward(float* do_, float* dg, const float* dy, const float* o, const float* g, int64_t N, int C);

}  // namespace zt::kernels
