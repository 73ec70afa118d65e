// block.cpp: see block.h.
#include "nn/block.h"

#include <algorithm>

#include "core/profile.h"
#include "kernels/ops.h"

namespace zt::nn {

BlockActs Block::carve_acts(Carver& c, const BlockShape& s, int B, int T) {
  const int64_t N = int64_t(B) * T;
  const bool ln = s.norm == NormKind::layernorm;
  BlockActs a{};
  a.ln1 = c.take(DType::f32, {N, s.C});
  a.ln1_mean = c.take(DType::f32, {ln ? N : 0});
  a.ln1_rstd = c.take(DType::f32, {N});
  a.qkv = c.take(DType::f32, {N, s.qkv_dim()});
  a.att = c.take(DType::f32, {N, int64_t(s.NH) * s.HS});
  a.lse = c.take(DType::f32, {N, s.NH});
  a.mid = c.take(DType::f32, {N, s.C});
  a.ln2 = c.take(DType::f32, {N, s.C});
  a.ln2_mean = c.take(DType::f32, {ln ? N : 0});
  a.ln2_rstd = c.take(DType::f32, {N});
  a.fc = c.take(DType::f32, {N, s.fc_dim()});
  const int64_t qh = s.qk_norm ? N * s.NH : 0, kh = s.qk_norm ? N * s.KVH : 0;
  a.q_raw = c.take(DType::f32, {qh, s.HS});
  a.k_raw = c.take(DType::f32, {kh, s.HS});
  a.q_rstd = c.take(DType::f32, {qh});
  a.k_rstd = c.take(DType::f32, {kh});
  return a;
}

BlockScratch Block::carve_scratch(Carver& c, const BlockShape& s, int B, int T) {
  const int64_t N = int64_t(B) * T;
  BlockScratch r{};
  r.act = c.take(DType::f32, {N, s.F});  // recomputed activation, then reused for its gradient
  r.dfc = c.take(DType::f32, {s.mlp == MlpKind::swiglu ? N : 0, s.fc_dim()});
  r.dln = c.take(DType::f32, {N, s.C});
  r.datt = c.take(DType::f32, {N, int64_t(s.NH) * s.HS});
  r.dqkv = c.take(DType::f32, {N, s.qkv_dim()});
  const int64_t heads = s.qk_norm ? N * (s.NH + s.KVH) : 0;
  r.qk_a = c.take(DType::f32, {heads, s.HS});
  r.qk_b = c.take(DType::f32, {heads, s.HS});
  return r;
}

void Block::forward(TensorView y, TensorView x, const BlockActs& a, const BlockScratch& sc, int B, int T,
                    const RopeTable& rope, const Packing& pack) const {
  const BlockShape& s = shape;
  kernels::AttnDims ad{B, T, s.NH, s.KVH, s.HS, pack.doc_start};
  ln1.forward(a.ln1, a.ln1_mean, a.ln1_rstd, x);
  qkv.forward(a.qkv, a.ln1);
  if (s.qk_norm) qk_norm_forward(a.qkv, a, sc);
  if (s.rope)
    kernels::rope_forward(a.qkv.as<float>(), rope.cos, rope.sin, B, T, s.NH, s.KVH, s.HS, s.qkv_dim(), pack.positions);
  {
    ZT_PROFILE("attention_fwd");
    kernels::attention_forward(a.att.as<float>(), a.lse.as<float>(), a.qkv.as<const float>(), ad);
  }
  // The residual add is its own step after the projection (not folded into the GEMM as
  // C += A B): a row-parallel projection's partial sums are reduced first (tp hook), and x
  // is added once, not on every tensor-parallel rank.
  proj.forward(a.mid, a.att);
  if (tp) tp->row_parallel_output(a.mid);
  residual_add(a.mid, x);
  ln2.forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.mid);
  fc_in.forward(a.fc, a.ln2);
  activation_forward(sc.act, a.fc);
  fc_out.forward(y, sc.act);
  if (tp) tp->row_parallel_output(y);
  residual_add(y, a.mid);
}

namespace {
// Copies `heads` head vectors (HS floats each) per row between qkv rows (stride rs, starting
// at column col) and a packed (N heads, HS) buffer.
void heads_gather(float* dst, const float* qkv, int64_t N, int64_t rs, int64_t col, int heads, int HS) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) std::copy_n(qkv + i * rs + col, int64_t(heads) * HS, dst + i * heads * HS);
}
void heads_scatter(float* qkv, const float* src, int64_t N, int64_t rs, int64_t col, int heads, int HS) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) std::copy_n(src + i * heads * HS, int64_t(heads) * HS, qkv + i * rs + col);
}
}  // namespace

