// block.h: one pre-norm transformer block, shared by GPT-2 and Llama:
//   mid = x + proj(attention(rope?(qkv(norm1(x)))))
//   y   = mid + fc_out(act(fc_in(norm2(mid))))
// with act = tanh-GELU (GPT-2) or SwiGLU (Llama, fc_in = [gate | up] fused). The block
// saves what its backward pass needs in BlockActs (carved from the model's activation
// arena) and uses BlockScratch (shared by all blocks) for gradients in flight. The MLP
// activation is recomputed in backward rather than saved: one cheap pass for
// N*F floats of memory per layer.
#pragma once
#include <cstdint>

#include "core/memory.h"
#include "kernels/attention.h"
#include "nn/layers.h"

namespace zt::nn {

enum class MlpKind { gelu, swiglu };

struct BlockShape {
  int C, NH, KVH, HS, F;
  NormKind norm;
  MlpKind mlp;
  bool rope;
  int qkv_dim() const { return (NH + 2 * KVH) * HS; }
  int fc_dim() const { return mlp == MlpKind::swiglu ? 2 * F : F; }
};

struct BlockActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *lse, *mid, *ln2, *ln2_mean, *ln2_rstd, *fc;
};

struct BlockScratch {
  float *act, *dfc, *dln, *datt, *dqkv;
};

struct RopeTable {
  const float* cos = nullptr;
  const float* sin = nullptr;
};

// Document packing (optional, all null = token t at position t, causal over the row):
// positions (B, T) are the position ids RoPE rotates by (the table must cover them);
// doc_start (B, T) is the first key each query may attend to (kernels/attention.h).
struct Packing {
  const int32_t* positions = nullptr;
  const int32_t* doc_start = nullptr;
};

class Block {
 public:
  BlockShape shape{};
  Norm ln1, ln2;
  Linear qkv, proj, fc_in, fc_out;

  static BlockActs carve_acts(Carver& c, const BlockShape& s, int B, int T);
  static BlockScratch carve_scratch(Carver& c, const BlockShape& s, int B, int T);

  // y (B*T, C) from x; y must not alias x. Uses s.act as a temporary.
  void forward(float* y, const float* x, const BlockActs& a, const BlockScratch& s, int B, int T, const RopeTable& rope,
               const Packing& pack = {}) const;
  // In: dres = dL/dy. Out: dres = dL/dx (updated in place); parameter grads +=.
  void backward(float* dres, const float* x, const BlockActs& a, const BlockScratch& s, int B, int T,
                const RopeTable& rope, const Packing& pack = {}) const;

 private:
  void activation_forward(float* act, const float* fc, int64_t N) const;
};

}  // namespace zt::nn
