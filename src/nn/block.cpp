// block.cpp: see block.h.
#include "nn/block.h"

#include <algorithm>
#include <cstring>

#include "core/profile.h"
#include "kernels/dispatch.h"

namespace zt::nn {

// Which tensors selective recomputation refills in backward (the rest are kept): the
// norms' outputs, attention's output and log-sum-exp, the residual stream after attention
// (its projection is rerun, one C x C GEMM) and the activation function's output.
BlockActs Block::carve_acts(Carver& c, const BlockShape& s, int B, int T, Precision p, Recompute r,
                            const BlockActs* shared) {
  if (r == Recompute::full) {
    ZT_ASSERT(shared, "full recomputation needs the shared activations");
    BlockActs a = *shared;
    a.moe.summary = Moe::carve_summary(c, s.moe);  // the auxiliary losses read every layer's after the forward
    return a;
  }
  const int64_t N = int64_t(B) * T, n = s.rows_local(N);  // all rows; the residual stream's
  const bool ln = s.norm == NormKind::layernorm;
  const DType ct = compute_dtype(p);
  const bool sel = r == Recompute::selective;
  ZT_ASSERT(!sel || shared, "selective recomputation needs the shared activations");
  const BlockActs none{};
  const BlockActs& sh = sel ? *shared : none;
  auto own_or = [&](const TensorView& from_shared, DType t, Shape shape) {
    return sel ? from_shared : c.take(t, shape);
  };
  BlockActs a{};
  a.ln1 = own_or(sh.ln1, ct, {N, s.C});
  a.ln1_mean = c.take(DType::f32, {ln ? n : 0});
  a.ln1_rstd = c.take(DType::f32, {n});
  a.qkv = c.take(ct, {N, s.qkv_dim()});
  a.att = own_or(sh.att, ct, {N, int64_t(s.NH) * s.HS});
  a.lse = own_or(sh.lse, DType::f32, {N, s.NH});
  a.mid = own_or(sh.mid, DType::f32, {n, s.C});
  a.ln2 = own_or(sh.ln2, s.moe.on() ? DType::f32 : ct, {N, s.C});  // the MoE layer computes in fp32
  a.ln2_mean = c.take(DType::f32, {ln ? n : 0});
  a.ln2_rstd = c.take(DType::f32, {n});
  a.fc = c.take(ct, {N, s.fc_dim()});
  a.act = own_or(sh.act, ct, {N, s.F});
  const int64_t qh = s.qk_norm ? N * s.NH : 0, kh = s.qk_norm ? N * s.KVH : 0;
  a.q_raw = c.take(DType::f32, {qh, s.HS});
  a.k_raw = c.take(DType::f32, {kh, s.HS});
  a.q_rstd = c.take(DType::f32, {s.qk_norm_full ? N : qh});
  a.k_rstd = c.take(DType::f32, {s.qk_norm_full ? N : kh});
  const int64_t np = s.post_norm ? n : 0;
  a.attn_out = c.take(DType::f32, {np, s.C});
  a.mlp_out = c.take(DType::f32, {np, s.C});
  a.post1_rstd = c.take(DType::f32, {np});
  a.post2_rstd = c.take(DType::f32, {np});
  a.moe = Moe::carve_acts(c, s.moe, N);
  return a;
}

BlockActs Block::carve_shared(Carver& c, const BlockShape& s, int B, int T, Precision p, Recompute r) {
  if (r == Recompute::full) return carve_acts(c, s, B, T, p, Recompute::none);
  const int64_t N = int64_t(B) * T;
  const DType ct = compute_dtype(p);
  BlockActs a{};
  a.ln1 = c.take(ct, {N, s.C});
  a.att = c.take(ct, {N, int64_t(s.NH) * s.HS});
  a.lse = c.take(DType::f32, {N, s.NH});
  a.mid = c.take(DType::f32, {s.rows_local(N), s.C});
  a.ln2 = c.take(s.moe.on() ? DType::f32 : ct, {N, s.C});
  a.act = c.take(ct, {N, s.F});
  return a;
}

BlockScratch Block::carve_scratch(Carver& c, const BlockShape& s, int B, int T, Precision p, bool full_recompute) {
  const int64_t N = int64_t(B) * T;
  BlockScratch r{};
  r.act = c.take(DType::f32, {N, s.F});  // the activation's fp32 landing, then its gradient
  r.dfc = c.take(DType::f32, {s.gated() ? N : 0, s.fc_dim()});
  r.dln = c.take(DType::f32, {N, s.C});
  r.datt = c.take(DType::f32, {N, int64_t(s.NH) * s.HS});
  r.dqkv = c.take(DType::f32, {N, s.qkv_dim()});
  const int64_t widest = std::max<int64_t>({s.C, s.fc_dim(), s.qkv_dim(), int64_t(s.NH) * s.HS});
  r.dy_c = c.take(compute_dtype(p), {p == Precision::fp32 ? 0 : N, widest});
  // bf16 keeps qkv, att and fc in bf16; attention and the activation function read fp32.
  const int64_t n16 = p == Precision::bf16 ? N : 0;
  r.att32 = c.take(DType::f32, {n16, int64_t(s.NH) * s.HS});
  r.qkv32 = c.take(DType::f32, {n16, s.qkv_dim()});
  r.fc32 = c.take(DType::f32, {n16, s.fc_dim()});
  // The rerun forward's output is thrown away; dqkv is free until attention's backward.
  const int64_t n = s.rows_local(N);
  if (full_recompute) r.y = s.qkv_dim() >= s.C ? r.dqkv.sub(0, {n, s.C}) : c.take(DType::f32, {n, s.C});
  const int64_t heads = s.qk_norm ? N * (s.NH + s.KVH) : 0;
  r.qk_a = c.take(DType::f32, {heads, s.HS});
  r.qk_b = c.take(DType::f32, {heads, s.HS});
  r.dpost = c.take(DType::f32, {s.post_norm ? n : 0, s.C});
  r.qk_sums = c.take(DType::f32, {s.qk_norm_full ? N : 0});
  r.full = c.take(DType::f32, {s.sp > 1 ? N : 0, s.C});
  r.moe = Moe::carve_scratch(c, s.moe, N, p == Precision::bf16);
  return r;
}

namespace {
// The fp32 buffer a kernel writes a GEMM input into: dst itself when it is fp32, else the
// front of `land` (a scratch buffer free at that point).
TensorView landing(TensorView dst, TensorView land) { return dst.dtype == DType::f32 ? dst : land.sub(0, dst.shape); }
}  // namespace

void Block::lower(TensorView dst, TensorView land) const { nn::lower(precision, dst, land, dev); }

TensorView Block::compute_copy(TensorView dy, const BlockScratch& s) const {
  if (precision == Precision::fp32) return dy;
  const TensorView c = s.dy_c.sub(0, dy.shape);
  lower(c, dy);
  return c;
}

void Block::norm_forward(const Norm& n, TensorView out, TensorView mean, TensorView rstd, TensorView x,
                         TensorView land) const {
  const TensorView l = landing(out, land);
  n.forward(l, mean, rstd, x);
  // An fp32 output under bf16 (a mixture-of-experts layer's input) stays fp32.
  if (precision != Precision::bf16 || out.dtype != DType::f32) lower(out, l);
}

void Block::attention_forward(const BlockActs& a, TensorView qkv32, const BlockScratch& s,
                              const kernels::AttnDims& ad) const {
  const TensorView l = landing(a.att, s.datt);
  {
    ZT_PROFILE("attention_fwd");
    // Under bf16 the tile products run in bf16 too (q, k, v are bf16 values already).
    if (cp)
      cp->attention_forward(l.as<float>(), a.lse.as<float>(), qkv32.as<const float>(), ad);
    else
      kernels::attention_forward(dev, precision == Precision::bf16, l.as<float>(), a.lse.as<float>(),
                                 qkv32.as<const float>(), ad);
  }
  lower(a.att, l);
}

void Block::activation_forward(const BlockActs& a, TensorView fc32, const BlockScratch& s) const {
  const TensorView l = landing(a.act, s.act);
  {
    ZT_PROFILE("act_fwd");
    const int64_t N = rows(fc32);
    if (shape.mlp == MlpKind::gelu)
      kernels::gelu_forward(dev, l.as<float>(), fc32.as<const float>(), N * shape.F);
    else if (shape.mlp == MlpKind::swiglu)
      kernels::swiglu_forward(dev, l.as<float>(), fc32.as<const float>(), N, shape.F);
    else
      kernels::geglu_forward(dev, l.as<float>(), fc32.as<const float>(), N, shape.F);
  }
  lower(a.act, l);
}

void Block::forward(TensorView y, TensorView x, const BlockActs& a, const BlockScratch& sc, int B, int T,
                    const RopeTable& rope, const Packing& pack) const {
  const BlockShape& s = shape;
  kernels::AttnDims ad{B, T, s.NH, s.KVH, s.HS, pack.doc_start, s.attn_scale, s.attn_softcap, s.window};
  norm_forward(ln1, mine(a.ln1), a.ln1_mean, a.ln1_rstd, x, mine(sc.dln));
  if (tp) tp->column_parallel_input(a.ln1);
  // q, k, v: computed in fp32; under bf16 kept in bf16, and attention reads the kept values.
  const TensorView qkv32 = landing(a.qkv, sc.qkv32);
  qkv.forward(qkv32, a.ln1);
  if (s.qk_norm) qk_norm_forward(qkv32, a, sc);
  if (s.rope)
    kernels::rope_forward(dev, qkv32.as<float>(), rope.cos, rope.sin, B, T, s.NH, s.KVH, s.HS, s.qkv_dim(),
                          pack.positions);
  keep(a.qkv, qkv32);
  attention_forward(a, qkv32, sc, ad);
  attention_output(a, x, sc);
  norm_forward(ln2, mine(a.ln2), a.ln2_mean, a.ln2_rstd, a.mid, mine(sc.dln));
  if (tp) tp->column_parallel_input(a.ln2);
  const TensorView out = s.post_norm ? a.mlp_out : y;
  if (s.moe.on()) {
    // Tensor parallelism: each rank computes its experts' share of every token (a partial sum,
    // reduced like a row-parallel layer's output).
    const TensorView ym = tp ? row_out(out, sc) : out;
    moe.forward(ym, a.ln2, a.moe, ep, a.ep_side ? a.ep_side : &ep_side, sc.moe.lo1.as<uint16_t>());
    if (tp) tp->row_parallel_output(out, ym);
  } else {
    const TensorView fc32 = landing(a.fc, sc.fc32);
    fc_in.forward(fc32, a.ln2);
    keep(a.fc, fc32);
    activation_forward(a, fc32, sc);
    const TensorView yp = row_out(out, sc);
    fc_out.forward(yp, a.act);
    if (tp) tp->row_parallel_output(out, yp);
  }
  if (s.post_norm) post2.forward(y, {}, a.post2_rstd, a.mlp_out);
  residual_add(y, a.mid);
}

TensorView TpRegion::local_rows(TensorView full) const {
  if (!sequence_parallel() || !full) return full;
  const int64_t N = full.shape[0], w = full.numel() / N, n = N / size();
  return full.sub(rank() * n * w, {n, w});
}

TensorView Block::row_out(TensorView out, const BlockScratch& s) const {
  return tp && tp->sequence_parallel() ? s.full : out;
}

TensorView Block::full_grad(TensorView dres, const BlockScratch& s) const {
  if (!tp || !tp->sequence_parallel()) return dres;
  tp->row_parallel_output_grad(s.full, dres);
  return s.full;
}

TensorView Block::reduce_input_grad(TensorView grad) const {
  if (!tp) return grad;
  const TensorView out = tp->local_rows(grad);
  tp->column_parallel_input_grad(out, grad);
  return out;
}

// mid = x + proj(att) (post_norm: x + post1(proj(att))). The residual add is its own step after
// the projection (not folded into the GEMM as C += A B): a row-parallel projection's partial
// sums are reduced first (the TP region), and x is added once, not on every tensor-parallel rank.
void Block::attention_output(const BlockActs& a, TensorView x, const BlockScratch& s) const {
  const TensorView out = shape.post_norm ? a.attn_out : a.mid;
  const TensorView partial = row_out(out, s);
  proj.forward(partial, a.att);
  if (tp) tp->row_parallel_output(out, partial);
  if (shape.post_norm) post1.forward(a.mid, {}, a.post1_rstd, a.attn_out);
  residual_add(a.mid, x);
}

TensorView Block::post_norm_backward(const Norm& n, TensorView dres, TensorView out, TensorView rstd,
                                     const BlockScratch& s) const {
  if (!shape.post_norm) return dres;
  kernels::fill_zero(dev, s.dpost.data, size_t(s.dpost.numel()) * sizeof(float));  // the norm adds into it
  n.backward(s.dpost, dres, out, {}, rstd);
  return s.dpost;
}

// A GEMM output kept in bf16: stored, and its fp32 copy rounded to the stored values so
// that what reads it now reads what a recomputation (or backward) will read later.
void Block::keep(TensorView kept, TensorView f32) const {
  if (kept.data == f32.data) return;
  ZT_PROFILE("convert");
  kernels::to_bf16_keep(dev, kept.as<uint16_t>(), f32.as<float>(), kept.numel());
}

// The fp32 form of a kept tensor: itself, or (bf16) its values widened into `scratch`.
TensorView Block::unkeep(TensorView kept, TensorView scratch) const {
  if (kept.dtype == DType::f32) return kept;
  ZT_PROFILE("convert");
  const TensorView f = scratch.sub(0, kept.shape);
  kernels::from_lowp(dev, kept.dtype, f.as<float>(), kept.as<const uint16_t>(), kept.numel());
  return f;
}

namespace {
// Copies `heads` head vectors (HS floats each) per row between qkv rows (stride rs, starting
// at column col) and a packed (N heads, HS) buffer.
void heads_gather(DeviceKind dev, float* dst, const float* qkv, int64_t N, int64_t rs, int64_t col, int heads, int HS) {
  const size_t row = size_t(heads) * HS * sizeof(float);
  kernels::copy_rows(dev, dst, row, qkv + col, size_t(rs) * sizeof(float), row, N);
}
void heads_scatter(DeviceKind dev, float* qkv, const float* src, int64_t N, int64_t rs, int64_t col, int heads,
                   int HS) {
  const size_t row = size_t(heads) * HS * sizeof(float);
  kernels::copy_rows(dev, qkv + col, size_t(rs) * sizeof(float), src, row, row, N);
}
}  // namespace

void Block::qk_norm_forward(TensorView qkv_out, const BlockActs& a, const BlockScratch& sc) const {
  ZT_PROFILE("qk_norm");
  const BlockShape& s = shape;
  const int64_t N = rows(qkv_out), rs = s.qkv_dim(), kcol = int64_t(s.NH) * s.HS;
  float* x = qkv_out.as<float>();
  // Per head: (N heads, HS) rows; qk_norm_full: the same memory as (N, heads HS) rows.
  const int64_t qr = s.qk_norm_full ? N : N * s.NH, kr = s.qk_norm_full ? N : N * s.KVH;
  const TensorView qo = sc.qk_a.sub(0, {qr, q_norm.C}), ko = sc.qk_a.sub(N * s.NH * s.HS, {kr, k_norm.C});
  const TensorView qi = a.q_raw.sub(0, {qr, q_norm.C}), ki = a.k_raw.sub(0, {kr, k_norm.C});
  heads_gather(dev, a.q_raw.as<float>(), x, N, rs, 0, s.NH, s.HS);
  heads_gather(dev, a.k_raw.as<float>(), x, N, rs, kcol, s.KVH, s.HS);
  if (s.qk_norm_full && tp && tp->size() > 1) {
    sharded_norm_forward(q_norm, qo, a.q_rstd, qi, 1, sc);
    sharded_norm_forward(k_norm, ko, a.k_rstd, ki, s.kv_replicas, sc);
  } else {
    q_norm.forward(qo, {}, a.q_rstd, qi);
    k_norm.forward(ko, {}, a.k_rstd, ki);
  }
  heads_scatter(dev, x, qo.as<const float>(), N, rs, 0, s.NH, s.HS);
  heads_scatter(dev, x, ko.as<const float>(), N, rs, kcol, s.KVH, s.HS);
}

void Block::qk_norm_backward(TensorView dqkv, const BlockActs& a, const BlockScratch& sc) const {
  ZT_PROFILE("qk_norm");
  const BlockShape& s = shape;
  const int64_t N = rows(dqkv), rs = s.qkv_dim(), kcol = int64_t(s.NH) * s.HS;
  float* d = dqkv.as<float>();
  const int64_t qn = N * s.NH * s.HS, kn = N * s.KVH * s.HS;
  const int64_t qr = s.qk_norm_full ? N : N * s.NH, kr = s.qk_norm_full ? N : N * s.KVH;
  const TensorView gq = sc.qk_a.sub(0, {qr, q_norm.C}), gk = sc.qk_a.sub(qn, {kr, k_norm.C});
  const TensorView dq = sc.qk_b.sub(0, {qr, q_norm.C}), dk = sc.qk_b.sub(qn, {kr, k_norm.C});
  const TensorView qi = a.q_raw.sub(0, {qr, q_norm.C}), ki = a.k_raw.sub(0, {kr, k_norm.C});
  heads_gather(dev, gq.as<float>(), d, N, rs, 0, s.NH, s.HS);
  heads_gather(dev, gk.as<float>(), d, N, rs, kcol, s.KVH, s.HS);
  kernels::fill_zero(dev, dq.data, size_t(qn + kn) * sizeof(float));  // the norm's backward adds into it
  if (s.qk_norm_full && tp && tp->size() > 1) {
    sharded_norm_backward(q_norm, dq, gq, qi, a.q_rstd, 1, sc);
    sharded_norm_backward(k_norm, dk, gk, ki, a.k_rstd, s.kv_replicas, sc);
  } else {
    q_norm.backward(dq, gq, qi, {}, a.q_rstd);
    k_norm.backward(dk, gk, ki, {}, a.k_rstd);
  }
  heads_scatter(dev, d, dq.as<const float>(), N, rs, 0, s.NH, s.HS);
  heads_scatter(dev, d, dk.as<const float>(), N, rs, kcol, s.KVH, s.HS);
}

void Block::residual_add(TensorView out, TensorView x) const {
  ZT_PROFILE("residual");
  ZT_ASSERT(out.numel() == x.numel());
  kernels::add(dev, out.as<float>(), out.as<const float>(), x.as<const float>(), out.numel());
}

void Block::backward(TensorView dres, TensorView x, const BlockActs& a, const BlockScratch& sc, int B, int T,
                     const RopeTable& rope, const Packing& pack, Recompute r) const {
  const BlockShape& s = shape;
  kernels::AttnDims ad{B, T, s.NH, s.KVH, s.HS, pack.doc_start, s.attn_scale, s.attn_softcap, s.window};
  // Refill what the forward did not keep. Every kernel is deterministic at a given thread
  // count, so the refilled tensors equal the ones a forward without recomputation kept
  // (bit for bit; the tests check the gradients).
  if (r == Recompute::full) {
    ZT_PROFILE("recompute");
    forward(sc.y, x, a, sc, B, T, rope, pack);
  }
  // The kept q, k, v and fc in fp32 (themselves, or bf16's kept values widened).
  const TensorView qkv32 = unkeep(a.qkv, sc.qkv32);
  const TensorView fc32 = unkeep(a.fc, sc.fc32);
  if (r == Recompute::selective) {
    ZT_PROFILE("recompute");
    norm_forward(ln1, mine(a.ln1), a.ln1_mean, a.ln1_rstd, x, mine(sc.dln));
    if (tp) tp->column_parallel_input(a.ln1);
    attention_forward(a, qkv32, sc, ad);
    attention_output(a, x, sc);
    norm_forward(ln2, mine(a.ln2), a.ln2_mean, a.ln2_rstd, a.mid, mine(sc.dln));
    if (tp) tp->column_parallel_input(a.ln2);
    if (!s.moe.on()) activation_forward(a, fc32, sc);
  }
  // MLP: the dense one, or the mixture of experts (fp32; under TP its input gradient is partial too).
  TensorView dy = full_grad(post_norm_backward(post2, dres, a.mlp_out, a.post2_rstd, sc), sc);
  if (s.moe.on())
    moe.backward(sc.dln, dy, a.ln2, a.moe, sc.moe, ep, a.ep_side ? a.ep_side : &ep_side);
  else
    dense_mlp_backward(dy, a, fc32, sc);
  ln2.backward(dres, reduce_input_grad(sc.dln), a.mid, a.ln2_mean, a.ln2_rstd);  // dres is now dL/dmid
  // Attention.
  dy = full_grad(post_norm_backward(post1, dres, a.attn_out, a.post1_rstd, sc), sc);
  TensorView dy_c = compute_copy(dy, sc);
  proj.backward_input(sc.datt, dy_c);
  proj.backward_weight(dy, dy_c, a.att);
  const TensorView att32 = unkeep(a.att, sc.att32);
  {
    ZT_PROFILE("attention_bwd");
    if (cp)
      cp->attention_backward(sc.dqkv.as<float>(), sc.datt.as<const float>(), qkv32.as<const float>(),
                             att32.as<const float>(), a.lse.as<const float>(), ad);
    else
      kernels::attention_backward(dev, precision == Precision::bf16, sc.dqkv.as<float>(), sc.datt.as<const float>(),
                                  qkv32.as<const float>(), att32.as<const float>(), a.lse.as<const float>(), ad);
  }
  if (s.rope)
    kernels::rope_backward(dev, sc.dqkv.as<float>(), rope.cos, rope.sin, B, T, s.NH, s.KVH, s.HS, s.qkv_dim(),
                           pack.positions);
  if (s.qk_norm) qk_norm_backward(sc.dqkv, a, sc);
  dy_c = compute_copy(sc.dqkv, sc);
  qkv.backward_input(sc.dln, dy_c);
  qkv.backward_weight(sc.dqkv, dy_c, a.ln1);
  ln1.backward(dres, reduce_input_grad(sc.dln), x, a.ln1_mean, a.ln1_rstd);  // dres is now dL/dx
}

// fc_out's weight gradient reads the activation before its gradient lands in sc.act (which is the
// activation itself under fp32 selective recomputation).
void Block::dense_mlp_backward(TensorView dy, const BlockActs& a, TensorView fc32, const BlockScratch& sc) const {
  const BlockShape& s = shape;
  const int64_t N = rows(a.ln2);
  TensorView dy_c = compute_copy(dy, sc);
  fc_out.backward_weight(dy, dy_c, a.act);
  fc_out.backward_input(sc.act, dy_c);
  TensorView dfc = sc.act;
  {
    ZT_PROFILE("act_bwd");
    if (s.mlp == MlpKind::gelu) {
      kernels::gelu_backward(dev, dfc.as<float>(), sc.act.as<const float>(), fc32.as<const float>(), N * s.F);
    } else if (s.mlp == MlpKind::swiglu) {
      kernels::swiglu_backward(dev, sc.dfc.as<float>(), sc.act.as<const float>(), fc32.as<const float>(), N, s.F);
      dfc = sc.dfc;
    } else {
      kernels::geglu_backward(dev, sc.dfc.as<float>(), sc.act.as<const float>(), fc32.as<const float>(), N, s.F);
      dfc = sc.dfc;
    }
  }
  dy_c = compute_copy(dfc, sc);
  fc_in.backward_input(sc.dln, dy_c);
  fc_in.backward_weight(dfc, dy_c, a.ln2);
}

}  // namespace zt::nn
