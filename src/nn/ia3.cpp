// ia3.cpp: PEFT's IA3 beside a Linear (nn/layers.h): learned vectors l scaling a module's outputs,
//   y[:, o:o+m] = l (x W^T + b)[:, o:o+m]       dx = W^T (l dy)    dl += colsum(dy z), z = x W^T + b
// or, for a feedforward module (the Linear holds it alone), its input,
//   y = (x l) W^T + b                            dx = l (dy W)      dl += colsum(x (dy W))
// The unscaled z and dy W are recomputed in the weight pass (one GEMM over the adapted columns)
// rather than kept from forward: the base is frozen, so that GEMM replaces the weight gradient's.
// GEMM inputs are in the Linear's compute dtype, outputs and the vectors' gradients fp32.
#include <cstring>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/dispatch.h"
#include "kernels/scale_columns.h"
#include "nn/layers.h"

namespace zt::nn {

namespace {
// fp16 runs keep GEMM inputs as fp32 values on fp16's grid: a scaled input goes back on it.
void on_grid(const LinearLora& a, TensorView v) {
  if (a.precision == Precision::fp16) lower(a.precision, v, v);
}
}  // namespace

const void* ia3_forward_input(const Linear& l, TensorView x) {
  ZT_PROFILE("ia3");
  const LinearLora& a = l.lora;
  const int64_t N = rows(x);
  TensorView xs = a.scratch->ia3_x.sub(0, {N, l.in});
  kernels::scale_columns(x.dtype, xs.data, x.data, N, l.in, 0, l.in, a.ia3_in.as<const float>());
  on_grid(a, xs);
  return xs.data;
}

void ia3_forward_output(const Linear& l, TensorView y) {
  ZT_PROFILE("ia3");
  const int64_t N = rows(y);
  for (const LinearLora::Ia3Out& p : l.lora.ia3_out)
    kernels::scale_columns(DType::f32, y.data, y.data, N, l.out, p.out_begin, p.out_size, p.l.as<const float>());
}

const void* ia3_backward_dy(const Linear& l, TensorView dy_c) {
  ZT_PROFILE("ia3");
  const LinearLora& a = l.lora;
  const int64_t N = rows(dy_c);
  TensorView d = a.scratch->ia3_dy.sub(0, {N, l.out});
  std::memcpy(d.data, dy_c.data, size_t(N) * l.out * dtype_size(dy_c.dtype));
  for (const LinearLora::Ia3Out& p : a.ia3_out)
    kernels::scale_columns(dy_c.dtype, d.data, d.data, N, l.out, p.out_begin, p.out_size, p.l.as<const float>());
  on_grid(a, d);
  return d.data;
}

void ia3_backward_dx(const Linear& l, TensorView dx) {
  ZT_PROFILE("ia3");
  kernels::scale_columns(DType::f32, dx.data, dx.data, rows(dx), l.in, 0, l.in, l.lora.ia3_in.as<const float>());
}

namespace {
// z = x W^T + b over the outputs [o, o + m) into z (N, m), or with an NF4 base over all outputs
// into z (N, out) (*ld says which).
const float* unscaled_outputs(const Linear& l, TensorView x, int o, int m, int64_t* ld) {
  const DType t = l.wc.dtype;
  const int64_t N = rows(x);
  float* z = l.lora.scratch->ia3_f32.as<float>();
  if (l.nf4) {
    kernels::nf4_linear_forward(l.dev, t, z, x.data, *l.nf4, N);
    if (l.b) kernels::bias_forward(l.dev, z, l.b.as<const float>(), N, l.out);
    *ld = l.out;
    return z + o;
  }
  l.forward_columns(x.data, N, o, m, z);
  if (l.b) kernels::bias_forward(l.dev, z, l.b.as<const float>() + o, N, m);
  *ld = m;
  return z;
}
}  // namespace

void ia3_backward_weight(const Linear& l, TensorView dy, TensorView dy_c, TensorView x) {
  ZT_PROFILE("ia3");
  const LinearLora& a = l.lora;
  const DType t = l.wc.dtype;
  const int64_t N = rows(x);
  for (const LinearLora::Ia3Out& p : a.ia3_out) {
    int64_t ld = 0;
    const float* z = unscaled_outputs(l, x, p.out_begin, p.out_size, &ld);
    kernels::column_dot_add(p.dl.as<float>(), DType::f32, z, ld, dy.as<const float>() + p.out_begin, l.out, N,
                            p.out_size);
  }
  if (!a.ia3_in) return;
  // dy W (N, in): the gradient of the scaled input, as backward_input's GEMM computes it.
  float* g = a.scratch->ia3_f32.as<float>();
  if (l.nf4)
    kernels::nf4_linear_backward_input(l.dev, t, g, dy_c.data, *l.nf4, N);
  else
    l.backward_input_columns(dy_c.data, l.out, N, 0, l.out, 0.0f, g);
  kernels::column_dot_add(a.ia3_din.as<float>(), x.dtype, x.data, l.in, g, l.in, N, l.in);
}

}  // namespace zt::nn
