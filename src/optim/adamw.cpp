// adamw.cpp: see adamw.h.
#include "optim/adamw.h"

#include <cmath>

#include "optim/state_pack.h"

namespace zt::optim {

AdamW::AdamW(const OptimizerConfig& cfg, int64_t numel, std::string name)
    : Optimizer(std::move(name), cfg, numel, {"exp_avg", "exp_avg_sq"}) {
  refuse_unknown_args({});
}

namespace {

struct AdamScalars {
  float b1, b2, one_minus_b1, one_minus_b2, step_size, bc2_sqrt, eps;
};

AdamScalars adam_scalars(const OptimizerConfig& cfg, int64_t t, double lr) {
  // Bias corrections in double then rounded, as PyTorch computes them in Python floats.
  const double bc1 = 1.0 - std::pow(cfg.beta1, double(t));
  const double bc2 = 1.0 - std::pow(cfg.beta2, double(t));
  return {float(cfg.beta1), float(cfg.beta2),      float(1.0 - cfg.beta1), float(1.0 - cfg.beta2),
          float(lr / bc1),  float(std::sqrt(bc2)), float(cfg.eps)};
}

template <class M, class V>
void adam_piece(const AdamScalars& k, float decay, const StepPiece& r, M m, V v, uint64_t t) {
  float* p = r.params;
  const float* g = r.grads;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < r.numel; ++i) {
    float pi = p[i] * decay;
    float mi = m.get(i) * k.b1 + g[i] * k.one_minus_b1;
    float vi = v.get(i) * k.b2 + g[i] * g[i] * k.one_minus_b2;
    m.set(i, mi, t);
    v.set(i, vi, t);
    p[i] = pi - k.step_size * mi / (std::sqrt(vi) / k.bc2_sqrt + k.eps);
  }
}

}  // namespace

void adamw_update(const OptimizerConfig& cfg, int64_t t, double lr, const StepPiece& r, float* m, float* v) {
  const float decay = r.decay ? float(1.0 - lr * cfg.weight_decay) : 1.0f;
  adam_piece(adam_scalars(cfg, t, lr), decay, r, F32State{m}, F32State{v}, uint64_t(t));
}

void AdamW::step(std::span<const StepPiece> pieces, double lr) {
  ++t_;
  const OptimizerConfig& cfg = config();
  const AdamScalars k = adam_scalars(cfg, t_, lr);
  for (const StepPiece& r : pieces) {
    const float decay = r.decay ? float(1.0 - lr * cfg.weight_decay) : 1.0f;
    with_state(slot_dtype(), slot_data(0), slot_data(1), r.state_offset,
               [&](auto m, auto v) { adam_piece(k, decay, r, m, v, uint64_t(t_)); });
  }
}

}  // namespace zt::optim
