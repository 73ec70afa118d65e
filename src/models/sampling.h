// sampling.h: next-token choice from logits, HF generate()'s knobs: temperature
// (0 = greedy), top_k (0 = off), top_p (1 = off), applied in that order.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace zt {

struct SamplingConfig {
  double temperature = 1.0;
  int top_k = 50;
  double top_p = 1.0;
};

int32_t sample_token(const float* logits, int V, const SamplingConfig& cfg, Rng& rng);

}  // namespace zt
