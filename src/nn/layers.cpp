// layers.cpp: Linear and Norm over the kernels.
#include "nn/layers.h"

#include "core/profile.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"

namespace zt::nn {

using kernels::gemm;

namespace {
// An activation view of n rows and `cols` columns: checked once here so kernels can trust it.
const float* rows_of(const TensorView& v, int64_t n, int cols, const char* what) {
  ZT_ASSERT(v.numel() == n * cols, what, " has ", v.numel(), " elements, expected ", n, " x ", cols);
  return v.as<const float>();
}
}  // namespace

void Linear::forward(TensorView y, TensorView x) const {
  ZT_PROFILE("gemm");
  const int64_t N = rows(x);
  const float* xp = rows_of(x, N, in, "Linear input");
  float* yp = const_cast<float*>(rows_of(y, N, out, "Linear output"));
  const float* wp = w.as<const float>();
  if (w_in_out)
    gemm(false, false, N, out, in, 1.0f, xp, in, wp, out, 0.0f, yp, out);
  else
    gemm(false, true, N, out, in, 1.0f, xp, in, wp, in, 0.0f, yp, out);
  if (b) kernels::bias_forward(yp, b.as<const float>(), N, out);
}

void Linear::backward_input(TensorView dx, TensorView dy) const {
  ZT_PROFILE("gemm");
  const int64_t N = rows(dy);
  const float* dyp = rows_of(dy, N, out, "Linear output gradient");
  float* dxp = const_cast<float*>(rows_of(dx, N, in, "Linear input gradient"));
  const float* wp = w.as<const float>();
  if (w_in_out)
    gemm(false, true, N, in, out, 1.0f, dyp, out, wp, out, 0.0f, dxp, in);
  else
    gemm(false, false, N, in, out, 1.0f, dyp, out, wp, in, 0.0f, dxp, in);
}

void Linear::backward(TensorView dx, TensorView dy, TensorView x) const {
  if (dx) backward_input(dx, dy);
  ZT_PROFILE("gemm");
  const int64_t N = rows(dy);
  const float* dyp = rows_of(dy, N, out, "Linear output gradient");
  const float* xp = rows_of(x, N, in, "Linear input");
  float* dwp = dw.as<float>();
  if (w_in_out)
    gemm(true, false, in, out, N, 1.0f, xp, in, dyp, out, 1.0f, dwp, out);
  else
    gemm(true, false, out, in, N, 1.0f, dyp, out, xp, in, 1.0f, dwp, in);
  if (db) kernels::bias_backward(db.as<float>(), dyp, N, out);
}

void Norm::forward(TensorView out, TensorView mean, TensorView rstd, TensorView x) const {
  ZT_PROFILE("norm");
  const int64_t N = rows(x);
  const float* xp = rows_of(x, N, C, "Norm input");
  float* op = const_cast<float*>(rows_of(out, N, C, "Norm output"));
  if (kind == NormKind::layernorm)
    kernels::layernorm_forward(op, mean.as<float>(), rstd.as<float>(), xp, w.as<const float>(), b.as<const float>(), N,
                               C, eps);
  else
    kernels::rmsnorm_forward(op, rstd.as<float>(), xp, w.as<const float>(), N, C, eps);
}

void Norm::backward(TensorView dx, TensorView dout, TensorView x, TensorView mean, TensorView rstd) const {
  ZT_PROFILE("norm");
  const int64_t N = rows(x);
  float* dxp = const_cast<float*>(rows_of(dx, N, C, "Norm input gradient"));
  if (kind == NormKind::layernorm)
    kernels::layernorm_backward(dxp, dw.as<float>(), db.as<float>(), dout.as<const float>(), x.as<const float>(),
                                w.as<const float>(), mean.as<const float>(), rstd.as<const float>(), N, C);
  else
    kernels::rmsnorm_backward(dxp, dw.as<float>(), dout.as<const float>(), x.as<const float>(), w.as<const float>(),
                              rstd.as<const float>(), N, C);
}

}  // namespace zt::nn
