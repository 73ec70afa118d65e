// adamw.h: AdamW with PyTorch's arithmetic (torch.optim.AdamW, foreach=False): decoupled
// decay p -= lr*wd*p first, then the bias-corrected Adam step. Decay applies only to pieces
// marked `decay` (rank >= 2 tensors). State: "exp_avg" and "exp_avg_sq" (PyTorch's names),
// 8 bytes per parameter. Selected by --optim adamw_torch (HF's default) or adamw.
#pragma once
#include "optim/optimizer.h"

namespace zt::optim {

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerConfig& cfg, int64_t numel, std::string name = "adamw_torch");
  void step(std::span<const StepPiece> pieces, double lr) override;
};

}  // namespace zt::optim
