// lora.cpp: a LoRA adapter's passes beside its Linear (nn/layers.h). For each part (a module of a
// possibly fused Linear, outputs [o, o + m)), with x' = dropout(x):
//   forward   y[:, o:o+m] += scale (x' A^T) B^T
//   backward  g = scale dy[:, o:o+m] B;  dx += dropout'(g A);  dB += scale dy^T (x' A^T);  dA += g^T x'
// Every part's A is one (parts r, in) matrix, so x' A^T, g A and dA are one GEMM each; the B's are
// one small GEMM per part. h = x' A^T is recomputed in backward (N r values: a thin GEMM) rather
// than kept, and the dropout mask is a function of (seed, element), so nothing is saved per pass.
// GEMM inputs are in the Linear's compute dtype, outputs fp32, as the base's GEMMs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/dispatch.h"
#include "kernels/dropout.h"
#include "kernels/gemm.h"
#include "kernels/scale_columns.h"
#include "nn/block.h"
#include "nn/layers.h"

namespace zt::nn {

namespace {
const char* at(const void* p, int64_t elements, DType t) {
  return static_cast<const char*>(p) + elements * int64_t(dtype_size(t));
}

// The mask's numbering: a row-parallel layer's inputs are columns of the whole layer's.
kernels::DropoutCut dropout_cut(const Linear& l) {
  const LinearLora& a = l.lora;
  return a.in_whole > 0 ? kernels::DropoutCut{l.in, a.in_whole, a.in_begin} : kernels::DropoutCut{l.in, l.in, 0};
}

// The adapter's GEMM input: x itself, or (dropout in a training pass) x' in the scratch.
const void* adapter_input(const Linear& l, TensorView x) {
  const LinearLora& a = l.lora;
  if (a.dropout <= 0.f) return x.data;
  ZT_ASSERT(a.scratch->xd.numel() >= x.numel(), "LoRA scratch too small for the dropped input");
  kernels::dropout_forward(x.dtype, a.scratch->xd.data, x.data, x.numel(), a.dropout, a.seed, dropout_cut(l));
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

namespace {
// DoRA: per part, the norms of W + s B A's output rows (fp32 masters; the norm is a constant of
// backward, as PEFT detaches it) and the scales c = m / norm, into the scratch at the outputs. A
// row-parallel slice holds part of every row: its squared norms are summed over the TP group (one
// all-reduce of the outputs' floats per call; every rank calls in the same order).
void dora_scales(const Linear& l) {
  const LinearLora& a = l.lora;
  ZT_ASSERT(l.nf4 || (l.w && l.w.dtype == DType::f32), "DoRA needs the base's fp32 or NF4 weight");
  float* n = a.scratch->dora_n.as<float>();
  float* c = a.scratch->dora_c.as<float>();
  float* sum = a.scratch->dora_w.as<float>();
  const float* w = l.nf4 ? nullptr : l.w.as<const float>();
  const bool sliced = a.row_group != nullptr;
  for (size_t i = 0; i < a.parts.size(); ++i) {
    const LoraPart& p = a.parts[i];
    // s B A a panel of rows at a time (the scratch holds kDoraRows rows of `in`), then each row's
    // norm with W's row added.
    for (int j0 = 0; j0 < p.out_size; j0 += kDoraRows) {
      const int rows_now = std::min(kDoraRows, p.out_size - j0), o = p.out_begin + j0;
      // QDoRA: W's rows dequantized (fp32, (out, in)) into the panel, s B A added onto them.
      if (l.nf4) kernels::nf4_dequantize_rows(l.dev, *l.nf4, o, o + rows_now, DType::f32, sum);
      kernels::gemm_typed(DType::f32, false, false, rows_now, l.in, a.r, a.scale, p.b.as<const float>() + j0 * a.r, a.r,
                          a.a.as<const float>() + int64_t(i) * a.r * l.in, l.in, l.nf4 ? 1.0f : 0.0f, sum, l.in);
      if (l.nf4)
        kernels::row_norms_of_sum(n + o, nullptr, sum, l.in, 1, rows_now, l.in, sliced);
      else if (l.w_in_out)  // (in, out): output j is column j
        kernels::row_norms_of_sum(n + o, sum, w + o, 1, l.out, rows_now, l.in, sliced);
      else
        kernels::row_norms_of_sum(n + o, sum, w + int64_t(o) * l.in, l.in, 1, rows_now, l.in, sliced);
    }
    if (sliced) {
      a.row_group->all_reduce_sum(n + p.out_begin, p.out_size);
      for (int j = 0; j < p.out_size; ++j) n[p.out_begin + j] = std::sqrt(n[p.out_begin + j]);
    }
    const float* m = p.m.as<const float>();
    for (int j = 0; j < p.out_size; ++j) c[p.out_begin + j] = m[j] / n[p.out_begin + j];
  }
}

// z (N, m) = x' W^T + s x' A^T B^T over part i's outputs, into the scratch (no bias: the scale
// multiplies only this); hin = x' A^T of every part.
const float* dora_outputs(const Linear& l, const void* xin, const void* hin, size_t i, int64_t N) {
  const LinearLora& a = l.lora;
  const DType t = l.wc.dtype;
  const LoraPart& p = a.parts[i];
  const int o = p.out_begin, m = p.out_size, R = int(a.parts.size()) * a.r;
  float* z = a.scratch->ia3_f32.as<float>();
  l.forward_columns(xin, N, o, m, z);
  kernels::gemm_typed(l.dev, t, false, true, N, m, a.r, a.scale, at(hin, int64_t(i) * a.r, t), R, p.bc.data, a.r, 1.0f,
                      z, m);
  return z;
}

// DoRA on y = x W^T + b + s x' A^T B^T (lora_forward's): without dropout (x' = x) y = b + c (y - b)
// on the parts' outputs; with it, PEFT's y += (c - 1) (x' W^T + s x' A^T B^T), whose base term needs
// one more GEMM over the parts' columns.
void dora_rescale(const Linear& l, TensorView y, const void* xin, const void* hin) {
  const LinearLora& a = l.lora;
  dora_scales(l);
  const float* c = a.scratch->dora_c.as<const float>();
  float* shift = a.scratch->dora_shift.as<float>();
  const int64_t N = rows(y);
  if (a.dropout > 0.f) {
    for (size_t i = 0; i < a.parts.size(); ++i) {
      const LoraPart& p = a.parts[i];
      for (int j = 0; j < p.out_size; ++j) shift[p.out_begin + j] = c[p.out_begin + j] - 1.f;
      kernels::add_scaled_columns(y.as<float>(), l.out, p.out_begin, dora_outputs(l, xin, hin, i, N), p.out_size, N,
                                  p.out_size, shift + p.out_begin);
    }
    return;
  }
  for (const LoraPart& p : a.parts) {
    for (int j = 0; j < p.out_size; ++j)
      shift[p.out_begin + j] = l.b ? (1.f - c[p.out_begin + j]) * l.b.as<const float>()[p.out_begin + j] : 0.f;
    kernels::scale_shift_columns(y.as<float>(), rows(y), l.out, p.out_begin, p.out_size, c + p.out_begin,
                                 shift + p.out_begin);
  }
}
}  // namespace

TensorView dora_backward_dy(const Linear& l, TensorView dy_c) {
  ZT_PROFILE("lora");
  const LinearLora& a = l.lora;
  const int64_t N = rows(dy_c);
  dora_scales(l);
  const float* c = a.scratch->dora_c.as<const float>();
  TensorView d = a.scratch->ia3_dy.sub(0, {N, l.out});
  std::memcpy(d.data, dy_c.data, size_t(N) * l.out * dtype_size(dy_c.dtype));
  for (const LoraPart& p : a.parts)
    kernels::scale_columns(dy_c.dtype, d.data, d.data, N, l.out, p.out_begin, p.out_size, c + p.out_begin);
  if (a.precision == Precision::fp16) lower(a.precision, d, d);  // back on fp16's grid
  return d;
}

void dora_backward_magnitude(const Linear& l, TensorView dy, TensorView x) {
  ZT_PROFILE("lora");
  const LinearLora& a = l.lora;
  const int64_t N = rows(x);
  dora_scales(l);
  const float* n = a.scratch->dora_n.as<const float>();
  const void* xin = adapter_input(l, x);
  const void* hin = adapter_hidden(l, xin, N);
  for (size_t i = 0; i < a.parts.size(); ++i) {
    const LoraPart& p = a.parts[i];
    std::vector<float> dots(size_t(p.out_size), 0.f);
    kernels::column_dot_add(dots.data(), DType::f32, dora_outputs(l, xin, hin, i, N), p.out_size,
                            dy.as<const float>() + p.out_begin, l.out, N, p.out_size);
    float* dm = p.dm.as<float>();
    for (int j = 0; j < p.out_size; ++j) dm[j] += dots[size_t(j)] / n[p.out_begin + j];
  }
}

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
  if (a.dora) dora_rescale(l, y, xin, hin);
}

namespace {
// DoRA with dropout: dxd += ((c - 1) dy) W over the parts' columns, the dropped input's share of
// the base term. Writes (c - 1) dy into the scratch that held dora_backward_dy's result.
void dora_dropped_base_grad(const Linear& l, float* dxd, TensorView dy_c) {
  const LinearLora& a = l.lora;
  const DType t = l.wc.dtype;
  const int64_t N = rows(dy_c);
  dora_scales(l);
  const float* c = a.scratch->dora_c.as<const float>();
  float* cm1 = a.scratch->dora_shift.as<float>();
  TensorView d = a.scratch->ia3_dy.sub(0, {N, l.out});
  for (const LoraPart& p : a.parts) {
    for (int j = 0; j < p.out_size; ++j) cm1[p.out_begin + j] = c[p.out_begin + j] - 1.f;
    kernels::scale_columns(t, d.data, dy_c.data, N, l.out, p.out_begin, p.out_size, cm1 + p.out_begin);
  }
  if (a.precision == Precision::fp16) lower(a.precision, d, d);
  for (const LoraPart& p : a.parts) {
    l.backward_input_columns(d.data, l.out, N, p.out_begin, p.out_size, 1.0f, dxd);
  }
}
}  // namespace

void lora_backward_input(const Linear& l, TensorView dx, TensorView dy_c, TensorView dy_unscaled) {
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
  if (a.dora) dora_dropped_base_grad(l, dxd, dy_unscaled);
  kernels::dropout_backward_add(dx.as<float>(), dxd, N * l.in, a.dropout, a.seed, dropout_cut(l));
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
