// moe.cpp: see moe.h.
#include "nn/moe.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/dispatch.h"

namespace zt::nn {

int64_t MoeShape::capacity(int64_t N) const {
  if (capacity_factor <= 0.0) return 0;
  return std::max<int64_t>(1, int64_t(std::ceil(capacity_factor * double(N) * K / E)));
}

MoeActs Moe::carve_acts(Carver& c, const MoeShape& s, int64_t N) {
  MoeActs a{};
  if (!s.on()) return a;
  const int64_t R = N * s.K;
  a.logits = c.take(DType::f32, {N, s.E});
  a.probs = c.take(DType::f32, {N, s.E});
  a.lse = c.take(DType::f32, {N});
  a.idx = c.take(DType::i32, {N, s.K});
  a.w = c.take(DType::f32, {N, s.K});
  a.token_of = c.take(DType::i32, {R});
  a.slot_of = c.take(DType::i32, {R});
  a.offsets = c.take(DType::i32, {int64_t(s.E) + 1});
  a.counts = c.take(DType::i32, {s.E});
  a.dropped = c.take(DType::i64, {1});
  a.xp = c.take(DType::f32, {R, s.C});
  a.h = c.take(DType::f32, {R, 2 * int64_t(s.F)});
  a.act = c.take(DType::f32, {R, s.F});
  a.yp = c.take(DType::f32, {R, s.C});
  const int64_t ns = s.Fs > 0 ? N : 0;
  a.sh_h = c.take(DType::f32, {ns, 2 * int64_t(s.Fs)});
  a.sh_act = c.take(DType::f32, {ns, s.Fs});
  a.sh_out = c.take(DType::f32, {ns, s.C});
  a.sh_gate = c.take(DType::f32, {s.shared_gate ? N : 0});
  a.summary = carve_summary(c, s);
  return a;
}

TensorView Moe::carve_summary(Carver& c, const MoeShape& s) {
  return c.take(DType::f64, {s.on() ? 2 * int64_t(s.E) + 2 : 0});
}

void Moe::summarize(const MoeActs& a, int64_t N) const {
  if (!a.summary) return;
  const int E = shape.E;
  double* sum = a.summary.as<double>();
  std::fill_n(sum, 2 * E + 2, 0.0);
  const int32_t* idx = a.idx.as<const int32_t>();
  const float* p = a.probs.as<const float>();
  const float* lse = a.lse.as<const float>();
  for (int64_t r = 0; r < N * shape.K; ++r) sum[idx[r]] += 1.0;
  for (int64_t t = 0; t < N; ++t) {
    for (int e = 0; e < E; ++e) sum[E + e] += p[t * E + e];
    sum[2 * E] += double(lse[t]) * lse[t];
  }
  sum[2 * E + 1] = double(*a.dropped.as<const int64_t>());
}

MoeScratch Moe::carve_scratch(Carver& c, const MoeShape& s, int64_t N, bool lowp) {
  MoeScratch r{};
  if (!s.on()) return r;
  const int64_t lo_rows = lowp ? N * s.K : 0, lo_width = std::max<int64_t>(s.C, 2 * int64_t(s.F));
  r.lo1 = c.take(DType::bf16, {lo_rows, lo_width});
  r.lo2 = c.take(DType::bf16, {lo_rows, lo_width});
  const int64_t R = N * s.K, ns = s.Fs > 0 ? N : 0;
  r.dyp = c.take(DType::f32, {R, s.C});
  r.dact = c.take(DType::f32, {R, s.F});
  r.dh = c.take(DType::f32, {R, 2 * int64_t(s.F)});
  r.dlogits = c.take(DType::f32, {N, s.E});
  r.dw = c.take(DType::f32, {N, s.K});
  r.sh_do = c.take(DType::f32, {ns, s.C});
  r.sh_dact = c.take(DType::f32, {ns, s.Fs});
  r.sh_dh = c.take(DType::f32, {ns, 2 * int64_t(s.Fs)});
  r.sh_dg = c.take(DType::f32, {s.shared_gate ? N : 0});
  return r;
}

namespace {
// dx (N, in) += dy (N, out) W (nn.Linear's [out, in] weight, fp32), and its LoRA adapter's share:
// the input gradient of a layer whose input also feeds others (the router, the shared expert and its
// gate read x too).
void add_input_grad(const Linear& l, TensorView dx, TensorView dy) {
  const int64_t N = rows(dy);
  kernels::gemm_typed(l.dev, DType::f32, false, false, N, l.in, l.out, 1.f, dy.data, l.out, l.w.data, l.in, 1.f,
                      dx.as<float>(), l.in);
  if (l.lora.on()) lora_backward_input(l, dx, dy, dy);
}

// Rows [0, r0) and [r1, R) of t (R rows) set to zero: the rows of experts another rank computes.
void zero_rows_outside(TensorView t, int64_t r0, int64_t r1, int64_t R) {
  const int64_t w = t.numel() / std::max<int64_t>(1, t.shape[0]);
  float* p = t.as<float>();
  if (r0 > 0) std::fill_n(p, r0 * w, 0.f);
  if (r1 < R) std::fill_n(p + r1 * w, (R - r1) * w, 0.f);
}
}  // namespace

void Moe::forward(TensorView y, TensorView x, const MoeActs& a, EpRegion* ep, MoeExpertSide* side, uint16_t* lo) const {
  const MoeShape& s = shape;
  const int64_t N = rows(x);
  const kernels::MoeDims d = s.dims(N);
  ZT_ASSERT(x.dtype == DType::f32 && y.dtype == DType::f32, "the MoE layer computes in fp32");
  {
    ZT_PROFILE("moe_router");
    router.forward(a.logits, x);
    kernels::moe_router_forward(dev, a.probs.as<float>(), a.idx.as<int32_t>(), a.w.as<float>(), a.lse.as<float>(),
                                a.logits.as<const float>(), d, s.renorm);
    *a.dropped.as<int64_t>() =
        kernels::moe_group_by_expert(a.counts.as<int32_t>(), a.offsets.as<int32_t>(), a.token_of.as<int32_t>(),
                                     a.slot_of.as<int32_t>(), a.idx.as<const int32_t>(), d, s.capacity(N));
    summarize(a, N);
  }
  const int32_t* off = a.offsets.as<const int32_t>();
  const int64_t R = off[s.E];
  {
    ZT_PROFILE("moe_experts");
    kernels::moe_gather(dev, a.xp.as<float>(), x.as<const float>(), a.token_of.as<const int32_t>(), R, s.C);
    if (ep && ep->size() > 1) {
      const Spread sp = spread(*ep);
      zero_rows_outside(a.yp, off[sp.begin], off[sp.begin + sp.count], R);  // other TP ranks' experts
      ep_forward(a, sp, *ep, *side);
    } else {
      // Every expert, or (tensor parallelism) the held ones' rows, the others' outputs zero.
      const int32_t* held = off + s.held_begin;
      zero_rows_outside(a.yp, held[0], held[s.experts_held()], R);
      ZT_ASSERT(!lowp() || lo, "a bf16 MoE layer needs its scratch's bf16 rows");
      run_experts({held, s.experts_held(), 0, lo, nullptr}, a.xp.as<const float>(), a.h.as<float>(), a.act.as<float>(),
                  a.yp.as<float>());
    }
    kernels::moe_combine(dev, y.as<float>(), a.yp.as<const float>(), a.w.as<const float>(),
                         a.slot_of.as<const int32_t>(), d);
  }
  if (s.Fs > 0) shared_forward(y, x, a);
}

void Moe::shared_forward(TensorView y, TensorView x, const MoeActs& a) const {
  ZT_PROFILE("moe_shared");
  const int64_t N = rows(x);
  sh_in.forward(a.sh_h, x);
  kernels::swiglu_forward(dev, a.sh_act.as<float>(), a.sh_h.as<const float>(), N, shape.Fs);
  sh_out.forward(a.sh_out, a.sh_act);
  if (shape.shared_gate) {
    sh_gate_lin.forward(a.sh_gate.sub(0, {N, 1}), x);
    kernels::moe_shared_gate_forward(dev, y.as<float>(), a.sh_out.as<const float>(), a.sh_gate.as<const float>(), N,
                                     shape.C);
  } else {
    kernels::add(dev, y.as<float>(), y.as<const float>(), a.sh_out.as<const float>(), y.numel());
  }
}

// A GEMM operand: rows [off[0], off[E_count]) of src (ld columns) itself, or (bf16 runs) converted
// into lo at the same rows.
const void* Moe::operand(const ExpertRun& r, const float* src, uint16_t* lo, int64_t ld) const {
  if (!lowp()) return src;
  const int64_t r0 = r.off[0], rows = r.off[r.E_count] - r0;
  kernels::to_lowp(dev, DType::bf16, lo + r0 * ld, src + r0 * ld, rows * ld);
  return lo;
}

// The held experts' weights from element `at` on: the fp32 masters, or (bf16 runs) their compute copy;
// QLoRA: the one expert dequantized into the scratch (at within its 3 F C).
const void* Moe::weights(int64_t at) const {
  if (experts_nf4) {
    const int64_t k = at % expert_stride();
    return lowp() ? static_cast<const void*>(nf4_scratch.as<const uint16_t>() + k) : nf4_scratch.as<const float>() + k;
  }
  return lowp() ? static_cast<const void*>(experts_c.as<const uint16_t>() + at) : experts.as<const float>() + at;
}

template <class F>
bool Moe::per_expert(const ExpertRun& r, F run_one) const {
  if (!experts_nf4) return false;
  const int64_t st = expert_stride(), F2 = 2 * int64_t(shape.F), C = shape.C;
  const DType t = lowp() ? DType::bf16 : DType::f32;
  char* scratch = static_cast<char*>(nf4_scratch.data);
  for (int e = 0; e < r.E_count; ++e) {
    if (r.off[e + 1] == r.off[e]) continue;  // no rows: nothing to dequantize
    const int64_t held = r.first / st + e;
    kernels::nf4_dequantize_rows(dev, experts_nf4[2 * held], 0, F2, t, scratch);
    kernels::nf4_dequantize_rows(dev, experts_nf4[2 * held + 1], 0, C, t, scratch + F2 * C * int64_t(dtype_size(t)));
    run_one(ExpertRun{r.off + e, 1, r.first + e * st, r.lo1, r.lo2, true});
  }
  return true;
}

// h = x [W_gate; W_up]^T per expert; act = silu(gate) * up; y = act W_out^T. bf16 runs: the GEMMs'
// operands in bf16 (x, act and the weights' compute copy), fp32 accumulation and outputs.
void Moe::run_experts(const ExpertRun& r, const float* x, float* h, float* act, float* y) const {
  if (!r.dequantized && per_expert(r, [&](const ExpertRun& one) { run_experts(one, x, h, act, y); })) return;
  const int64_t F = shape.F, C = shape.C, st = expert_stride(), r0 = r.off[0], rows = r.off[r.E_count] - r0;
  const DType t = lowp() ? DType::bf16 : DType::f32;
  kernels::moe_grouped_gemm_typed(dev, t, r.off, r.E_count, true, 2 * F, C, operand(r, x, r.lo1, C), C,
                                  weights(r.first), st, C, 0.f, h, 2 * F);
  lora_forward_in(r, x, h);
  kernels::swiglu_forward(dev, act + r0 * F, h + r0 * 2 * F, rows, shape.F);
  kernels::moe_grouped_gemm_typed(dev, t, r.off, r.E_count, true, C, F, operand(r, act, r.lo1, F), F,
                                  weights(r.first + 2 * F * C), st, F, 0.f, y, C);
  lora_forward_down(r, act, y);
}

// From the output gradients dy to the input gradients (into dy, read no more by then).
void Moe::run_experts_backward(const ExpertRun& r, const float* x, const float* h, const float* act, float* dy,
                               float* dact, float* dh) const {
  if (!r.dequantized &&
      per_expert(r, [&](const ExpertRun& one) { run_experts_backward(one, x, h, act, dy, dact, dh); }))
    return;
  const int64_t F = shape.F, C = shape.C, st = expert_stride(), r0 = r.off[0], rows = r.off[r.E_count] - r0;
  const DType t = lowp() ? DType::bf16 : DType::f32;
  // Frozen experts (LoRA's base: dexperts empty) take no weight gradients.
  float* dW = dexperts ? dexperts.as<float>() + r.first : nullptr;
  // W_out: dW_out += dy^T act; dact = dy W_out.
  const void* dy_op = operand(r, dy, r.lo1, C);
  if (dW)
    kernels::moe_grouped_wgrad_typed(dev, t, r.off, r.E_count, C, F, dy_op, C, operand(r, act, r.lo2, F), F,
                                     dW + 2 * F * C, st, F);
  kernels::moe_grouped_gemm_typed(dev, t, r.off, r.E_count, false, F, C, dy_op, C, weights(r.first + 2 * F * C), st, F,
                                  0.f, dact, F);
  lora_backward_down(r, act, dy, dact);
  kernels::swiglu_backward(dev, dh + r0 * 2 * F, dact + r0 * F, h + r0 * 2 * F, rows, shape.F);
  // [W_gate; W_up]: dW += dh^T x; dx = dh W.
  const void* dh_op = operand(r, dh, r.lo1, 2 * F);
  if (dW)
    kernels::moe_grouped_wgrad_typed(dev, t, r.off, r.E_count, 2 * F, C, dh_op, 2 * F, operand(r, x, r.lo2, C), C, dW,
                                     st, C);
  kernels::moe_grouped_gemm_typed(dev, t, r.off, r.E_count, false, C, 2 * F, dh_op, 2 * F, weights(r.first), st, C, 0.f,
                                  dy, C);
  lora_backward_in(r, x, dh, dy);
}

void Moe::backward(TensorView dx, TensorView dy, TensorView x, const MoeActs& a, const MoeScratch& sc, EpRegion* ep,
                   MoeExpertSide* side) const {
  const MoeShape& s = shape;
  const int64_t N = rows(x);
  const kernels::MoeDims d = s.dims(N);
  const int64_t R = a.offsets.as<const int32_t>()[s.E];
  {
    ZT_PROFILE("moe_experts");
    kernels::moe_combine_backward(dev, sc.dyp.as<float>(), sc.dw.as<float>(), dy.as<const float>(),
                                  a.yp.as<const float>(), a.w.as<const float>(), a.slot_of.as<const int32_t>(), d);
    if (ep && ep->size() > 1) {
      const Spread sp = spread(*ep);
      const int32_t* off = a.offsets.as<const int32_t>();
      ep_backward(a, sc, sp, *ep, *side);
      zero_rows_outside(sc.dyp, off[sp.begin], off[sp.begin + sp.count], R);
    } else {
      const int32_t* held = a.offsets.as<const int32_t>() + s.held_begin;
      run_experts_backward({held, s.experts_held(), 0, sc.lo1.as<uint16_t>(), sc.lo2.as<uint16_t>()},
                           a.xp.as<const float>(), a.h.as<const float>(), a.act.as<const float>(), sc.dyp.as<float>(),
                           sc.dact.as<float>(), sc.dh.as<float>());
      zero_rows_outside(sc.dyp, held[0], held[s.experts_held()], R);  // the others' input gradients: none here
    }
    kernels::fill_zero(dev, dx.data, size_t(dx.numel()) * sizeof(float));
    kernels::moe_gather_backward(dev, dx.as<float>(), sc.dyp.as<const float>(), a.slot_of.as<const int32_t>(), d);
  }
  {
    ZT_PROFILE("moe_router");
    kernels::moe_router_backward(dev, sc.dlogits.as<float>(), sc.dw.as<const float>(), a.probs.as<const float>(),
                                 a.idx.as<const int32_t>(), a.w.as<const float>(), a.lse.as<const float>(),
                                 adds_loss_grads ? loss_grad.dprob : nullptr, adds_loss_grads ? loss_grad.z_grad : 0.f,
                                 d, s.renorm);
    router.backward_weight(sc.dlogits, sc.dlogits, x);
    add_input_grad(router, dx, sc.dlogits);
  }
  if (s.Fs > 0) shared_backward(dx, dy, x, a, sc);
}

void Moe::shared_backward(TensorView dx, TensorView dy, TensorView x, const MoeActs& a, const MoeScratch& sc) const {
  ZT_PROFILE("moe_shared");
  const int64_t N = rows(x);
  TensorView d_out = dy;
  if (shape.shared_gate) {
    kernels::moe_shared_gate_backward(dev, sc.sh_do.as<float>(), sc.sh_dg.as<float>(), dy.as<const float>(),
                                      a.sh_out.as<const float>(), a.sh_gate.as<const float>(), N, shape.C);
    const TensorView dg = sc.sh_dg.sub(0, {N, 1});
    sh_gate_lin.backward_weight(dg, dg, x);
    add_input_grad(sh_gate_lin, dx, dg);
    d_out = sc.sh_do;
  }
  sh_out.backward_weight(d_out, d_out, a.sh_act);
  sh_out.backward_input(sc.sh_dact, d_out);
  kernels::swiglu_backward(dev, sc.sh_dh.as<float>(), sc.sh_dact.as<const float>(), a.sh_h.as<const float>(), N,
                           shape.Fs);
  sh_in.backward_weight(sc.sh_dh, sc.sh_dh, x);
  add_input_grad(sh_in, dx, sc.sh_dh);
}

}  // namespace zt::nn
