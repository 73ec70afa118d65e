// layers.cpp: Linear and Norm over the kernels.
#include "nn/layers.h"

#include <vector>

#include "core/profile.h"
#include "kernels/dispatch.h"

namespace zt::nn {

const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::fp16 ? "fp16" : "fp32";
}

const char* recompute_name(Recompute r) {
  return r == Recompute::full ? "full" : r == Recompute::selective ? "selective" : "none";
}

void lower(Precision p, TensorView dst, TensorView land, DeviceKind dev) {
  if (p == Precision::fp32) return;
  ZT_PROFILE("convert");
  ZT_ASSERT(dst.numel() == land.numel() && land.dtype == DType::f32);
  if (p == Precision::bf16)
    kernels::to_lowp(dev, DType::bf16, dst.as<uint16_t>(), land.as<const float>(), dst.numel());
  else
    kernels::round_to_f16(dev, dst.as<float>(), land.as<const float>(), dst.numel());
}

namespace {
// An activation view of n rows and `cols` columns in dtype t: checked once here so kernels
// can trust it.
const void* rows_of(const TensorView& v, int64_t n, int cols, DType t, const char* what) {
  ZT_ASSERT(v.numel() == n * cols, what, " has ", v.numel(), " elements, expected ", n, " x ", cols);
  ZT_ASSERT(v.dtype == t, what, " is ", dtype_name(v.dtype), ", the GEMMs run in ", dtype_name(t));
  return v.data;
}
const float* rows_of(const TensorView& v, int64_t n, int cols, const char* what) {
  return static_cast<const float*>(rows_of(v, n, cols, DType::f32, what));
}
}  // namespace

void Linear::forward(TensorView y, TensorView x) const {
  ZT_PROFILE("gemm");
  const int64_t N = rows(x);
  const DType t = wc.dtype;
  const void* xp = rows_of(x, N, in, t, "Linear input");
  float* yp = const_cast<float*>(rows_of(y, N, out, "Linear output"));
  if (lora.ia3_in) xp = ia3_forward_input(*this, x);
  if (nf4)
    kernels::nf4_linear_forward(t, yp, xp, *nf4, N);
  else if (w_in_out)
    kernels::gemm_typed(dev, t, false, false, N, out, in, 1.0f, xp, in, wc.data, out, 0.0f, yp, out);
  else
    kernels::gemm_typed(dev, t, false, true, N, out, in, 1.0f, xp, in, wc.data, in, 0.0f, yp, out);
  if (b) kernels::bias_forward(dev, yp, b.as<const float>(), N, out);
  if (lora.on()) lora_forward(*this, y, x);
  if (!lora.ia3_out.empty()) ia3_forward_output(*this, y);
}

void Linear::backward_input(TensorView dx, TensorView dy_c) const {
  ZT_PROFILE("gemm");
  const int64_t N = rows(dy_c);
  const DType t = wc.dtype;
  const void* dyp = rows_of(dy_c, N, out, t, "Linear output gradient");
  float* dxp = const_cast<float*>(rows_of(dx, N, in, "Linear input gradient"));
  if (!lora.ia3_out.empty()) dyp = ia3_backward_dy(*this, dy_c);
  // DoRA: the adapter's GEMMs read the scaled gradient, and so does the base's without dropout
  // (with dropout, the scale's share of the base term goes through the dropped input).
  const TensorView dz = lora.dora ? dora_backward_dy(*this, dy_c) : dy_c;
  if (lora.dora && lora.dropout <= 0.f) dyp = dz.data;
  if (nf4)
    kernels::nf4_linear_backward_input(t, dxp, dyp, *nf4, N);
  else if (w_in_out)
    kernels::gemm_typed(dev, t, false, true, N, in, out, 1.0f, dyp, out, wc.data, out, 0.0f, dxp, in);
  else
    kernels::gemm_typed(dev, t, false, false, N, in, out, 1.0f, dyp, out, wc.data, in, 0.0f, dxp, in);
  if (lora.on()) lora_backward_input(*this, dx, dz, dy_c);
  if (lora.ia3_in) ia3_backward_dx(*this, dx);
}

