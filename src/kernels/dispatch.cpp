// dispatch.cpp: see dispatch.h. One branch per op; the GPU side exists only when the CUDA
// backend is compiled in (ZT_HAVE_CUDA), otherwise a GPU request throws core/device.h's error.
#include "kernels/dispatch.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/ops.h"
#ifdef ZT_HAVE_CUDA
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/cross_entropy_cuda.h"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#define ZT_ON_GPU(call) \
  if (d == DeviceKind::cuda) return cuda::call
#else
// resolve_device("cuda") throws the backend's "built without CUDA" error.
#define ZT_ON_GPU(call) \
  if (d == DeviceKind::cuda) (void)resolve_device("cuda")
#endif

namespace zt::kernels {

void gemm_typed(DeviceKind d, DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  ZT_ON_GPU(gemm(t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
  gemm_typed(t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void bias_forward(DeviceKind d, float* y, const float* b, int64_t N, int M) {
  ZT_ON_GPU(bias_forward(y, b, N, M));
  bias_forward(y, b, N, M);
}
void bias_backward(DeviceKind d, float* db, const float* dy, int64_t N, int M) {
  ZT_ON_GPU(bias_backward(db, dy, N, M));
  bias_backward(db, dy, N, M);
}
void layernorm_forward(DeviceKind d, float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int64_t N, int C, float eps) {
  ZT_ON_GPU(layernorm_forward(out, mean, rstd, x, w, b, N, C, eps));
  layernorm_forward(out, mean, rstd, x, w, b, N, C, eps);
}
void layernorm_backward(DeviceKind d, float* dx, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int64_t N, int C) {
  ZT_ON_GPU(layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C));
  layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
}
namespace {
// The CPU kernels scale by w itself: w + w_offset in a per-thread buffer that lives until the
// next call on this thread (the kernel reads it and returns). 1 + w in fp32, as the GPU adds it.
const float* offset_weight(const float* w, int C, float w_offset) {
  if (w_offset == 0.f) return w;
  thread_local std::vector<float> w1;
  w1.resize(size_t(C));
  for (int j = 0; j < C; ++j) w1[size_t(j)] = w_offset + w[j];
  return w1.data();
}
}  // namespace

void rmsnorm_forward(DeviceKind d, float* out, float* rstd, const float* x, const float* w, int64_t N, int C, float eps,
                     float w_offset) {
  ZT_ON_GPU(rmsnorm_forward(out, rstd, x, w, N, C, eps, w_offset));
  rmsnorm_forward(out, rstd, x, offset_weight(w, C, w_offset), N, C, eps);
}
void rmsnorm_backward(DeviceKind d, float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int64_t N, int C, float w_offset) {
  ZT_ON_GPU(rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C, w_offset));
  rmsnorm_backward(dx, dw, dout, x, offset_weight(w, C, w_offset), rstd, N, C);
}
void gelu_forward(DeviceKind d, float* out, const float* x, int64_t n) {
  ZT_ON_GPU(gelu_forward(out, x, n));
  gelu_forward(out, x, n);
}
void gelu_backward(DeviceKind d, float* dx, const float* dout, const float* x, int64_t n) {
  ZT_ON_GPU(gelu_backward(dx, dout, x, n));
  gelu_backward(dx, dout, x, n);
}
void swiglu_forward(DeviceKind d, float* out, const float* x, int64_t N, int F) {
  ZT_ON_GPU(swiglu_forward(out, x, N, F));
  swiglu_forward(out, x, N, F);
}
void swiglu_backward(DeviceKind d, float* dx, const float* dout, const float* x, int64_t N, int F) {
  ZT_ON_GPU(swiglu_backward(dx, dout, x, N, F));
  swiglu_backward(dx, dout, x, N, F);
}
void geglu_forward(DeviceKind d, float* out, const float* x, int64_t N, int F) {
  ZT_ON_GPU(geglu_forward(out, x, N, F));
  geglu_forward(out, x, N, F);
}
void geglu_backward(DeviceKind d, float* dx, const float* dout, const float* x, int64_t N, int F) {
  ZT_ON_GPU(geglu_backward(dx, dout, x, N, F));
  geglu_backward(dx, dout, x, N, F);
}
void rope_forward(DeviceKind d, float* qkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                  int64_t rs, const int32_t* positions) {
  ZT_ON_GPU(rope_forward(qkv, cos, sin, B, T, NH, KVH, HS, rs, positions));
  rope_forward(qkv, cos, sin, B, T, NH, KVH, HS, rs, positions);
}
void rope_backward(DeviceKind d, float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                   int64_t rs, const int32_t* positions) {
  ZT_ON_GPU(rope_backward(dqkv, cos, sin, B, T, NH, KVH, HS, rs, positions));
  rope_backward(dqkv, cos, sin, B, T, NH, KVH, HS, rs, positions);
}
void embedding_forward(DeviceKind d, float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N,
                       int T, int C, const int32_t* positions) {
  ZT_ON_GPU(embedding_forward(out, tokens, wte, wpe, N, T, C, positions));
  embedding_forward(out, tokens, wte, wpe, N, T, C, positions);
}
void embedding_backward(DeviceKind d, float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N,
                        int T, int C, const int32_t* positions) {
  ZT_ON_GPU(embedding_backward(dwte, dwpe, dout, tokens, N, T, C, positions));
  embedding_backward(dwte, dwpe, dout, tokens, N, T, C, positions);
}
void add(DeviceKind d, float* y, const float* a, const float* b, int64_t n) {
  ZT_ON_GPU(add(y, a, b, n));
  add(y, a, b, n);
}
void scale(DeviceKind d, float* x, int64_t n, float m) {
  ZT_ON_GPU(scale(x, n, m));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= m;
}
void attention_forward(DeviceKind d, bool bf16, float* out, float* lse, const float* qkv, const AttnDims& ad) {
  ZT_ON_GPU(attention_forward(out, lse, qkv, ad, bf16 && ad.softcap == 0.f));  // as the CPU: capped runs fp32
  if (bf16 && ad.softcap == 0.f)  // soft-capped scores: the fp32 kernel (the bf16 one has no cap)
    attention_forward_bf16(out, lse, qkv, ad);
  else
    attention_forward(out, lse, qkv, ad);
}
void attention_backward(DeviceKind d, bool bf16, float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, const AttnDims& ad) {
  ZT_ON_GPU(attention_backward(dqkv, dout, qkv, out, lse, ad, bf16 && ad.softcap == 0.f));
  if (bf16 && ad.softcap == 0.f)
    attention_backward_bf16(dqkv, dout, qkv, out, lse, ad);
  else
    attention_backward(dqkv, dout, qkv, out, lse, ad);
}

namespace {
void gpu_bf16_only(DeviceKind d, DType t) {
  ZT_CHECK(d == DeviceKind::cpu || t == DType::bf16,
           "fp16 mixed precision runs on the CPU only for now; on the GPU use --bf16 (or fp32)");
}
}  // namespace

void to_lowp(DeviceKind d, DType t, uint16_t* dst, const float* src, int64_t n) {
  gpu_bf16_only(d, t);
  ZT_ON_GPU(to_bf16(dst, src, n));
  to_lowp(t, dst, src, n);
}
void from_lowp(DeviceKind d, DType t, float* dst, const uint16_t* src, int64_t n) {
  gpu_bf16_only(d, t);
  ZT_ON_GPU(from_bf16(dst, src, n));
  from_lowp(t, dst, src, n);
}
void to_bf16_keep(DeviceKind d, uint16_t* dst, float* src, int64_t n) {
  ZT_ON_GPU(to_bf16_keep(dst, src, n));
  to_bf16_keep(dst, src, n);
}
void round_to_f16(DeviceKind d, float* dst, const float* src, int64_t n) {
  gpu_bf16_only(d, DType::f16);
  round_to_f16(dst, src, n);
}
double lmhead_ce(DeviceKind d, float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                 const LmHeadDims& hd, float grad_scale, float* scratch, int64_t* count, const LmHeadCompute* compute,
                 double* token_loss) {
  ZT_ON_GPU(lmhead_ce(dx, dw, x, w, targets, hd, grad_scale, scratch, count, compute, token_loss));
  return lmhead_ce(dx, dw, x, w, targets, hd, grad_scale, scratch, count, compute, token_loss);
}

namespace {
// NF4 has no GPU twin yet: an error, never a host run on what would be device pointers.
void nf4_cpu_only(DeviceKind d) {
  ZT_CHECK(d == DeviceKind::cpu, "the NF4 kernels have no GPU version yet: run the 4-bit base on the CPU");
}
}  // namespace
void nf4_linear_forward(DeviceKind d, DType t, float* y, const void* x, const Nf4View& w, int64_t N, float beta) {
  nf4_cpu_only(d);
  nf4_linear_forward(t, y, x, w, N, beta);
}
void nf4_linear_backward_input(DeviceKind d, DType t, float* dx, const void* dy, const Nf4View& w, int64_t N,
                               float beta) {
  nf4_cpu_only(d);
  nf4_linear_backward_input(t, dx, dy, w, N, beta);
}
void nf4_linear_forward_rows(DeviceKind d, DType t, float* y, int64_t ldy, const void* x, const Nf4View& w,
                             int64_t row0, int64_t rows, int64_t N, float beta) {
  nf4_cpu_only(d);
  nf4_linear_forward_rows(t, y, ldy, x, w, row0, rows, N, beta);
}
void nf4_linear_backward_input_rows(DeviceKind d, DType t, float* dx, const void* dy, int64_t ld_dy, const Nf4View& w,
                                    int64_t row0, int64_t rows, int64_t N, float beta) {
  nf4_cpu_only(d);
  nf4_linear_backward_input_rows(t, dx, dy, ld_dy, w, row0, rows, N, beta);
}
void nf4_dequantize_rows(DeviceKind d, const Nf4View& q, int64_t r0, int64_t r1, DType t, void* tile) {
  nf4_cpu_only(d);
  nf4_dequantize_rows(q, r0, r1, t, tile);
}

void fill_zero(DeviceKind d, void* dst, size_t bytes) {
  if (bytes == 0) return;
  if (d == DeviceKind::cuda) return fill_device_zero(dst, bytes);
  std::memset(dst, 0, bytes);
}
void copy_rows(DeviceKind d, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               int64_t rows) {
  if (rows == 0 || row_bytes == 0) return;
  if (d == DeviceKind::cuda) return copy_device_rows(dst, dst_pitch, src, src_pitch, row_bytes, size_t(rows));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(static_cast<char*>(dst) + size_t(i) * dst_pitch, static_cast<const char*>(src) + size_t(i) * src_pitch,
                row_bytes);
}
void copy_in(DeviceKind d, void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  if (d == DeviceKind::cuda) return copy_to_device(dst, host_src, bytes);
  std::memcpy(dst, host_src, bytes);
}
void copy_out(DeviceKind d, void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (d == DeviceKind::cuda) return copy_to_host(host_dst, src, bytes);
  std::memcpy(host_dst, src, bytes);
}

// The MoE kernels have no GPU twin yet: one clear error instead of a crash on device pointers.
#define ZT_MOE_CPU_ONLY() \
  ZT_CHECK(d == DeviceKind::cpu, "mixture-of-experts layers run on the CPU only for now (no GPU kernels yet)")
void moe_router_forward(DeviceKind d, float* probs, int32_t* idx, float* w, float* lse, const float* logits,
                        const MoeDims& md, bool renorm) {
  ZT_MOE_CPU_ONLY();
  moe_router_forward(probs, idx, w, lse, logits, md, renorm);
}
void moe_router_backward(DeviceKind d, float* dlogits, const float* dw, const float* probs, const int32_t* idx,
                         const float* w, const float* lse, const float* dprob, float z_grad, const MoeDims& md,
                         bool renorm) {
  ZT_MOE_CPU_ONLY();
  moe_router_backward(dlogits, dw, probs, idx, w, lse, dprob, z_grad, md, renorm);
}
void moe_gather(DeviceKind d, float* xp, const float* x, const int32_t* token_of, int64_t R, int C) {
  ZT_MOE_CPU_ONLY();
  moe_gather(xp, x, token_of, R, C);
}
void moe_gather_backward(DeviceKind d, float* dx, const float* dxp, const int32_t* slot_of, const MoeDims& md) {
  ZT_MOE_CPU_ONLY();
  moe_gather_backward(dx, dxp, slot_of, md);
}
void moe_combine(DeviceKind d, float* y, const float* yp, const float* w, const int32_t* slot_of, const MoeDims& md) {
  ZT_MOE_CPU_ONLY();
  moe_combine(y, yp, w, slot_of, md);
}
void moe_combine_backward(DeviceKind d, float* dyp, float* dw, const float* dy, const float* yp, const float* w,
                          const int32_t* slot_of, const MoeDims& md) {
  ZT_MOE_CPU_ONLY();
  moe_combine_backward(dyp, dw, dy, yp, w, slot_of, md);
}
void moe_grouped_gemm(DeviceKind d, const int32_t* offsets, int E, bool trans_b, int64_t n, int64_t k, const float* a,
                      int64_t lda, const float* b, int64_t b_stride, int64_t ldb, float beta, float* c, int64_t ldc) {
  ZT_MOE_CPU_ONLY();
  moe_grouped_gemm(offsets, E, trans_b, n, k, a, lda, b, b_stride, ldb, beta, c, ldc);
}
void moe_grouped_wgrad(DeviceKind d, const int32_t* offsets, int E, int64_t n, int64_t k, const float* dy, int64_t lddy,
                       const float* x, int64_t ldx, float* dw, int64_t dw_stride, int64_t lddw) {
  ZT_MOE_CPU_ONLY();
  moe_grouped_wgrad(offsets, E, n, k, dy, lddy, x, ldx, dw, dw_stride, lddw);
}
void moe_grouped_gemm_typed(DeviceKind d, DType t, const int32_t* offsets, int E, bool trans_b, int64_t n, int64_t k,
                            const void* a, int64_t lda, const void* b, int64_t b_stride, int64_t ldb, float beta,
                            float* c, int64_t ldc) {
  ZT_MOE_CPU_ONLY();
  moe_grouped_gemm_typed(t, offsets, E, trans_b, n, k, a, lda, b, b_stride, ldb, beta, c, ldc);
}
void moe_grouped_wgrad_typed(DeviceKind d, DType t, const int32_t* offsets, int E, int64_t n, int64_t k, const void* dy,
                             int64_t lddy, const void* x, int64_t ldx, float* dw, int64_t dw_stride, int64_t lddw) {
  ZT_MOE_CPU_ONLY();
  moe_grouped_wgrad_typed(t, offsets, E, n, k, dy, lddy, x, ldx, dw, dw_stride, lddw);
}

void moe_shared_gate_forward(DeviceKind d, float* y, const float* o, const float* g, int64_t N, int C) {
  ZT_MOE_CPU_ONLY();
  moe_shared_gate_forward(y, o, g, N, C);
}
void moe_shared_gate_backward(DeviceKind d, float* do_, float* dg, const float* dy, const float* o, const float* g,
                              int64_t N, int C) {
  ZT_MOE_CPU_ONLY();
  moe_shared_gate_backward(do_, dg, dy, o, g, N, C);
}

}  // namespace zt::kernels
