// transformer.h: a decoder-only language model (GPT-2 or Llama) over one flat
// parameter buffer, with an explicit forward and backward pass and one planned
// activation arena. It is written single-device: parallelism is applied to it from
// src/parallel (a ParamProvider, later a TpRegion and pipeline stages), never inside it.
//
// The pass comes in stage-able pieces, each over an activation slot (one per micro-batch
// in flight: plan(..., slots)): embed, blocks [a, b), head + loss (+ its backward),
// blocks [a, b) backward, embed backward. forward_backward() is their composition on slot
// 0, so a pipeline stage is a range of units run by the same code.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "models/config.h"
#include "models/layout.h"
#include "models/param_provider.h"
#include "models/params.h"
#include "models/rope.h"
#include "nn/block.h"

namespace zt {

class Transformer {
 public:
  // tp: this rank's tensor-parallel cut (models/layout.h); the identity plan is one device.
  // hold_params false: no flat parameter buffer (a ZeRO engine takes its shard's initial values
  // from init_values or a checkpoint; restore_flat_params() makes one when needed).
  explicit Transformer(const ModelConfig& cfg, const TpPlan& tp = {}, bool hold_params = true);
  // Tensor parallelism: where the pass meets the TP group (the blocks' f / g operators, the
  // vocabulary-parallel embedding and loss). Required when the plan has more than one rank;
  // must outlive its use.
  void set_tp_region(nn::TpRegion* r);
  const TpPlan& tp_plan() const { return layout_.tp; }
  // Context parallelism (parallel/context_parallel.h): the pass runs on this rank's rows of each
  // sequence (plan(B, T / cp)), attention through the region, and the caller gives the rows'
  // global positions (B, T / cp) as `positions` (position embedding / RoPE; not a packing: the
  // region's attention is causal over the whole sequence). Must outlive its use.
  void set_cp_region(nn::CpRegion* r);

  // The device the model's buffers live on and its kernels run on (core/device.h, kernels/
  // dispatch.h). Call before plan(): it moves the parameters (values kept) and drops the
  // gradients, compute copies and arena, which plan() makes again there. The GPU runs one
  // device for now: no tensor / context parallelism and no external ParamProvider. Inputs,
  // targets and positions stay host arrays: the pass copies each micro-batch's over.
  // flat_params() / flat_grads() are then device pointers.
  void set_device(DeviceKind dev);
  DeviceKind device() const { return dev_; }

  const ModelConfig& config() const { return cfg_; }
  const ModelLayout& layout() const { return layout_; }
  const ParamTable& params() const { return layout_.table; }
  const std::vector<Unit>& units() const { return layout_.units; }
  // The flat fp32 parameter and gradient buffers, (num_params); empty when not held.
  TensorView flat_params() const { return flat_view(params_); }
  TensorView flat_grads() const { return flat_view(grads_); }
  int64_t num_params() const { return params().total(); }

  // GPT-2 style: N(0, 0.02), residual projections scaled by 1/sqrt(2L), norms 1, biases 0.
  void init_random(uint64_t seed);
  // The values init_random(seed) puts at flat elements [begin, begin + n) (this rank's layout, TP
  // slices included), computed without the rest: a ZeRO rank initialises only its shard.
  void init_values(uint64_t seed, int64_t begin, int64_t n, float* dst) const;

  // Mixed precision and activation recomputation (nn::ActPlan); takes effect at the next
  // plan(). recompute_layers is clamped to the layer count by the caller's validation.
  void set_act_plan(const nn::ActPlan& p);
  const nn::ActPlan& act_plan() const { return act_plan_; }
  // Allocates gradients (training) and the activation arena for batches of B x T, with
  // `slots` micro-batches' activations kept at once (pipeline schedules; 1 otherwise).
  void plan(int B, int T, bool training, int slots = 1);
  // A pipeline stage runs only some blocks: per layer, whether its activations (and the
  // residual streams entering and leaving it) are carved at the next plan(); empty = all.
  void set_held_layers(std::vector<char> held);
  // One micro-batch: forward, loss and (training) backward; parameter gradients
  // accumulate. inputs/targets are (B, T). grad_scale scales d(sum of token losses);
  // returns the sum of token losses and sets *count to the number of counted tokens.
  // positions (B, T), optional, packs several documents into a row the way Hugging
  // Face's position_ids do (DataCollatorWithFlattening): along a row each id is the
  // previous plus 1, or 0 where a new document starts (a row may begin mid-document at
  // any id), all < the model's context. Queries then attend only within their own
  // document, and the position embedding / RoPE use the ids. null means 0..T-1 in every
  // row (one sequence per row, the unchanged fast path). Bad ids throw zt::Error.
  double forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale, int64_t* count,
                          const int32_t* positions = nullptr);
  double forward_loss(const int32_t* inputs, const int32_t* targets, int64_t* count,
                      const int32_t* positions = nullptr);
  // When set, every later head_forward_backward writes each token's loss into out (B*T; 0
  // where the target is ignored): the per-channel losses (observe/channel_losses.h). null: off.
  void set_token_losses(double* out) { token_losses_ = out; }
  void zero_grad();

