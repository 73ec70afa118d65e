// lora.cpp: a LoRA adapter's passes beside its Linear (nn/layers.h). For each part (a module of a
// possibly fused Linear, outputs [o, o + m)), with x' = dropout(x):
//   forward   y[:, o:o+m] += scale (x' A^T) B^T
//   backward  g = scale dy[:, o:o+m] B;  dx += dropout'(g A);  dB += scale dy^T (x' A^T);  dA += g^T x'
// Every part's A is one (parts r, in) matrix, so x' A^T, g A and dA are one GEMM each; the B's are
// one small GEMM per part. h = x' A^T is recomputed in backward (N r values: a thin GEMM) rather
// than kept, and the dropout mask is a function of (seed, element), so nothing is saved per pass.
// GEMM inputs are in the Linear's compute dtype, outputs fp32, as the base's GEMMs.
#include <cstring>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/dispatch.h"
#include "kernels/dropout.h"
#include "nn/layers.h"

namespace zt::nn {

namespace {
const char* at(const void* p, int64_t elements, DType t) {
  return static_cast<const char*>(p) + elements * int64_t(dtype_size(t));
}

// The adapter's GEMM input: x itself, or (dropout in a training pass) x' in the scratch.
const void* adapter_input(const Linear& l, TensorView x) {
  const LinearLora& a = l.lora;
  if (a.dropout <= 0.f) return x.data;
  ZT_ASSERT(a.scratch->xd.numel() >= x.numel(), "LoRA scratch too small for the dropped input");
  kernels::dropout_forward(x.dtype, a.scratch->xd.data, x.data, x.numel(), a.dropout, a.seed);
  return a.scratch->xd.data;
}

// An fp32 temporary (N, R) made a GEMM input: itself (fp32; fp16 rounds it in place) or its
// compute-dtype copy.
const void* lowered(const LinearLora& a, TensorView f32, TensorView low) {
  if (a.precision == Precision::bf16) {
    lower(a.precision, low, f32);
    return low.data;
  }
  lower(a.precision, f32, f32);
  return f32.data;
}

// g (N, R) = scale dy B per part, in the GEMMs' dtype.
const void* adapter_grad(const Linear& l, TensorView dy_c, int64_t N) {
  const LinearLora& a = l.lora;
  const DType t = l.wc.dtype;
  const int R = int(a.parts.size()) * a.r;
  TensorView g = a.scratch->g.sub(0, {N, R});
  for (size_t i = 0; i < a.parts.size(); ++i) {
    const LoraPart& p = a.parts[i];
    kernels::gemm_typed(l.dev, t, false, false, N, a.r, p.out_size, a.scale, at(dy_c.data, p.out_begin, t), l.out,
                        p.bc.data, a.r, 0.0f, g.as<float>() + int64_t(i) * a.r, R);
  }
  return lowered(a, g, a.precision == Precision::bf16 ? a.scratch->g_c.sub(0, {N, R}) : TensorView());
}
// h (N, R) = x' A^T for every part at once, in the GEMMs' dtype (forward, and again in backward).
const void* adapter_hidden(const Linear& l, const void* xin, int64_t N) {
  const LinearLora& a = l.lora;
  const DType t = l.wc.dtype;
  const int R = int(a.parts.size()) * a.r;
  TensorView h = a.scratch->h.sub(0, {N, R});
  kernels::gemm_typed(l.dev, t, false, true, N, R, l.in, 1.0f, xin, l.in, a.ac.data, l.in, 0.0f, h.as<float>(), R);
  return lowered(a, h, t == DType::bf16 ? a.scratch->h_c.sub(0, {N, R}) : TensorView());
}
}  // namespace

void lora_forward(const Linear& l, TensorView y, TensorView x) {
  ZT_PROFILE("lora");
  const LinearLora& a = l.lora;
  const DType t = l.wc.dtype;
  const int64_t N = rows(x);
  const int R = int(a.parts.size()) * a.r;
  const void* xin = adapter_input(l, x);
  const void* hin = adapter_hidden(l, xin, N);
  for (size_t i = 0; i < a.parts.size(); ++i) {
    const LoraPart& p = a.parts[i];
    kernels::gemm_typed(l.dev, t, false, true, N, p.out_size, a.r, a.scale, at(hin, int64_t(i) * a.r, t), R, p.bc.data,
                        a.r, 1.0f, y.as<float>() + p.out_begin, l.out);
  }
}

void lora_backward_input(const Linear& l, TensorView dx, TensorView dy_c) {
  ZT_PROFILE("lora");
  const LinearLora& a = l.lora;
  const DType t = l.wc.dtype;
  const int64_t N = rows(dy_c);
  const int R = int(a.parts.size()) * a.r;
  const void* g = adapter_grad(l, dy_c, N);
  if (a.dropout <= 0.f) {
    kernels::gemm_typed(l.dev, t, false, false, N, l.in, R, 1.0f, g, R, a.ac.data, l.in, 1.0f, dx.as<float>(), l.in);
    return;
  }
  float* dxd = a.scratch->dxd.as<float>();
  kernels::gemm_typed(l.dev, t, false, false, N, l.in, R, 1.0f, g, R, a.ac.data, l.in, 0.0f, dxd, l.in);
  kernels::dropout_backward_add(dx.as<float>(), dxd, N * l.in, a.dropout, a.seed);
}

void lora_backward_weight(const Linear& l, TensorView dy_c, TensorView x) {
  ZT_PROFILE("lora");
  const LinearLora& a = l.lora;
  const DType t = l.wc.dtype;
  const int64_t N = rows(x);
  const int R = int(a.parts.size()) * a.r;
  const void* xin = adapter_input(l, x);
  const void* hin = adapter_hidden(l, xin, N);
  for (size_t i = 0; i < a.parts.size(); ++i) {
    const LoraPart& p = a.parts[i];
    kernels::gemm_typed(l.dev, t, true, false, p.out_size, a.r, N, a.scale, at(dy_c.data, p.out_begin, t), l.out,
                        at(hin, int64_t(i) * a.r, t), R, 1.0f, p.db.as<float>(), a.r);
  }
  const void* g = adapter_grad(l, dy_c, N);
  kernels::gemm_typed(l.dev, t, true, false, R, l.in, N, 1.0f, g, R, xin, l.in, 1.0f, a.da.as<float>(), l.in);
}

}  // namespace zt::nn
