// sampling.h: next-token choice from logits, HF generate()'s knobs: temperature
// (0 = greedy), top_k (0 = off), top_p (1 = off), applied in that order.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace zt {

struct SamplingConfig {
  double temperature = 1.0;
  int top_k = 50;
  double top_p = 1.0;
};

// logits: (V).
int32_t sample_token(TensorView logits, const SamplingConfig& cfg, Rng& rng);

}  // namespace zt
