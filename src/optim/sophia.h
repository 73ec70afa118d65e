// sophia.h: SophiaG (Liu et al. 2023, "Sophia: A Scalable Stochastic Second-order Optimizer"),
// as its reference code (github.com/Liuhong99/Sophia, sophia.py) computes it, selected by
// --optim sophia (or sophiag). Every step: p *= 1 - lr wd (decay pieces); m = b1 m + (1 - b1) g;
// p -= lr sign(m) min(|m| / (rho bs h + 1e-15), 1), with bs the tokens per optimizer step.
// Every hessian_interval steps (k, 10) the trainer runs a forward and backward pass on labels
// sampled from the model's own softmax (the Gauss-Newton-Bartlett estimator) and hands the
// reduced gradient g^ to update_curvature: h = b2 h + (1 - b2) g^ g^. Betas are HF's
// --adam_beta1 / --adam_beta2 (the paper's are 0.965, 0.99); --optim_args rho=0.04,
// hessian_interval=10. State "exp_avg" and "hessian", 8 bytes per parameter (4 in bf16).
#pragma once
#include "optim/optimizer.h"

namespace zt::optim {

class Sophia final : public Optimizer {
 public:
  Sophia(const OptimizerConfig& cfg, int64_t numel);
  void step(std::span<const StepPiece> pieces, double lr) override;
  bool offloadable() const override { return true; }
  int64_t curvature_interval() const override { return interval_; }
  void update_curvature(std::span<const StepPiece> pieces) override;

 private:
  double rho_;
  int64_t interval_;
};

}  // namespace zt::optim
