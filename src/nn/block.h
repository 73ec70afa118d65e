// block.h: one transformer block, shared by GPT-2 and the Llama-shaped families:
//   mid = x + post1?(proj(attention(rope?(qk_norm?(qkv(norm1(x)))))))
//   y   = mid + post2?(fc_out(act(fc_in(norm2(mid)))))
// norm1 / norm2 are the identity without pre-norms (OLMo-2, NormKind::none); post1 / post2
// are RMSNorms on the sub-layers' outputs (OLMo-2's post_attention / post_feedforward norms).
// with act = tanh-GELU (GPT-2) or SwiGLU (Llama, fc_in = [gate | up] fused). The block
// saves what its backward pass needs in BlockActs (carved from the model's activation
// arena; under recomputation some or all of them are views of one shared set that
// backward refills) and uses BlockScratch (shared by all blocks) for gradients in flight.
// Under mixed precision the GEMM inputs (ln1, att, ln2, act) are kept in the compute
// dtype; everything else is fp32.
// Tensor parallelism is applied from outside through TpRegion (a no-op without it).
#pragma once
#include <cstdint>

#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "nn/layers.h"
#include "nn/moe.h"

namespace zt::nn {

// gelu: GPT-2's fc -> tanh-GELU; swiglu / geglu (Gemma): [gate | up] -> silu / tanh-GELU(gate) * up.
enum class MlpKind { gelu, swiglu, geglu };

struct BlockShape {
  int C, NH, KVH, HS, F;
  NormKind norm;
  MlpKind mlp;
  bool rope;
  bool qk_norm = false;  // Qwen3: RMSNorm over each q and k head (weights q_norm/k_norm, (HS)) before RoPE
  // OLMo-2: qk_norm over the whole q (NH HS) and k (KVH HS) projections instead. Under tensor
  // parallelism a rank holds some heads, so the sums of squares are reduced over the group;
  // kv_replicas ranks hold each KV head (LayerCut::kv_holders), counted once.
  bool qk_norm_full = false;
  int kv_replicas = 1;
  bool pre_norm = true;      // false (OLMo-2): ln1 / ln2 are the identity (NormKind::none)
  bool post_norm = false;    // OLMo-2: RMSNorm on attention's and the MLP's outputs before the residual add
  int window = 0;            // sliding-window attention (Mistral): keys t-window+1..t; 0 = none. The model
                             // turns it into Packing::doc_start (the kernel's per-query first key).
                             // Gemma 3's per-layer windows come in through Packing the same way.
                             // Context parallelism's ring reads it (AttnDims::window) instead.
  float attn_scale = 0.f;    // attention's score scale (kernels::AttnDims::scale); 0: HS^-1/2
  float attn_softcap = 0.f;  // Gemma 2: scores soft-capped (kernels::AttnDims::softcap); 0: none
  MoeShape moe{};            // moe.on(): the MLP is a mixture of experts (nn/moe.h; F is then 0)
  int sp = 1;                // sequence parallel: the residual stream (x, mid, y, norm statistics) holds
                             // N / sp of the N = B T rows; GEMM inputs and attention hold all N.
  int64_t rows_local(int64_t N) const { return N / sp; }
  int qkv_dim() const { return (NH + 2 * KVH) * HS; }
  bool gated() const { return mlp != MlpKind::gelu; }
  int fc_dim() const { return gated() ? 2 * F : F; }
};

// Views carved from the activation arena; shapes in the glossary's terms.
struct BlockActs {
  TensorView ln1;       // (N, C), compute dtype
  TensorView ln1_mean;  // (N) LayerNorm only
  TensorView ln1_rstd;  // (N)
  TensorView qkv;       // (N, (NH + 2 KVH) HS), after RoPE
  TensorView att;       // (N, NH HS), compute dtype
  TensorView lse;       // (N, NH)
  TensorView mid;       // (N, C) residual stream after attention
  TensorView ln2, ln2_mean, ln2_rstd;
  TensorView fc;   // (N, F) or (N, 2F) for SwiGLU
  TensorView act;  // (N, F), compute dtype: the activation function's output
  // qk_norm only (empty otherwise): q and k before their norm, one head per row, and the rstds.
  TensorView q_raw, k_raw;    // (N NH, HS), (N KVH, HS)
  TensorView q_rstd, k_rstd;  // (N NH), (N KVH); qk_norm_full: (N) each
  // post_norm only (empty otherwise): the sub-layers' outputs before their norm, and the rstds.
  TensorView attn_out, mlp_out;       // (n, C)
  TensorView post1_rstd, post2_rstd;  // (n)
  MoeActs moe;                        // shape.moe.on() only
  // Expert parallelism: this activation slot's expert side of the layer (a pipeline keeps several
  // micro-batches between forward and backward); null: the block's own.
  MoeExpertSide* ep_side = nullptr;
};

struct BlockScratch {
  TensorView act;         // (N, F) fp32: the activation (landing) and its gradient
  TensorView dfc;         // (N, 2F) SwiGLU / GeGLU only
  TensorView dln;         // (N, C)
  TensorView datt;        // (N, NH HS)
  TensorView dqkv;        // (N, (NH + 2 KVH) HS)
  TensorView dy_c;        // mixed precision: an output gradient in the compute dtype (widest GEMM)
  TensorView att32;       // bf16: the attention output back in fp32 for attention's backward
  TensorView qkv32;       // bf16: q, k, v in fp32 (attention reads fp32)
  TensorView fc32;        // bf16: fc_in's output in fp32 (the activation function reads fp32)
  TensorView y;           // full recomputation: where the rerun forward's output goes
  TensorView qk_a, qk_b;  // (N (NH + KVH), HS) each, qk_norm only: heads gathered from / for qkv rows
  TensorView dpost;       // post_norm only, (n, C): the gradient of a sub-layer's output before its norm
  TensorView qk_sums;     // qk_norm_full under tensor parallelism, (N): per-row sums reduced over the group
  TensorView full;        // sequence parallel only, (N, C) fp32: a row-parallel GEMM's partial sums
                          // before their reduce-scatter, an output gradient after its all-gather
  MoeScratch moe;         // shape.moe.on() only
};

// What a pass keeps and in which dtype (set by the model for all its blocks). Under bf16,
// qkv and fc (GEMM outputs) are kept in bf16 too, as autocast keeps them; their fp32
// originals are rounded to the kept values before use, so recomputation stays exact.
struct ActPlan {
  Precision precision = Precision::fp32;
  Recompute recompute = Recompute::none;
  int recompute_layers = 0;  // blocks [0, recompute_layers) recompute; the rest keep all
  Recompute of(int layer) const { return layer < recompute_layers ? recompute : Recompute::none; }
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

// Where tensor parallelism meets a block (Megatron's conjugate f / g operators), declared
// here so nn never includes dist; src/parallel/tensor_parallel.h implements it. A block
// without one (the default) does nothing at these points. N = B T rows; n = the rows of the
// residual stream this rank holds: N under TP, N / size under sequence parallelism (SP),
// which are rows [rank n, (rank + 1) n) of the N.
//   f (before a column-parallel GEMM): forward identity (SP: all-gather the rows), backward
//     all-reduce of the input gradient's partial sums (SP: reduce-scatter).
//   g (after a row-parallel GEMM): forward all-reduce of the partial sums (SP:
//     reduce-scatter), backward identity (SP: all-gather).
class TpRegion {
 public:
  virtual ~TpRegion() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual bool sequence_parallel() const = 0;
  // f forward: `full` (N, ...) of which this rank filled its n rows; SP gathers the others.
  virtual void column_parallel_input(TensorView full) = 0;
  // g forward: the reduced `partial` (N, C) in out (n, C); out may be partial (TP).
  virtual void row_parallel_output(TensorView out, TensorView partial) = 0;
  // f backward: the reduced `grad` (N, C) in out (n, C): out is grad (TP) or its rows (SP).
  virtual void column_parallel_input_grad(TensorView out, TensorView grad) = 0;
  // g backward: the output gradient `local` (n, C) as all N rows in full (SP); TP: full is local.
  virtual void row_parallel_output_grad(TensorView full, TensorView local) = 0;
  // The vocabulary-parallel loss's reductions over the group (in place, n floats).
  virtual void all_reduce_max(float* x, int64_t n) = 0;
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  // The first row of this rank's n rows among the N, and that view of `full`.
  int64_t row_begin(int64_t N) const { return sequence_parallel() ? rank() * (N / size()) : 0; }
  TensorView local_rows(TensorView full) const;
};

// Where context parallelism meets a block (parallel/context_parallel.h implements it; nn
// never includes dist): causal attention of this rank's rows of the sequence against the
// whole sequence, whose other rows other ranks hold. d.T is this rank's rows per batch row;
// the arguments are attention.h's (the layer's window, scale and soft-cap included). Forward and backward are
// collectives over the cp group.
class CpRegion {
 public:
  virtual ~CpRegion() = default;
  virtual void attention_forward(float* out, float* lse, const float* qkv, const kernels::AttnDims& d) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                  const kernels::AttnDims& d) = 0;
  // The whole sequence's tokens per row (P d.T): what RoPE tables that depend on the sequence's
  // length (longrope's factors) are chosen by.
  virtual int sequence_length() const = 0;
};

class Block {
 public:
  BlockShape shape{};
  Norm ln1, ln2;
  Linear qkv, proj, fc_in, fc_out;
  Norm q_norm, k_norm;  // shape.qk_norm only: RMSNorm over HS (qk_norm_full: this rank's q / k width)
  Norm post1, post2;    // shape.post_norm only: RMSNorm over C
  Moe moe;              // shape.moe.on() only: the MLP (fc_in / fc_out are then unused)
  TpRegion* tp = nullptr;
  CpRegion* cp = nullptr;         // context parallel: attention runs through it (fp32 under every precision)
  EpRegion* ep = nullptr;         // expert parallel (MoE): the experts' rows travel through it (nn/moe.h)
  mutable MoeExpertSide ep_side;  // with ep and no slot's own (BlockActs::ep_side): kept from forward to backward
  // Whether a strategy attached a region (the above) to this block.
  bool has_regions() const { return tp || cp || ep; }
  // The group holding the other slices of the row layers' weight rows (the TP region; null: whole
  // rows), which the adapters' bindings hand to LinearLora::row_group.
  TpRegion* row_slices() const { return tp; }
  Precision precision = Precision::fp32;
  DeviceKind dev = DeviceKind::cpu;  // where its views live and its kernels run

