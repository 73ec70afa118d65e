// adafactor.h: Adafactor as Hugging Face's transformers.optimization.Adafactor computes it
// (Shazeer & Stern 2018), selected by --optim adafactor. A matrix keeps factored second moments,
// a row vector ("exp_avg_sq_row", m floats) and a column vector ("exp_avg_sq_col", n floats);
// other tensors keep an elementwise "exp_avg_sq"; with beta1 an elementwise "exp_avg" too.
// Per step t: beta2t = 1 - t^decay_rate; the moments move toward the means of g^2 + eps1; the
// update g / sqrt(v_hat) is divided by max(1, RMS(update) / clip_threshold), scaled by the step
// size (the schedule's LR, or min(1e-2 or 1e-6 t, 1/sqrt(t)) with relative_step, times
// max(eps2, RMS(p)) with scale_parameter), averaged into exp_avg with beta1, and applied after
// decoupled decay p -= wd * step size * p.
// HF Trainer's --optim adafactor sets scale_parameter=False, relative_step=False and passes the
// LR; --optim_args sets scale_parameter, relative_step, warmup_init, clip_threshold, decay_rate,
// beta1, eps1, eps2. Under ZeRO a matrix cut between ranks has its row / column sums and RMS
// summed over the shard group (GroupSum), so every rank holds the same factors.
#pragma once
#include <vector>

#include "optim/optimizer.h"
#include "optim/state_pack.h"

namespace zt::optim {

class Adafactor final : public Optimizer {
 public:
  Adafactor(const OptimizerConfig& cfg, int64_t numel);
  bool needs_layout() const override { return true; }
  void step(std::span<const StepPiece> pieces, double lr) override;
  static bool first_moment(const OptimizerConfig& cfg) { return cfg.args.count("beta1") > 0; }
  void for_each_state(int64_t offset, int64_t n, int tensor, const std::function<void(void*, size_t)>& f) override;

 protected:
  void on_layout() override;
  int64_t own_state_bytes() const override;
  void save_own(StateWriter& w) const override;
  void load_own(StateReader& r) override;

 private:
  // Per tensor: where its row / column sums and sum of squares sit in sums_, its factored
  // state in rows_ / cols_ (matrices), and whether this rank steps a piece of it.
  struct Tensor {
    int64_t sums = 0, sq = 0, row_state = -1, col_state = -1;
    bool held = false;
  };
  double step_size(double lr, const Tensor& k) const;
  void accumulate(const StepPiece& r);
  void update_factors(double beta2t);
  template <class F>
  void for_each_update(const StepPiece& r, F&& f) const;
  double update_sq(const StepPiece& r) const;

  bool scale_parameter_, relative_step_, warmup_init_;
  double clip_threshold_, decay_rate_, beta1_, eps1_, eps2_;
  std::vector<Tensor> tensors_;
  std::vector<float> sums_, sq_, rows_, cols_;  // the group-summed statistics; rows_ / cols_ the state
  std::vector<float> rfac_, cfac_;              // this step's (row / mean)^-1/2 and col^-1/2, per matrix
  std::vector<double> col_scratch_;             // per-thread column sums
  std::vector<double> rms_;                     // per tensor: RMS(p) before the step
  PackedState v_, m_;                           // elementwise exp_avg_sq (non-matrices), exp_avg (beta1)
};

}  // namespace zt::optim
