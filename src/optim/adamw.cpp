// adamw.cpp: see adamw.h.
#include "optim/adamw.h"

#include <cmath>

namespace zt::optim {

AdamW::AdamW(const OptimizerConfig& cfg, int64_t numel, std::string name)
    : Optimizer(std::move(name), cfg, numel, {"exp_avg", "exp_avg_sq"}) {}

void AdamW::step(std::span<const StepPiece> pieces, double lr) {
  ++t_;
  const OptimizerConfig& cfg = config();
  const float b1 = float(cfg.beta1), b2 = float(cfg.beta2), eps = float(cfg.eps);
  const float one_minus_b1 = float(1.0 - cfg.beta1), one_minus_b2 = float(1.0 - cfg.beta2);
  // Bias corrections in double then rounded, as PyTorch computes them in Python floats.
  const double bc1 = 1.0 - std::pow(cfg.beta1, double(t_));
  const double bc2 = 1.0 - std::pow(cfg.beta2, double(t_));
  const float step_size = float(lr / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
  float* m = slot(0);
  float* v = slot(1);
  for (const StepPiece& r : pieces) {
    const float decay = r.decay ? float(1.0 - lr * cfg.weight_decay) : 1.0f;
    float* p = r.params;
    const float* g = r.grads;
    float* mr = m + r.state_offset;
    float* vr = v + r.state_offset;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < r.numel; ++i) {
      float pi = p[i] * decay;
      float mi = mr[i] * b1 + g[i] * one_minus_b1;
      float vi = vr[i] * b2 + g[i] * g[i] * one_minus_b2;
      mr[i] = mi;
      vr[i] = vi;
      p[i] = pi - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    }
  }
}

}  // namespace zt::optim