void Linear::backward_weight(TensorView dy, TensorView dy_c, TensorView x) const {
  ZT_PROFILE("gemm");
  const int64_t N = rows(dy_c);
  const DType t = wc.dtype;
  const void* dyp = rows_of(dy_c, N, out, t, "Linear output gradient");
  const void* xp = rows_of(x, N, in, t, "Linear input");
  if (lora.on()) lora_backward_weight(*this, lora.dora ? dora_backward_dy(*this, dy_c) : dy_c, x);
  if (lora.dora) dora_backward_magnitude(*this, dy, x);
  if (lora.ia3_on()) ia3_backward_weight(*this, dy, dy_c, x);
  float* dwp = dw.as<float>();  // null: frozen (LoRA's base), no weight gradient
  if (dwp && w_in_out)
    kernels::gemm_typed(dev, t, true, false, in, out, N, 1.0f, xp, in, dyp, out, 1.0f, dwp, out);
  else if (dwp)
    kernels::gemm_typed(dev, t, true, false, out, in, N, 1.0f, dyp, out, xp, in, 1.0f, dwp, in);
  if (db) kernels::bias_backward(dev, db.as<float>(), rows_of(dy, N, out, "Linear output gradient"), N, out);
}

namespace {
const char* elements_in(const void* p, int64_t elements, DType t) {
  return static_cast<const char*>(p) + elements * int64_t(dtype_size(t));
}
}  // namespace

void Linear::forward_columns(const void* x, int64_t N, int o, int m, float* z) const {
  const DType t = wc.dtype;
  if (nf4) return kernels::nf4_linear_forward_rows(dev, t, z, m, x, *nf4, o, m, N);  // (out, in) rows
  if (w_in_out)                                                                      // W (in, out): columns [o, o + m)
    kernels::gemm_typed(dev, t, false, false, N, m, in, 1.0f, x, in, elements_in(wc.data, o, t), out, 0.0f, z, m);
  else  // W (out, in): rows [o, o + m)
    kernels::gemm_typed(dev, t, false, true, N, m, in, 1.0f, x, in, elements_in(wc.data, int64_t(o) * in, t), in, 0.0f,
                        z, m);
}

void Linear::backward_input_columns(const void* dy, int64_t ld_dy, int64_t N, int o, int m, float beta,
                                    float* dx) const {
  const DType t = wc.dtype;
  const void* d = elements_in(dy, o, t);
  if (nf4) return kernels::nf4_linear_backward_input_rows(dev, t, dx, d, ld_dy, *nf4, o, m, N, beta);
  if (w_in_out)
    kernels::gemm_typed(dev, t, false, true, N, in, m, 1.0f, d, ld_dy, elements_in(wc.data, o, t), out, beta, dx, in);
  else
    kernels::gemm_typed(dev, t, false, false, N, in, m, 1.0f, d, ld_dy, elements_in(wc.data, int64_t(o) * in, t), in,
                        beta, dx, in);
}

void Linear::backward(TensorView dx, TensorView dy, TensorView x) const {
  if (dx) backward_input(dx, dy);
  backward_weight(dy, dy, x);
}

void Norm::forward(TensorView out, TensorView mean, TensorView rstd, TensorView x) const {
  ZT_PROFILE("norm");
  const int64_t N = rows(x);
  const float* xp = rows_of(x, N, C, "Norm input");
  float* op = const_cast<float*>(rows_of(out, N, C, "Norm output"));
  if (kind == NormKind::none) {
    if (op != xp) kernels::copy_rows(dev, op, size_t(C) * 4, xp, size_t(C) * 4, size_t(C) * 4, N);
  } else if (kind == NormKind::layernorm)
    kernels::layernorm_forward(dev, op, mean.as<float>(), rstd.as<float>(), xp, w.as<const float>(),
                               b.as<const float>(), N, C, eps);
  else
    kernels::rmsnorm_forward(dev, op, rstd.as<float>(), xp, w.as<const float>(), N, C, eps, unit_offset ? 1.f : 0.f);
}

void Norm::backward(TensorView dx, TensorView dout, TensorView x, TensorView mean, TensorView rstd) const {
  ZT_PROFILE("norm");
  const int64_t N = rows(x);
  float* dxp = const_cast<float*>(rows_of(dx, N, C, "Norm input gradient"));
  if (kind == NormKind::none)
    kernels::add(dev, dxp, dxp, dout.as<const float>(), N * C);
  else if (kind == NormKind::layernorm)
    kernels::layernorm_backward(dev, dxp, dw.as<float>(), db.as<float>(), dout.as<const float>(), x.as<const float>(),
                                w.as<const float>(), mean.as<const float>(), rstd.as<const float>(), N, C);
  else
    kernels::rmsnorm_backward(dev, dxp, dw.as<float>(), dout.as<const float>(), x.as<const float>(),
                              w.as<const float>(), rstd.as<const float>(), N, C, unit_offset ? 1.f : 0.f);
}

}  // namespace zt::nn
