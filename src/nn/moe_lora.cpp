// moe_lora.cpp: the routed experts' LoRA adapters (nn/moe.h, MoeExpertLora). Per expert, on its rows,
// with x' = dropout(x):
//   forward   h[:, part] += s (x' A_part^T) B_part^T        y += s (act' A_down^T) B_down^T
//   backward  g = s dout B;  din += dropout'(g A);  dB += s dout^T (x' A^T);  dA += g^T x'
// as nn/lora.cpp computes a dense Linear's; each expert's A and B sit at its block's stride, so every
// product is one grouped GEMM over the experts' row groups (kernels/moe.h), never a loop over tokens.
// x' A^T is recomputed in backward; the dropout mask is a function of (seed, module, the run's first
// row, element), so both passes see the same one without keeping it.
#include <algorithm>

#include "core/profile.h"
#include "kernels/dispatch.h"
#include "kernels/dropout.h"
#include "nn/moe.h"

namespace zt::nn {

float* MoeLoraScratch::take(std::vector<float>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

namespace {
enum Module : uint64_t { kIn = 1, kDown = 2 };

uint64_t mask_seed(const MoeExpertLora& L, int64_t r0, Module m) {
  return L.seed ^ (uint64_t(m) << 60) ^ (uint64_t(r0) * 0x9E3779B97F4A7C15ull);
}

// The adapters' GEMM input: x itself, or (dropout in a training pass) x' at the same rows of buf.
const float* adapter_rows(const MoeExpertLora& L, const int32_t* off, int E, const float* x, int64_t w,
                          std::vector<float>& buf, Module m) {
  if (L.dropout <= 0.f) return x;
  const int64_t r0 = off[0], r1 = off[E];
  float* d = L.scratch->take(buf, r1 * w);
  kernels::dropout_forward(DType::f32, d + r0 * w, x + r0 * w, (r1 - r0) * w, L.dropout, mask_seed(L, r0, m));
  return d;
}
}  // namespace

namespace {
// The columns of h (R, 2F) an adapted part adds to: the gate's [0, F), the up's [F, 2F).
int64_t part_column(const MoeExpertLora& L, int j, int F) { return (j == 0 && L.gate) ? 0 : F; }
}  // namespace

void Moe::lora_forward_in(const ExpertRun& r, const float* x, float* h) const {
  const MoeExpertLora& L = lora;
  if (!L.on() || L.parts_in() == 0) return;
  ZT_PROFILE("lora");
  const int C = shape.C, F = shape.F;
  const int64_t R = int64_t(L.parts_in()) * L.r, st = L.stride(C, F), r0 = r.off[0], r1 = r.off[r.E_count];
  const float* P = L.p.as<const float>() + r.first / expert_stride() * st;
  const float* xin = adapter_rows(L, r.off, r.E_count, x, C, L.scratch->xd, kIn);
  float* H = L.scratch->take(L.scratch->h, r1 * R);
  kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, true, R, C, xin, C, P, st, C, 0.f, H, R);
  kernels::scale(dev, H + r0 * R, (r1 - r0) * R, L.scale);
  for (int j = 0; j < L.parts_in(); ++j)
    kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, true, F, L.r, H + j * L.r, R,
                                    P + L.b_in(C) + int64_t(j) * F * L.r, st, L.r, 1.f, h + part_column(L, j, F),
                                    2 * int64_t(F));
}

void Moe::lora_forward_down(const ExpertRun& r, const float* act, float* y) const {
  const MoeExpertLora& L = lora;
  if (!L.on() || !L.down) return;
  ZT_PROFILE("lora");
  const int C = shape.C, F = shape.F;
  const int64_t st = L.stride(C, F), r0 = r.off[0], r1 = r.off[r.E_count];
  const float* P = L.p.as<const float>() + r.first / expert_stride() * st;
  const float* ain = adapter_rows(L, r.off, r.E_count, act, F, L.scratch->xd, kDown);
  float* H = L.scratch->take(L.scratch->h, r1 * L.r);
  kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, true, L.r, F, ain, F, P + L.a_down(C, F), st, F,
                                  0.f, H, L.r);
  kernels::scale(dev, H + r0 * L.r, (r1 - r0) * L.r, L.scale);
  kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, true, C, L.r, H, L.r, P + L.b_down(C, F), st, L.r,
                                  1.f, y, C);
}

