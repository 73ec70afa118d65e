// layout.h: where each layer's parameters sit in the flat buffer, per architecture.
// gpt2.cpp and llama.cpp fill a ParamTable with HF names and return these slots; the
// Transformer binds its layers to them. Offsets are in floats; -1 means "absent".
#pragma once
#include <cstdint>
#include <vector>

#include "models/config.h"
#include "models/params.h"
#include "nn/block.h"

namespace zt {

struct LinearSlot {
  int64_t w = -1, b = -1;
  int in = 0, out = 0;
  bool w_in_out = false;
};
struct NormSlot {
  int64_t w = -1, b = -1;
};
struct BlockSlots {
  NormSlot ln1, ln2;
  LinearSlot qkv, proj, fc_in, fc_out;
};
struct ModelSlots {
  int64_t wte = -1, wpe = -1;
  int64_t lm_head = -1;  // -1: tied to wte
  NormSlot lnf;
  std::vector<BlockSlots> blocks;
  nn::BlockShape shape{};
};

ModelSlots gpt2_layout(const ModelConfig& c, ParamTable& t);
ModelSlots llama_layout(const ModelConfig& c, ParamTable& t);

}  // namespace zt
