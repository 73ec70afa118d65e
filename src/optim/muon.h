// muon.h: Muon (Jordan et al., the modded-nanogpt speedrun; Moonlight's scaling), selected by
// --optim muon, with torch.optim.Muon's arithmetic: for each hidden 2-D weight (TensorInfo::
// hidden: the blocks' projections), the momentum b = mu b + (1 - mu) g, the Nesterov direction
// g + mu (b - g), orthogonalised by ns_steps quintic Newton-Schulz iterations (coefficients
// 3.4445, -4.7750, 2.0315 on X / max(||X||_F, 1e-7), the wide orientation), then
// p = p (1 - lr wd) - lr * scale * O with scale 0.2 sqrt(max(m, n)) (adjust_lr_fn=
// match_rms_adamw, Moonlight's: the update's RMS matches AdamW's so one LR and decay serve both;
// the default) or sqrt(max(1, m / n)) (adjust_lr_fn=original, Keller Jordan's). Embeddings, the
// head, norms and biases take AdamW (optim/adamw.h) with the same LR. The iteration runs in
// bf16 where the CPU multiplies bf16 natively (AVX512-BF16), else fp32 (ns_dtype=auto|bf16|fp32).
// State: "momentum_buffer" for hidden matrices (4 bytes), "exp_avg" + "exp_avg_sq" for the rest.
// Under ZeRO a matrix cut between ranks is assembled by two group sums: the directions, then the
// orthogonalised matrices, each computed only by the rank holding the matrix's first element.
#pragma once
#include <vector>

#include "optim/optimizer.h"
#include "optim/state_pack.h"

namespace zt::optim {

class Muon final : public Optimizer {
 public:
  Muon(const OptimizerConfig& cfg, int64_t numel);
  bool needs_layout() const override { return true; }
  void step(std::span<const StepPiece> pieces, double lr) override;
  void for_each_state(int64_t offset, int64_t n, int tensor, const std::function<void(void*, size_t)>& f) override;

 protected:
  void on_layout() override;
  int64_t own_state_bytes() const override { return momentum_.bytes() + adam_.bytes(); }
  void save_own(StateWriter& w) const override;
  void load_own(StateReader& r) override;

 private:
  bool hidden(const StepPiece& p) const { return layout().tensors[size_t(p.tensor)].hidden; }
  void direction(const StepPiece& r, float* out);
  void apply(const StepPiece& r, const float* ortho, double lr);
  void orthogonalise(const std::vector<const StepPiece*>& ps, const std::vector<float*>& from,
                     const std::vector<float*>& to);

  double mu_;
  bool nesterov_;
  int ns_steps_;
  bool match_rms_;
  DType ns_dtype_;
  PackedState momentum_, adam_;     // hidden matrices' buffer; the AdamW moments of the rest
  std::vector<int64_t> hidden_at_;  // per tensor: its offset in the assembled buffers (ZeRO), -1
  int64_t hidden_total_ = 0;
  std::vector<float> work_, ortho_;
};

// O = NS5(G) for a rows x cols matrix (out may be g): ns_steps iterations in dtype (f32 or bf16).
void newton_schulz(const float* g, int64_t rows, int64_t cols, int ns_steps, DType dtype, float* out);

}  // namespace zt::optim
