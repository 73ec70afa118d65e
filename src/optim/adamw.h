// adamw.h: AdamW with PyTorch's arithmetic (torch.optim.AdamW, foreach=False): decoupled
// decay p -= lr*wd*p first, then the bias-corrected Adam step. Decay applies only to pieces
// marked `decay` (rank >= 2 tensors). State: "exp_avg" and "exp_avg_sq" (PyTorch's names),
// 8 bytes per parameter, or 4 with --optim_state_dtype bf16 (torchtitan's / Megatron's
// --exp-avg-dtype; stored with stochastic rounding, optim/state_pack.h). Selected by --optim
// adamw_torch (HF's default), adamw or adamw_torch_fused.
#pragma once
#include "optim/optimizer.h"

namespace zt::optim {

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerConfig& cfg, int64_t numel, std::string name = "adamw_torch");
  void step(std::span<const StepPiece> pieces, double lr) override;
  bool offloadable() const override { return true; }
};

// The same update over given moment arrays (Muon's AdamW part): step t (from 1).
void adamw_update(const OptimizerConfig& cfg, int64_t t, double lr, const StepPiece& r, float* m, float* v);

}  // namespace zt::optim
