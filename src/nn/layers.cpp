// layers.cpp: Linear and Norm over the kernels.
#include "nn/layers.h"

#include "core/profile.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"

namespace zt::nn {

using kernels::gemm;

void Linear::forward(float* y, const float* x, int64_t N, bool accumulate) const {
  ZT_PROFILE("gemm");
  float beta = accumulate ? 1.0f : 0.0f;
  if (w_in_out)
    gemm(false, false, N, out, in, 1.0f, x, in, w, out, beta, y, out);
  else
    gemm(false, true, N, out, in, 1.0f, x, in, w, in, beta, y, out);
  if (b) kernels::bias_forward(y, b, N, out);
}

void Linear::backward_input(float* dx, const float* dy, int64_t N) const {
  ZT_PROFILE("gemm");
  if (w_in_out)
    gemm(false, true, N, in, out, 1.0f, dy, out, w, out, 0.0f, dx, in);
  else
    gemm(false, false, N, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}

void Linear::backward(float* dx, const float* dy, const float* x, int64_t N) const {
  if (dx) backward_input(dx, dy, N);
  ZT_PROFILE("gemm");
  if (w_in_out)
    gemm(true, false, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, out);
  else
    gemm(true, false, out, in, N, 1.0f, dy, out, x, in, 1.0f, dw, in);
  if (db) kernels::bias_backward(db, dy, N, out);
}

void Norm::forward(float* out, float* mean, float* rstd, const float* x, int64_t N) const {
  ZT_PROFILE("norm");
  if (kind == NormKind::layernorm)
    kernels::layernorm_forward(out, mean, rstd, x, w, b, N, C, eps);
  else
    kernels::rmsnorm_forward(out, rstd, x, w, N, C, eps);
}

void Norm::backward(float* dx, const float* dout, const float* x, const float* mean, const float* rstd,
                    int64_t N) const {
  ZT_PROFILE("norm");
  if (kind == NormKind::layernorm)
    kernels::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
  else
    kernels::rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
}

}  // namespace zt::nn