  // A block's saved activations under recomputation mode r: none carves them all; full
  // returns `shared` (one set for every block, carved with r = none); selective carves
  // the GEMM outputs and norm statistics and takes the rest from `shared`.
  static BlockActs carve_acts(Carver& c, const BlockShape& s, int B, int T, Precision p, Recompute r = Recompute::none,
                              const BlockActs* shared = nullptr);
  // The one set recomputed blocks refill: everything for full, the refilled part for selective.
  static BlockActs carve_shared(Carver& c, const BlockShape& s, int B, int T, Precision p, Recompute r);
  static BlockScratch carve_scratch(Carver& c, const BlockShape& s, int B, int T, Precision p,
                                    bool full_recompute = false);

  // y (N, C) from x (N, C); y must not alias x. Uses scratch as landing buffers.
  void forward(TensorView y, TensorView x, const BlockActs& a, const BlockScratch& s, int B, int T,
               const RopeTable& rope, const Packing& pack = {}) const;
  // In: dres = dL/dy. Out: dres = dL/dx (updated in place); parameter grads +=. r says what
  // the forward kept (carve_acts); the rest is recomputed first, bit-identically.
  void backward(TensorView dres, TensorView x, const BlockActs& a, const BlockScratch& s, int B, int T,
                const RopeTable& rope, const Packing& pack = {}, Recompute r = Recompute::none) const;

