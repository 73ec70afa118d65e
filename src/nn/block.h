// block.h: one pre-norm transformer block, shared by GPT-2 and Llama:
//   mid = x + proj(attention(rope?(qkv(norm1(x)))))
//   y   = mid + fc_out(act(fc_in(norm2(mid))))
// with act = tanh-GELU (GPT-2) or SwiGLU (Llama, fc_in = [gate | up] fused). The block
// saves what its backward pass needs in BlockActs (carved from the model's activation
// arena) and uses BlockScratch (shared by all blocks) for gradients in flight. The MLP
// activation is recomputed in backward rather than saved: one cheap pass for
// N*F floats of memory per layer.
// Tensor parallelism is applied from outside through TpRegion (a no-op without it).
#pragma once
#include <cstdint>

#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "nn/layers.h"

namespace zt::nn {

enum class MlpKind { gelu, swiglu };

struct BlockShape {
  int C, NH, KVH, HS, F;
  NormKind norm;
  MlpKind mlp;
  bool rope;
  bool qk_norm = false;  // Qwen3: RMSNorm over each q and k head (weights q_norm/k_norm, (HS)) before RoPE
  int window = 0;        // sliding-window attention (Mistral): keys t-window+1..t; 0 = none. The model
                         // turns it into Packing::doc_start (the kernel's per-query first key).
  int qkv_dim() const { return (NH + 2 * KVH) * HS; }
  int fc_dim() const { return mlp == MlpKind::swiglu ? 2 * F : F; }
};

// Views carved from the activation arena; shapes in the glossary's terms.
struct BlockActs {
  TensorView ln1;       // (N, C)
  TensorView ln1_mean;  // (N) LayerNorm only
  TensorView ln1_rstd;  // (N)
  TensorView qkv;       // (N, (NH + 2 KVH) HS)
  TensorView att;       // (N, NH HS)
  TensorView lse;       // (N, NH)
  TensorView mid;       // (N, C) residual stream after attention
  TensorView ln2, ln2_mean, ln2_rstd;
  TensorView fc;  // (N, F) or (N, 2F) for SwiGLU
  // qk_norm only (empty otherwise): q and k before their norm, one head per row, and the rstds.
  TensorView q_raw, k_raw;    // (N NH, HS), (N KVH, HS)
  TensorView q_rstd, k_rstd;  // (N NH), (N KVH)
};

struct BlockScratch {
  TensorView act;         // (N, F)
  TensorView dfc;         // (N, 2F) SwiGLU only
  TensorView dln;         // (N, C)
  TensorView datt;        // (N, NH HS)
  TensorView dqkv;        // (N, (NH + 2 KVH) HS)
  TensorView qk_a, qk_b;  // (N (NH + KVH), HS) each, qk_norm only: heads gathered from / for qkv rows
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

// Where tensor parallelism meets a block (Megatron's f / g operators): after a row-parallel
// GEMM each rank holds a partial sum that must be reduced before the residual add; before
// a column-parallel GEMM's input gradient reaches the residual stream, it must be reduced
// the same way. Declared here so nn never includes dist; src/parallel implements it. A
// block without one (the default) does nothing at these points.
class TpRegion {
 public:
  virtual ~TpRegion() = default;
  virtual void row_parallel_output(TensorView partial) = 0;      // forward, (N, C)
  virtual void column_parallel_input_grad(TensorView grad) = 0;  // backward, (N, C)
};

class Block {
 public:
  BlockShape shape{};
  Norm ln1, ln2;
  Linear qkv, proj, fc_in, fc_out;
  Norm q_norm, k_norm;  // shape.qk_norm only: RMSNorm over HS
  TpRegion* tp = nullptr;

  static BlockActs carve_acts(Carver& c, const BlockShape& s, int B, int T);
  static BlockScratch carve_scratch(Carver& c, const BlockShape& s, int B, int T);

  // y (N, C) from x (N, C); y must not alias x. Uses s.act as a temporary.
  void forward(TensorView y, TensorView x, const BlockActs& a, const BlockScratch& s, int B, int T,
               const RopeTable& rope, const Packing& pack = {}) const;
  // In: dres = dL/dy. Out: dres = dL/dx (updated in place); parameter grads +=.
  void backward(TensorView dres, TensorView x, const BlockActs& a, const BlockScratch& s, int B, int T,
                const RopeTable& rope, const Packing& pack = {}) const;

 private:
  void activation_forward(TensorView act, TensorView fc) const;
  // qk_norm: normalizes the q and k heads of qkv in place, saving their inputs and rstds.
  void qk_norm_forward(TensorView qkv, const BlockActs& a, const BlockScratch& s) const;
  // dqkv's q and k parts: from dL/d(normalized) to dL/d(raw), in place; norm weight grads +=.
  void qk_norm_backward(TensorView dqkv, const BlockActs& a, const BlockScratch& s) const;
  // out += x (the residual stream), after any tensor-parallel reduction of out.
  void residual_add(TensorView out, TensorView x) const;
};

}  // namespace zt::nn
