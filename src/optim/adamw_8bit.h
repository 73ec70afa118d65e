// adamw_8bit.h: 8-bit AdamW as bitsandbytes' AdamW8bit computes it (HF's --optim adamw_8bit /
// adamw_bnb_8bit): both moments kept blockwise-quantized (optim/quant8.h: blocks of 256, the
// signed dynamic map for exp_avg, the unsigned one for exp_avg_sq), dequantized, updated in fp32
// with AdamW's arithmetic, the parameter stepped with the fp32 moments, then requantized.
// Tensors under 4,096 elements (bitsandbytes' min_8bit_size) keep fp32 moments. State: 2 bytes
// per parameter plus 8 bytes per 256 (2.03). Blocks start at each piece's first element: a ZeRO
// shard that cuts a tensor starts a block there (bitsandbytes' blocks start at the tensor's).
// Checkpoints hold the moments dequantized (fp32 "exp_avg", "exp_avg_sq", readable anywhere)
// and each element's block absmax ("exp_avg.absmax", ...), from which the codes are recovered
// exactly.
#pragma once
#include <vector>

#include "core/memory.h"
#include "optim/optimizer.h"

namespace zt::optim {

class AdamW8bit final : public Optimizer {
 public:
  static constexpr int64_t kBlock = 256;
  static constexpr int64_t kMinSize = 4096;
  AdamW8bit(const OptimizerConfig& cfg, int64_t numel);
  bool needs_layout() const override { return true; }
  void step(std::span<const StepPiece> pieces, double lr) override;
  void for_each_state(int64_t offset, int64_t n, int tensor, const std::function<void(void*, size_t)>& f) override;

 protected:
  void on_layout() override;
  int64_t own_state_bytes() const override;
  void save_own(StateWriter& w) const override;
  void load_own(StateReader& r) override;

 private:
  struct Piece {
    int64_t state_offset, numel;
    bool small;      // fp32 moments
    int64_t at;      // into small_ (fp32) or codes_ (8-bit)
    int64_t block0;  // first block in absmax_ (8-bit)
  };
  const Piece& piece_of(int64_t state_offset) const;
  void step_quantized(const Piece& q, const StepPiece& r, double lr);

  std::vector<Piece> pieces_;  // sorted by state_offset
  Buffer codes_[2], absmax_[2], small_[2];
};

}  // namespace zt::optim
