// lion_sgd.h: the one-moment optimizers.
// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"; HF's --optim
// lion_32bit, which passes adam_beta1 / adam_beta2 as its betas): c = b1 m + (1 - b1) g;
// p = p (1 - lr wd) - lr sign(c); m = b2 m + (1 - b2) g. State "exp_avg", 4 bytes per parameter.
// SGD as torch.optim.SGD computes it (HF's --optim sgd): weight decay is L2, added to the
// gradient (d = g + wd p, on `decay` pieces); with momentum mu the buffer starts as d and then
// b = mu b + (1 - dampening) d; nesterov steps along d + mu b, else b; p -= lr * step.
// --optim_args momentum=, dampening=, nesterov=. State "momentum_buffer" only with momentum.
#pragma once
#include "optim/optimizer.h"

namespace zt::optim {

class Lion final : public Optimizer {
 public:
  Lion(const OptimizerConfig& cfg, int64_t numel);
  void step(std::span<const StepPiece> pieces, double lr) override;
  bool offloadable() const override { return true; }
};

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& cfg, int64_t numel);
  void step(std::span<const StepPiece> pieces, double lr) override;
  bool offloadable() const override { return true; }

 private:
  double momentum_, dampening_;
  bool nesterov_;
};

}  // namespace zt::optim
