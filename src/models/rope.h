// rope.h: RoPE inverse frequencies and the cos/sin scale for a model config, computed the
// way transformers' modeling_rope_utils does (rope_type default, linear, dynamic, yarn,
// llama3, longrope), in the same float32 steps so fp32 parity is not limited by the table.
#pragma once
#include <vector>

#include "models/config.h"

namespace zt {

struct RopeFreqs {
  std::vector<float> inv_freq;  // (HS/2)
  float scale = 1.0f;           // multiplies cos and sin (yarn's and longrope's attention factor)
  // longrope: the frequencies for sequences longer than long_after positions (empty otherwise).
  std::vector<float> long_inv_freq;
  int long_after = 0;
  // The frequencies for sequences of seq_len positions: transformers' longrope switches to the
  // long factors when a batch's largest position id + 1 passes original_max_position_embeddings.
  const std::vector<float>& for_length(int seq_len) const {
    return !long_inv_freq.empty() && seq_len > long_after ? long_inv_freq : inv_freq;
  }
};

RopeFreqs rope_freqs(const ModelConfig& c);
// cos/sin (rows, HS/2) tables for positions 0..rows-1 of sequences of seq_len positions
// (longrope's choice; 0: rows).
void rope_fill(const RopeFreqs& f, float* cos, float* sin, int rows, int seq_len = 0);

}  // namespace zt