  // ---- The pieces (pipeline stages run ranges of them). The ParamProvider's call order
  // is the order they are called in; begin_pass() starts it. inputs / positions must stay
  // valid until the slot's embed_backward (or its forward, when not training).
  void begin_pass(bool backward);
  void embed_forward(int slot, const int32_t* inputs, const int32_t* positions = nullptr);
  // What embed_forward records about a slot's micro-batch (its tokens, packing and RoPE
  // table), for a pipeline stage that starts after the embedding.
  void begin_slot(int slot, const int32_t* inputs, const int32_t* positions = nullptr);
  void blocks_forward(int slot, int first, int last);  // blocks [first, last)
  // Final norm, LM head and loss; with backward, their backward too, leaving dL/d(stream
  // after the last block) in residual_grad().
  double head_forward_backward(int slot, const int32_t* targets, float grad_scale, int64_t* count, bool backward);
  void blocks_backward(int slot, int first, int last);  // blocks [first, last), last first
  void embed_backward(int slot);
  // A pipeline stage holding the tied LM head but not the embedding: the head's share of the
  // embedding unit's gradients is complete (embed_backward reports the unit otherwise).
  void lm_head_grads_done();
  // The acquires the pieces make, appended in their call order: embed_forward (embed),
  // blocks_forward(first, last), head_forward_backward (head: the head, then the embedding again
  // when the LM head is tied); blocks_backward(first, last). forward_backward is both over every
  // block. A ZeRO-3 provider gathers and prefetches by them.
  void forward_acquires(int first, int last, bool embed, bool head, AcquireOrder* out) const;
  void backward_acquires(int first, int last, AcquireOrder* out) const;
  // The residual stream entering block l of a slot (l = L: leaving the last block), (N, C):
  // a pipeline stage writes the activations it receives here.
  TensorView residual(int slot, int l) const { return slots_[slot].res[l]; }
  // dL/d(residual stream) at the current point of backward, (N, C).
  TensorView residual_grad() const { return sc_.dres; }

  // Parameters in matrix multiplies (incl. the LM head), and training FLOPs per token:
  // 6 * matmul params + 12 * L * NH * HS * T (PaLM / torchtitan convention; causal
  // masking is not discounted).
  int64_t matmul_params() const;
  double flops_per_token(int T) const;
  // Read access for inference paths (KvDecoder) that reuse the layers one token at a time.
  const std::vector<nn::Block>& blocks() const { return blocks_; }
  const nn::Norm& final_norm() const { return lnf_; }
  const RopeFreqs& rope() const { return rope_; }  // RoPE frequencies (models/rope.h)
  // Gemma 3's sliding layers' frequencies (rope_local_base_freq); rope() for every other model.
  const RopeFreqs& rope_for_layer(int l) const { return local_rope(l) ? rope_local_ : rope_; }
  // Gemma: the factor the token embeddings are multiplied by (sqrt(hidden_size)); 1 otherwise.
  float embed_multiplier() const;
  TensorView token_embedding() const;     // (V, C); this rank's (vocab_local, C) under TP
  TensorView position_embedding() const;  // (max_position, C); empty for RoPE models
  TensorView lm_head() const;             // (V, C)

  // Where the pass takes parameters and gradients from; null = the model's flat buffers.
  // The provider must outlive its use.
  void set_provider(ParamProvider* p) { provider_ = p; }
  // For sharded training: frees the flat parameter and gradient buffers (a provider holds
  // the state now) and stops plan() from allocating gradients. restore_flat_params()
  // allocates the parameters again (zeros) so a caller can gather them for export.
  void drop_flat_state();
  void restore_flat_params();
  // Allocates the flat gradient buffer now (plan() would), for callers that need it first.
  void ensure_grads();
  // For a provider that keeps the gradients itself (a pipeline stage's own units): frees the
  // flat gradient buffer and stops plan() from allocating it; the parameters stay.
  void drop_flat_grads();

  // Bytes of the activation arena and temporaries planned for (B, T), `slots` and an
  // ActPlan; *compute_copy gets the bytes of the weights' compute copy (mixed precision).
  // tp: a tensor-parallel rank's slices (its local shapes and vocabulary rows); held: a pipeline
  // stage's blocks (set_held_layers), null = all.
  static void planned_bytes(const ModelConfig& cfg, int B, int T, size_t* activations, size_t* temporary, int slots = 1,
                            const nn::ActPlan& plan = {}, size_t* compute_copy = nullptr, const TpPlan& tp = {},
                            const std::vector<char>* held = nullptr);