void Moe::lora_backward_down(const ExpertRun& r, const float* act, const float* dy, float* dact) const {
  const MoeExpertLora& L = lora;
  if (!L.on() || !L.down) return;
  ZT_PROFILE("lora");
  const int C = shape.C, F = shape.F;
  const int64_t st = L.stride(C, F), r0 = r.off[0], r1 = r.off[r.E_count], held = r.first / expert_stride();
  const float* P = L.p.as<const float>() + held * st;
  MoeLoraScratch& S = *L.scratch;
  // g = s dy B_down (rows, r)
  float* G = S.take(S.g, r1 * L.r);
  kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, false, L.r, C, dy, C, P + L.b_down(C, F), st, L.r,
                                  0.f, G, L.r);
  kernels::scale(dev, G + r0 * L.r, (r1 - r0) * L.r, L.scale);
  if (L.g) {
    float* dP = L.g.as<float>() + held * st;
    const float* ain = adapter_rows(L, r.off, r.E_count, act, F, S.xd, kDown);
    float* H = S.take(S.h, r1 * L.r);
    kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, true, L.r, F, ain, F, P + L.a_down(C, F), st, F,
                                    0.f, H, L.r);
    kernels::scale(dev, H + r0 * L.r, (r1 - r0) * L.r, L.scale);
    kernels::moe_grouped_wgrad_typed(dev, DType::f32, r.off, r.E_count, C, L.r, dy, C, H, L.r, dP + L.b_down(C, F), st,
                                     L.r);
    kernels::moe_grouped_wgrad_typed(dev, DType::f32, r.off, r.E_count, L.r, F, G, L.r, ain, F, dP + L.a_down(C, F), st,
                                     F);
  }
  if (L.dropout <= 0.f) {
    kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, false, F, L.r, G, L.r, P + L.a_down(C, F), st, F,
                                    1.f, dact, F);
    return;
  }
  float* D = S.take(S.dxd, r1 * F);
  kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, false, F, L.r, G, L.r, P + L.a_down(C, F), st, F,
                                  0.f, D, F);
  kernels::dropout_backward_add(dact + r0 * F, D + r0 * F, (r1 - r0) * F, L.dropout, mask_seed(L, r0, kDown));
}

void Moe::lora_backward_in(const ExpertRun& r, const float* x, const float* dh, float* dx) const {
  const MoeExpertLora& L = lora;
  if (!L.on() || L.parts_in() == 0) return;
  ZT_PROFILE("lora");
  const int C = shape.C, F = shape.F;
  const int64_t R = int64_t(L.parts_in()) * L.r, st = L.stride(C, F), r0 = r.off[0], r1 = r.off[r.E_count];
  const int64_t held = r.first / expert_stride();
  const float* P = L.p.as<const float>() + held * st;
  MoeLoraScratch& S = *L.scratch;
  // g (rows, R) = s dh[:, part] B_part, per adapted part
  float* G = S.take(S.g, r1 * R);
  for (int j = 0; j < L.parts_in(); ++j)
    kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, false, L.r, F, dh + part_column(L, j, F), 2 * F,
                                    P + L.b_in(C) + int64_t(j) * F * L.r, st, L.r, 0.f, G + j * L.r, R);
  kernels::scale(dev, G + r0 * R, (r1 - r0) * R, L.scale);
  if (L.g) {
    float* dP = L.g.as<float>() + held * st;
    const float* xin = adapter_rows(L, r.off, r.E_count, x, C, S.xd, kIn);
    float* H = S.take(S.h, r1 * R);
    kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, true, R, C, xin, C, P, st, C, 0.f, H, R);
    kernels::scale(dev, H + r0 * R, (r1 - r0) * R, L.scale);
    for (int j = 0; j < L.parts_in(); ++j)
      kernels::moe_grouped_wgrad_typed(dev, DType::f32, r.off, r.E_count, F, L.r, dh + part_column(L, j, F), 2 * F,
                                       H + j * L.r, R, dP + L.b_in(C) + int64_t(j) * F * L.r, st, L.r);
    kernels::moe_grouped_wgrad_typed(dev, DType::f32, r.off, r.E_count, R, C, G, R, xin, C, dP, st, C);
  }
  if (L.dropout <= 0.f) {
    kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, false, C, R, G, R, P, st, C, 1.f, dx, C);
    return;
  }
  float* D = S.take(S.dxd, r1 * C);
  kernels::moe_grouped_gemm_typed(dev, DType::f32, r.off, r.E_count, false, C, R, G, R, P, st, C, 0.f, D, C);
  kernels::dropout_backward_add(dx + r0 * C, D + r0 * C, (r1 - r0) * C, L.dropout, mask_seed(L, r0, kIn));
}

}  // namespace zt::nn