 private:
  void norm_forward(const Norm& n, TensorView out, TensorView mean, TensorView rstd, TensorView x,
                    TensorView land) const;
  void attention_forward(const BlockActs& a, TensorView qkv32, const BlockScratch& s,
                         const kernels::AttnDims& ad) const;
  void attention_output(const BlockActs& a, TensorView x, const BlockScratch& s) const;
  void activation_forward(const BlockActs& a, TensorView fc32, const BlockScratch& s) const;
  // The dense MLP's backward from its output gradient dy: dL/d(ln2 output) into s.dln.
  void dense_mlp_backward(TensorView dy, const BlockActs& a, TensorView fc32, const BlockScratch& s) const;
  void keep(TensorView kept, TensorView f32) const;
  TensorView unkeep(TensorView kept, TensorView scratch) const;
  // dy in the GEMMs' dtype: dy itself (fp32), else a copy in s.dy_c.
  TensorView compute_copy(TensorView dy, const BlockScratch& s) const;
  // Makes a GEMM input computed in fp32 at `land` final in dst (see lower in block.cpp).
  void lower(TensorView dst, TensorView land) const;
  // qk_norm: normalizes the q and k heads of qkv in place, saving their inputs and rstds.
  void qk_norm_forward(TensorView qkv, const BlockActs& a, const BlockScratch& s) const;
  // dqkv's q and k parts: from dL/d(normalized) to dL/d(raw), in place; norm weight grads +=.
  void qk_norm_backward(TensorView dqkv, const BlockActs& a, const BlockScratch& s) const;
  // qk_norm_full under tensor parallelism: an RMSNorm over a width the group holds in parts
  // (block_norm.cpp). replicas: ranks holding the same part.
  void sharded_norm_forward(const Norm& n, TensorView out, TensorView rstd, TensorView x, int replicas,
                            const BlockScratch& s) const;
  void sharded_norm_backward(const Norm& n, TensorView dx, TensorView dout, TensorView x, TensorView rstd, int replicas,
                             const BlockScratch& s) const;
  // A sub-layer's output gradient: dres itself, or (post_norm) through the output norm into s.dpost.
  TensorView post_norm_backward(const Norm& n, TensorView dres, TensorView out, TensorView rstd,
                                const BlockScratch& s) const;
  // out += x (the residual stream), after any tensor-parallel reduction of out.
  void residual_add(TensorView out, TensorView x) const;
  // Where a row-parallel GEMM writes its (N, C) output before g reduces it into out (n, C).
  TensorView row_out(TensorView out, const BlockScratch& s) const;
  // g backward: the output gradient dres (n, C) as N rows (itself without SP).
  TensorView full_grad(TensorView dres, const BlockScratch& s) const;
  // f backward: the (N, C) input gradient reduced into this rank's rows (a view of it).
  TensorView reduce_input_grad(TensorView grad) const;
  // The rows of a (N, ...) GEMM input this rank's norm fills (all of it without SP).
  TensorView mine(TensorView full) const { return tp ? tp->local_rows(full) : full; }
};

}  // namespace zt::nn