void Block::qk_norm_forward(TensorView qkv_out, const BlockActs& a, const BlockScratch& sc) const {
  ZT_PROFILE("qk_norm");
  const BlockShape& s = shape;
  const int64_t N = rows(qkv_out), rs = s.qkv_dim(), kcol = int64_t(s.NH) * s.HS;
  float* x = qkv_out.as<float>();
  const TensorView qo = sc.qk_a.sub(0, {N * s.NH, s.HS}), ko = sc.qk_a.sub(N * s.NH * s.HS, {N * s.KVH, s.HS});
  heads_gather(a.q_raw.as<float>(), x, N, rs, 0, s.NH, s.HS);
  heads_gather(a.k_raw.as<float>(), x, N, rs, kcol, s.KVH, s.HS);
  q_norm.forward(qo, {}, a.q_rstd, a.q_raw);
  k_norm.forward(ko, {}, a.k_rstd, a.k_raw);
  heads_scatter(x, qo.as<const float>(), N, rs, 0, s.NH, s.HS);
  heads_scatter(x, ko.as<const float>(), N, rs, kcol, s.KVH, s.HS);
}

void Block::qk_norm_backward(TensorView dqkv, const BlockActs& a, const BlockScratch& sc) const {
  ZT_PROFILE("qk_norm");
  const BlockShape& s = shape;
  const int64_t N = rows(dqkv), rs = s.qkv_dim(), kcol = int64_t(s.NH) * s.HS;
  float* d = dqkv.as<float>();
  const int64_t qn = N * s.NH * s.HS, kn = N * s.KVH * s.HS;
  const TensorView gq = sc.qk_a.sub(0, {N * s.NH, s.HS}), gk = sc.qk_a.sub(qn, {N * s.KVH, s.HS});
  const TensorView dq = sc.qk_b.sub(0, {N * s.NH, s.HS}), dk = sc.qk_b.sub(qn, {N * s.KVH, s.HS});
  heads_gather(gq.as<float>(), d, N, rs, 0, s.NH, s.HS);
  heads_gather(gk.as<float>(), d, N, rs, kcol, s.KVH, s.HS);
  std::fill_n(dq.as<float>(), qn + kn, 0.f);  // the norm's backward adds into its input gradient
  q_norm.backward(dq, gq, a.q_raw, {}, a.q_rstd);
  k_norm.backward(dk, gk, a.k_raw, {}, a.k_rstd);
  heads_scatter(d, dq.as<const float>(), N, rs, 0, s.NH, s.HS);
  heads_scatter(d, dk.as<const float>(), N, rs, kcol, s.KVH, s.HS);
}

void Block::residual_add(TensorView out, TensorView x) const {
  ZT_PROFILE("residual");
  ZT_ASSERT(out.numel() == x.numel());
  kernels::add(out.as<float>(), out.as<const float>(), x.as<const float>(), out.numel());
}

void Block::activation_forward(TensorView act, TensorView fc) const {
  ZT_PROFILE("act_fwd");
  const int64_t N = rows(fc);
  if (shape.mlp == MlpKind::gelu)
    kernels::gelu_forward(act.as<float>(), fc.as<const float>(), N * shape.F);
  else
    kernels::swiglu_forward(act.as<float>(), fc.as<const float>(), N, shape.F);
}

void Block::backward(TensorView dres, TensorView x, const BlockActs& a, const BlockScratch& sc, int B, int T,
                     const RopeTable& rope, const Packing& pack) const {
  const int64_t N = int64_t(B) * T;
  const BlockShape& s = shape;
  kernels::AttnDims ad{B, T, s.NH, s.KVH, s.HS, pack.doc_start};
  // MLP: recompute the activation for fc_out's weight gradient, then reuse its buffer
  // for the activation's gradient.
  activation_forward(sc.act, a.fc);
  fc_out.backward({}, dres, sc.act);
  fc_out.backward_input(sc.act, dres);
  TensorView dfc = sc.act;
  {
    ZT_PROFILE("act_bwd");
    if (s.mlp == MlpKind::gelu) {
      kernels::gelu_backward(dfc.as<float>(), sc.act.as<const float>(), a.fc.as<const float>(), N * s.F);
    } else {
      kernels::swiglu_backward(sc.dfc.as<float>(), sc.act.as<const float>(), a.fc.as<const float>(), N, s.F);
      dfc = sc.dfc;
    }
  }
  fc_in.backward(sc.dln, dfc, a.ln2);
  if (tp) tp->column_parallel_input_grad(sc.dln);
  ln2.backward(dres, sc.dln, a.mid, a.ln2_mean, a.ln2_rstd);  // dres is now dL/dmid
  // Attention.
  proj.backward(sc.datt, dres, a.att);
  {
    ZT_PROFILE("attention_bwd");
    kernels::attention_backward(sc.dqkv.as<float>(), sc.datt.as<const float>(), a.qkv.as<const float>(),
                                a.att.as<const float>(), a.lse.as<const float>(), ad);
  }
  if (s.rope)
    kernels::rope_backward(sc.dqkv.as<float>(), rope.cos, rope.sin, B, T, s.NH, s.KVH, s.HS, s.qkv_dim(),
                           pack.positions);
  if (s.qk_norm) qk_norm_backward(sc.dqkv, a, sc);
  qkv.backward(sc.dln, sc.dqkv, a.ln1);
  if (tp) tp->column_parallel_input_grad(sc.dln);
  ln1.backward(dres, sc.dln, x, a.ln1_mean, a.ln1_rstd);  // dres is now dL/dx
}

}  // namespace zt::nn
