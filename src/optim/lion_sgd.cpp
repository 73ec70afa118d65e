// lion_sgd.cpp: see lion_sgd.h.
#include "optim/lion_sgd.h"

#include "core/error.h"
#include "optim/state_pack.h"

namespace zt::optim {

Lion::Lion(const OptimizerConfig& cfg, int64_t numel) : Optimizer("lion_32bit", cfg, numel, {"exp_avg"}) {
  refuse_unknown_args({});
}

void Lion::step(std::span<const StepPiece> pieces, double lr) {
  ++t_;
  const OptimizerConfig& cfg = config();
  const float b1 = float(cfg.beta1), b2 = float(cfg.beta2), c1 = float(1.0 - cfg.beta1), c2 = float(1.0 - cfg.beta2),
              step = float(lr);
  for (const StepPiece& r : pieces) {
    const float decay = r.decay ? float(1.0 - lr * cfg.weight_decay) : 1.0f;
    with_state(slot_dtype(), slot_data(0), nullptr, r.state_offset, [&](auto m, auto) {
      float* p = r.params;
      const float* g = r.grads;
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < r.numel; ++i) {
        const float mi = m.get(i);
        const float c = b1 * mi + c1 * g[i];
        const float sign = c > 0.f ? 1.f : (c < 0.f ? -1.f : 0.f);
        p[i] = p[i] * decay - step * sign;
        m.set(i, b2 * mi + c2 * g[i], uint64_t(t_));
      }
    });
  }
}

namespace {
std::vector<std::string> sgd_slots(const OptimizerConfig& cfg) {
  // A malformed value is refused by arg() in the constructor's body.
  auto it = cfg.args.find("momentum");
  bool has = false;
  try {
    has = it != cfg.args.end() && std::stod(it->second) != 0.0;
  } catch (const std::exception&) {
  }
  return has ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
}
}  // namespace

Sgd::Sgd(const OptimizerConfig& cfg, int64_t numel)
    : Optimizer("sgd", cfg, numel, sgd_slots(cfg)),
      momentum_(arg("momentum", 0.0)),
      dampening_(arg("dampening", 0.0)),
      nesterov_(arg_flag("nesterov", false)) {
  refuse_unknown_args({"momentum", "dampening", "nesterov"});
  ZT_CHECK(momentum_ >= 0.0, "--optim_args momentum=", momentum_, " must be >= 0 (sgd)");
  ZT_CHECK(!nesterov_ || (momentum_ > 0.0 && dampening_ == 0.0),
           "--optim_args nesterov=true needs momentum > 0 and dampening 0 (as torch.optim.SGD)");
}

void Sgd::step(std::span<const StepPiece> pieces, double lr) {
  ++t_;
  const float wd = float(config().weight_decay), mu = float(momentum_), damp = float(1.0 - dampening_),
              step = float(lr);
  const bool first = t_ == 1;
  for (const StepPiece& r : pieces) {
    const float l2 = r.decay ? wd : 0.f;
    float* p = r.params;
    const float* g = r.grads;
    if (momentum_ == 0.0) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < r.numel; ++i) p[i] -= step * (g[i] + l2 * p[i]);
      continue;
    }
    with_state(slot_dtype(), slot_data(0), nullptr, r.state_offset, [&](auto b, auto) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < r.numel; ++i) {
        const float d = g[i] + l2 * p[i];
        const float bi = first ? d : mu * b.get(i) + damp * d;
        b.set(i, bi, uint64_t(t_));
        p[i] -= step * (nesterov_ ? d + mu * bi : bi);
      }
    });
  }
}

}  // namespace zt::optim
