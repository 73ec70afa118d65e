// adamw.h: AdamW over a flat fp32 buffer (or a shard of one), PyTorch's arithmetic
// (torch.optim.AdamW, foreach=False): decoupled decay p -= lr*wd*p first, then the
// bias-corrected Adam step. Decay applies only to ranges marked `decay` (rank >= 2
// tensors). Also: the global gradient norm and clipping, PyTorch's clip_grad_norm_.
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"

namespace zt::optim {

struct AdamWConfig {
  // Doubles, like PyTorch's Python-float hyper-parameters; constants derived from them
  // are rounded to fp32 only where PyTorch rounds them.
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// A contiguous range of the flat buffer with one decay setting.
struct ParamRange {
  int64_t offset, numel;
  bool decay;
};

// A piece of a sharded update: numel values of params / grads whose moments sit at
// state_offset of the optimizer's own buffers (ZeRO: the rank's shard, cut per tensor so
// the decay rule still applies per tensor).
struct AdamWPiece {
  float* params;
  const float* grads;
  int64_t state_offset, numel;
  bool decay;
};

class AdamW {
 public:
  AdamW(int64_t numel, std::vector<ParamRange> ranges, AdamWConfig cfg);
  // One step with learning rate lr over params/grads (numel floats each).
  void step(float* params, const float* grads, double lr);
  // The same arithmetic over pieces (one step: the step count advances once).
  void step_pieces(const std::vector<AdamWPiece>& pieces, double lr);
  int64_t steps() const { return t_; }
  void set_steps(int64_t t) { t_ = t; }  // when resuming
  AdamWConfig& config() { return cfg_; }
  float* exp_avg() const { return m_.as<float>(); }
  float* exp_avg_sq() const { return v_.as<float>(); }

 private:
  int64_t numel_;
  std::vector<ParamRange> ranges_;
  AdamWConfig cfg_;
  Buffer m_, v_;
  int64_t t_ = 0;
};

// L2 norm of the whole gradient, accumulated in double.
double grad_norm(const float* grads, int64_t numel);
// PyTorch semantics: scale by max_norm / (norm + 1e-6) when that is < 1.
void clip_grads(float* grads, int64_t numel, double norm, double max_norm);

}  // namespace zt::optim
