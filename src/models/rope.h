// rope.h: RoPE inverse frequencies and the cos/sin scale for a model config, computed the
// way transformers' modeling_rope_utils does (rope_type default, linear, dynamic, yarn,
// llama3), in the same float32 steps so fp32 parity is not limited by the table.
#pragma once
#include <vector>

#include "models/config.h"

namespace zt {

struct RopeFreqs {
  std::vector<float> inv_freq;  // (HS/2)
  float scale = 1.0f;           // multiplies cos and sin (yarn's attention factor)
};

RopeFreqs rope_freqs(const ModelConfig& c);
// cos/sin (rows, HS/2) tables for positions 0..rows-1.
void rope_fill(const RopeFreqs& f, float* cos, float* sin, int rows);

}  // namespace zt
