// block.cpp: see block.h.
#include "nn/block.h"

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
  return r;
}

void Block::forward(TensorView y, TensorView x, const BlockActs& a, const BlockScratch& sc, int B, int T,
                    const RopeTable& rope, const Packing& pack) const {
  const BlockShape& s = shape;
  kernels::AttnDims ad{B, T, s.NH, s.KVH, s.HS, pack.doc_start};
  ln1.forward(a.ln1, a.ln1_mean, a.ln1_rstd, x);
  qkv.forward(a.qkv, a.ln1);
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
  qkv.backward(sc.dln, sc.dqkv, a.ln1);
  if (tp) tp->column_parallel_input_grad(sc.dln);
  ln1.backward(dres, sc.dln, x, a.ln1_mean, a.ln1_rstd);  // dres is now dL/dx
}

}  // namespace zt::nn
