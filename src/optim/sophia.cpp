// sophia.cpp: see sophia.h.
#include "optim/sophia.h"

#include <cmath>

#include "core/error.h"
#include "optim/state_pack.h"

namespace zt::optim {

Sophia::Sophia(const OptimizerConfig& cfg, int64_t numel)
    : Optimizer("sophia", cfg, numel, {"exp_avg", "hessian"}),
      rho_(arg("rho", 0.04)),
      interval_(int64_t(arg("hessian_interval", 10))) {
  refuse_unknown_args({"rho", "hessian_interval"});
  ZT_CHECK(rho_ > 0.0, "--optim_args rho=", rho_, " must be > 0 (sophia)");
  ZT_CHECK(interval_ >= 1, "--optim_args hessian_interval must be >= 1 (sophia)");
}

void Sophia::step(std::span<const StepPiece> pieces, double lr) {
  ++t_;
  const OptimizerConfig& cfg = config();
  ZT_ASSERT(cfg.tokens_per_step > 0, "sophia: the trainer did not set tokens_per_step");
  const float b1 = float(cfg.beta1), c1 = float(1.0 - cfg.beta1), step = float(lr);
  const float scale = float(rho_ * double(cfg.tokens_per_step));
  for (const StepPiece& r : pieces) {
    const float decay = r.decay ? float(1.0 - lr * cfg.weight_decay) : 1.0f;
    with_state(slot_dtype(), slot_data(0), slot_data(1), r.state_offset, [&](auto m, auto h) {
      float* p = r.params;
      const float* g = r.grads;
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < r.numel; ++i) {
        const float mi = m.get(i) * b1 + g[i] * c1;
        m.set(i, mi, uint64_t(t_));
        const float ratio = std::min(std::fabs(mi) / (scale * h.get(i) + 1e-15f), 1.0f);
        const float sign = mi > 0.f ? 1.f : (mi < 0.f ? -1.f : 0.f);
        p[i] = p[i] * decay - step * sign * ratio;
      }
    });
  }
}

void Sophia::update_curvature(std::span<const StepPiece> pieces) {
  const float b2 = float(config().beta2), c2 = float(1.0 - config().beta2);
  for (const StepPiece& r : pieces)
    with_state(slot_dtype(), slot_data(1), nullptr, r.state_offset, [&](auto h, auto) {
      const float* g = r.grads;
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < r.numel; ++i) h.set(i, h.get(i) * b2 + g[i] * g[i] * c2, uint64_t(t_) + (1ull << 32));
    });
}

}  // namespace zt::optim