 private:
  struct SlotActs {
    std::vector<TensorView> res;  // L+1 residual-stream tensors (N, C)
    std::vector<nn::BlockActs> blocks;
    TensorView lnf_out, lnf_mean, lnf_rstd;
  };
  struct Scratch {
    nn::BlockScratch block{};
    nn::BlockActs shared{};  // what recomputed blocks refill (empty without recomputation)
    TensorView dres, dlnf, logits, dlogits_c, rope_cos, rope_sin;
    TensorView rope_local_cos, rope_local_sin;  // Gemma 3's sliding layers' table (empty otherwise)
    int64_t lm_chunk = 0;
  };
  // What a slot's micro-batch brought: its tokens and packing (kept for its backward).
  struct SlotInput {
    const int32_t* inputs = nullptr;
    nn::Packing pack;
    nn::RopeTable rope;
    std::vector<int32_t> doc_start;
    // Gemma 3's sliding layers: their window's bound on top of the packing, and their RoPE table.
    nn::Packing pack_local;
    nn::RopeTable rope_local;
    std::vector<int32_t> doc_start_local;
    Buffer ids;  // on a GPU: the micro-batch's tokens, positions and doc_start there, (3, N)
  };
  static void carve(Carver& acts, Carver& scratch, const ModelConfig& cfg, const nn::BlockShape& shape, int V, int B,
                    int T, int slots, const nn::ActPlan& plan, std::vector<SlotActs>* sa, Scratch* sc,
                    const std::vector<char>* held = nullptr);
  // Unit u's weights in the compute dtype (mixed precision), made at its first forward
  // acquire of each pass from the fp32 view P; the fp32 view itself otherwise.
  TensorView compute_view(int u, TensorView P);
  static TensorView flat_view(const Buffer& b) {
    return TensorView(b.data(), DType::f32, {b.bytes() / 4 ? int64_t(b.bytes() / 4) : 0});
  }
  void bind_layers();
  nn::Packing prepare_packing(const int32_t* positions, SlotInput* in);
  // A RoPE table covering positions up to max_pos in `in` (packed rows, context parallel ranks).
  void extend_rope(int32_t max_pos, SlotInput* in);
  // Gemma 3: pack_local from pack and the window, for the layers that slide.
  void prepare_local(SlotInput* in);
  // Whether layer l is one of Gemma 3's sliding layers (its own window and RoPE table).
  bool local_layer(int l) const { return !cfg_.sliding_layers.empty() && cfg_.layer_slides(l); }
  bool local_rope(int l) const { return cfg_.rope_local_theta > 0.f && local_layer(l); }
  // The packing and RoPE table block l of a slot runs with.
  const nn::Packing& pack_of(const SlotInput& in, int l) const { return local_layer(l) ? in.pack_local : in.pack; }
  const nn::RopeTable& rope_of(const SlotInput& in, int l) const { return local_rope(l) ? in.rope_local : in.rope; }
  // Scales the embedding's output (Gemma), or its gradient, by embed_multiplier().
  void scale_embedding(TensorView x) const;
  // Binds block l's layers (or the final norm) to a unit's views; grads may be empty.
  void bind_block(int l, TensorView params, TensorView grads, TensorView compute = {});
  void bind_head(TensorView params, TensorView grads);
  ParamProvider& provider() { return provider_ ? *provider_ : flat_; }
  TensorView lm_head_slice(TensorView unit_view, int unit) const;

  ModelConfig cfg_;
  ModelLayout layout_;
  RopeFreqs rope_, rope_local_;
  std::vector<nn::Block> blocks_;
  nn::Norm lnf_;
  Buffer params_, grads_, acts_, scratch_;
  nn::ActPlan act_plan_;
  // Mixed precision: the weights' compute copy (bf16, or fp32 rounded to fp16), per unit
  // at the unit's offsets, and the pass in which each unit was last converted.
  Buffer compute_params_;
  std::vector<uint64_t> converted_in_pass_;
  uint64_t pass_ = 0;
  FlatParamProvider flat_;
  ParamProvider* provider_ = nullptr;
  nn::TpRegion* tp_ = nullptr;
  nn::CpRegion* cp_ = nullptr;
  bool external_state_ = false, external_grads_ = false;
  int B_ = 0, T_ = 0;
  bool training_ = false, backward_ = false;
  double* token_losses_ = nullptr;  // set_token_losses
  std::vector<SlotActs> slots_;
  std::vector<char> held_layers_;
  std::vector<SlotInput> inputs_;
  Scratch sc_;
  // Packed batches: a RoPE table for positions >= T (rows that start mid-document), grown
  // on demand up to the context.
  Buffer rope_ext_, rope_local_ext_;
  int rope_ext_rows_ = 0;
  DeviceKind dev_ = DeviceKind::cpu;
  Buffer targets_;  // on a GPU: the head's targets there (N)
  // The RoPE tables (rows of HS/2 cos, then as many sin) computed on the host, into cos/sin
  // on the model's device.
  // longrope chooses its factors by the planned row length T, whatever the rows filled.
  void fill_rope(const RopeFreqs& f, float* cos, float* sin, int rows);
  // Copies the micro-batch's host arrays to the device (GPU only): tokens, positions, doc_start.
  void upload_slot(SlotInput* in, const int32_t* inputs);
};

// The model's random initialisation as a parameter source (models/param_provider.h).
class RandomParams final : public ParamSource {
 public:
  RandomParams(const Transformer& model, uint64_t seed) : model_(model), seed_(seed) {}
  void read(int64_t begin, int64_t n, float* dst) const override { model_.init_values(seed_, begin, n, dst); }

 private:
  const Transformer& model_;
  uint64_t seed_;
};

}  // namespace zt
