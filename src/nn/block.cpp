// block.cpp: see block.h.
#include "nn/block.h"

#include <cstring>

#include "core/profile.h"
#include "kernels/ops.h"

namespace zt::nn {

BlockActs Block::carve_acts(Carver& c, const BlockShape& s, int B, int T) {
  int64_t N = int64_t(B) * T;
  BlockActs a{};
  a.ln1 = c.take(N * s.C);
  a.ln1_mean = c.take(s.norm == NormKind::layernorm ? N : 0);
  a.ln1_rstd = c.take(N);
  a.qkv = c.take(N * s.qkv_dim());
  a.att = c.take(N * s.NH * s.HS);
  a.lse = c.take(N * s.NH);
  a.mid = c.take(N * s.C);
  a.ln2 = c.take(N * s.C);
  a.ln2_mean = c.take(s.norm == NormKind::layernorm ? N : 0);
  a.ln2_rstd = c.take(N);
  a.fc = c.take(N * s.fc_dim());
  return a;
}

BlockScratch Block::carve_scratch(Carver& c, const BlockShape& s, int B, int T) {
  int64_t N = int64_t(B) * T;
  BlockScratch r{};
  r.act = c.take(N * s.F);  // recomputed activation, then reused for its gradient
  r.dfc = c.take(s.mlp == MlpKind::swiglu ? N * s.fc_dim() : 0);
  r.dln = c.take(N * s.C);
  r.datt = c.take(N * s.NH * s.HS);
  r.dqkv = c.take(N * s.qkv_dim());
  return r;
}

void Block::forward(float* y, const float* x, const BlockActs& a, const BlockScratch& sc, int B, int T,
                    const RopeTable& rope, const Packing& pack) const {
  const int64_t N = int64_t(B) * T;
  const BlockShape& s = shape;
  kernels::AttnDims ad{B, T, s.NH, s.KVH, s.HS, pack.doc_start};
  ln1.forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, N);
  qkv.forward(a.qkv, a.ln1, N);
  if (s.rope) kernels::rope_forward(a.qkv, rope.cos, rope.sin, B, T, s.NH, s.KVH, s.HS, s.qkv_dim(), pack.positions);
  {
    ZT_PROFILE("attention_fwd");
    kernels::attention_forward(a.att, a.lse, a.qkv, ad);
  }
  {
    ZT_PROFILE("copy");
    std::memcpy(a.mid, x, sizeof(float) * N * s.C);
  }
  proj.forward(a.mid, a.att, N, /*accumulate=*/true);
  ln2.forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.mid, N);
  fc_in.forward(a.fc, a.ln2, N);
  activation_forward(sc.act, a.fc, N);
  {
    ZT_PROFILE("copy");
    std::memcpy(y, a.mid, sizeof(float) * N * s.C);
  }
  fc_out.forward(y, sc.act, N, /*accumulate=*/true);
}

void Block::activation_forward(float* act, const float* fc, int64_t N) const {
  ZT_PROFILE("act_fwd");
  if (shape.mlp == MlpKind::gelu)
    kernels::gelu_forward(act, fc, N * shape.F);
  else
    kernels::swiglu_forward(act, fc, N, shape.F);
}

void Block::backward(float* dres, const float* x, const BlockActs& a, const BlockScratch& sc, int B, int T,
                     const RopeTable& rope, const Packing& pack) const {
  const int64_t N = int64_t(B) * T;
  const BlockShape& s = shape;
  kernels::AttnDims ad{B, T, s.NH, s.KVH, s.HS, pack.doc_start};
  // MLP: recompute the activation for fc_out's weight gradient, then reuse its buffer
  // for the activation's gradient.
  activation_forward(sc.act, a.fc, N);
  fc_out.backward(nullptr, dres, sc.act, N);
  fc_out.backward_input(sc.act, dres, N);
  float* dfc = sc.act;
  {
    ZT_PROFILE("act_bwd");
    if (s.mlp == MlpKind::gelu) {
      kernels::gelu_backward(dfc, sc.act, a.fc, N * s.F);
    } else {
      kernels::swiglu_backward(sc.dfc, sc.act, a.fc, N, s.F);
      dfc = sc.dfc;
    }
  }
  fc_in.backward(sc.dln, dfc, a.ln2, N);
  ln2.backward(dres, sc.dln, a.mid, a.ln2_mean, a.ln2_rstd, N);  // dres is now dL/dmid
  // Attention.
  proj.backward(sc.datt, dres, a.att, N);
  {
    ZT_PROFILE("attention_bwd");
    kernels::attention_backward(sc.dqkv, sc.datt, a.qkv, a.att, a.lse, ad);
  }
  if (s.rope) kernels::rope_backward(sc.dqkv, rope.cos, rope.sin, B, T, s.NH, s.KVH, s.HS, s.qkv_dim(), pack.positions);
  qkv.backward(sc.dln, sc.dqkv, a.ln1, N);
  ln1.backward(dres, sc.dln, x, a.ln1_mean, a.ln1_rstd, N);  // dres is now dL/dx
}

}  // namespace zt::nn
