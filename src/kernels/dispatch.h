// dispatch.h: the device seam of the kernels. Each op here takes the device first and runs the
// CPU kernel (ops.h, gemm.h, attention.h, cross_entropy.h, convert.h: which then dispatch on the
// CPU's ISA) or its GPU twin (kernels/cuda/*.h) on the same arguments, which are then device
// pointers. Layers (src/nn) and the model call these, so a model written once runs on either
// device. Without the CUDA backend compiled in, asking for the GPU throws (core/device.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/moe.h"
#include "kernels/nf4.h"

namespace zt::kernels {

void gemm_typed(DeviceKind d, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc);
void bias_forward(DeviceKind d, float* y, const float* b, int64_t N, int M);
void bias_backward(DeviceKind d, float* db, const float* dy, int64_t N, int M);
void layernorm_forward(DeviceKind d, float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int64_t N, int C, float eps);
void layernorm_backward(DeviceKind d, float* dx, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int64_t N, int C);
// w_offset: scale by (w + w_offset): Gemma's (1 + w) RMSNorm passes 1; dw is the same either way.
void rmsnorm_forward(DeviceKind d, float* out, float* rstd, const float* x, const float* w, int64_t N, int C, float eps,
                     float w_offset = 0.f);
void rmsnorm_backward(DeviceKind d, float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int64_t N, int C, float w_offset = 0.f);
void gelu_forward(DeviceKind d, float* out, const float* x, int64_t n);
void gelu_backward(DeviceKind d, float* dx, const float* dout, const float* x, int64_t n);
void swiglu_forward(DeviceKind d, float* out, const float* x, int64_t N, int F);
void swiglu_backward(DeviceKind d, float* dx, const float* dout, const float* x, int64_t N, int F);
void geglu_forward(DeviceKind d, float* out, const float* x, int64_t N, int F);
void geglu_backward(DeviceKind d, float* dx, const float* dout, const float* x, int64_t N, int F);
void rope_forward(DeviceKind d, float* qkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                  int64_t row_stride, const int32_t* positions);
void rope_backward(DeviceKind d, float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                   int64_t row_stride, const int32_t* positions);
void embedding_forward(DeviceKind d, float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N,
                       int T, int C, const int32_t* positions);
void embedding_backward(DeviceKind d, float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N,
                        int T, int C, const int32_t* positions);
void add(DeviceKind d, float* y, const float* a, const float* b, int64_t n);
// x *= m (Gemma's embedding scale and its gradient).
void scale(DeviceKind d, float* x, int64_t n, float m);
// bf16: the tile products in bf16 (attention_forward_bf16 on the CPU).
void attention_forward(DeviceKind d, bool bf16, float* out, float* lse, const float* qkv, const AttnDims& ad);
void attention_backward(DeviceKind d, bool bf16, float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, const AttnDims& ad);
// convert.h's conversions; the GPU has bf16 only (fp16 mixed precision is CPU-only for now).
void to_lowp(DeviceKind d, DType t, uint16_t* dst, const float* src, int64_t n);
void from_lowp(DeviceKind d, DType t, float* dst, const uint16_t* src, int64_t n);
void to_bf16_keep(DeviceKind d, uint16_t* dst, float* src, int64_t n);
void round_to_f16(DeviceKind d, float* dst, const float* src, int64_t n);
double lmhead_ce(DeviceKind d, float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                 const LmHeadDims& hd, float grad_scale, float* scratch, int64_t* count, const LmHeadCompute* compute,
                 double* token_loss);
// A frozen Linear over an NF4 weight (nf4.h): no GPU version yet (issue 24: it would dequantize
// into the cuBLASLt GEMM's input tiles), so a GPU request throws.
void nf4_linear_forward(DeviceKind d, DType t, float* y, const void* x, const Nf4View& w, int64_t N, float beta = 0.f);
void nf4_linear_backward_input(DeviceKind d, DType t, float* dx, const void* dy, const Nf4View& w, int64_t N,
                               float beta = 0.f);
void nf4_linear_forward_rows(DeviceKind d, DType t, float* y, int64_t ldy, const void* x, const Nf4View& w,
                             int64_t row0, int64_t rows, int64_t N, float beta = 0.f);
void nf4_linear_backward_input_rows(DeviceKind d, DType t, float* dx, const void* dy, int64_t ld_dy, const Nf4View& w,
                                    int64_t row0, int64_t rows, int64_t N, float beta = 0.f);
void nf4_dequantize_rows(DeviceKind d, const Nf4View& q, int64_t r0, int64_t r1, DType t, void* tile);
// Memory on the device: zeroing, and a strided copy of `rows` rows of `row_bytes` bytes.
void fill_zero(DeviceKind d, void* dst, size_t bytes);
void copy_rows(DeviceKind d, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               int64_t rows);
// Host <-> the device's memory (a plain memcpy on the CPU).
void copy_in(DeviceKind d, void* dst, const void* host_src, size_t bytes);
void copy_out(DeviceKind d, void* host_dst, const void* src, size_t bytes);

// The mixture-of-experts kernels (moe.h). CPU only for now: the GPU twins (cuBLASLt's grouped
// GEMMs) and expert parallelism's exchange go behind these same calls; a GPU request throws.
// The grouping itself (moe_group_by_expert) is index work on the host and stays out of the seam.
void moe_router_forward(DeviceKind d, float* probs, int32_t* idx, float* w, float* lse, const float* logits,
                        const MoeDims& md, bool renorm);
void moe_router_backward(DeviceKind d, float* dlogits, const float* dw, const float* probs, const int32_t* idx,
                         const float* w, const float* lse, const float* dprob, float z_grad, const MoeDims& md,
                         bool renorm);
void moe_gather(DeviceKind d, float* xp, const float* x, const int32_t* token_of, int64_t R, int C);
void moe_gather_backward(DeviceKind d, float* dx, const float* dxp, const int32_t* slot_of, const MoeDims& md);
void moe_combine(DeviceKind d, float* y, const float* yp, const float* w, const int32_t* slot_of, const MoeDims& md);
void moe_combine_backward(DeviceKind d, float* dyp, float* dw, const float* dy, const float* yp, const float* w,
                          const int32_t* slot_of, const MoeDims& md);
void moe_grouped_gemm(DeviceKind d, const int32_t* offsets, int E, bool trans_b, int64_t n, int64_t k, const float* a,
                      int64_t lda, const float* b, int64_t b_stride, int64_t ldb, float beta, float* c, int64_t ldc);
void moe_grouped_wgrad(DeviceKind d, const int32_t* offsets, int E, int64_t n, int64_t k, const float* dy, int64_t lddy,
                       const float* x, int64_t ldx, float* dw, int64_t dw_stride, int64_t lddw);

void moe_grouped_gemm_typed(DeviceKind d, DType t, const int32_t* offsets, int E, bool trans_b, int64_t n, int64_t k,
                            const void* a, int64_t lda, const void* b, int64_t b_stride, int64_t ldb, float beta,
                            float* c, int64_t ldc);
void moe_grouped_wgrad_typed(DeviceKind d, DType t, const int32_t* offsets, int E, int64_t n, int64_t k, const void* dy,
                             int64_t lddy, const void* x, int64_t ldx, float* dw, int64_t dw_stride, int64_t lddw);
void moe_shared_gate_forward(DeviceKind d, float* y, const float* o, const float* g, int64_t N, int C);
void moe_shared_gate_backward(DeviceKind d, float* do_, float* dg, const float* dy, const float* o, const float* g,
                              int64_t N, int C);

}  // namespace zt::kernels
