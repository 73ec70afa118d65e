// model_runtime.h: the part of a Transformer that the strategies drive (src/parallel, the
// memory planner): the activation arena and its micro-batch slots, the weights' compute copies
// (mixed precision), where the pass takes parameters and gradients from (a ParamProvider), the
// layers a pipeline stage holds, and the pass itself in stage-able pieces. The Transformer
// (models/transformer.h) is the single-device model: configuration, layout, parameters and
// layers; it owns one runtime (Transformer::runtime()).
//
// The pieces run over an activation slot (one per micro-batch in flight: plan(..., slots)):
// embed, blocks [a, b), head + loss (+ its backward), blocks [a, b) backward, embed backward.
// forward_backward() is their composition on slot 0, so a pipeline stage is a range of units
// run by the same code.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "models/config.h"
#include "models/layout.h"
#include "models/param_provider.h"
#include "models/rope.h"
#include "nn/block.h"
#include "nn/embedding_head.h"

namespace zt {

class Transformer;

// What the mixture-of-experts routers did over the passes since ModelRuntime::take_moe_stats()
// (models/moe_loss.cpp): the auxiliary losses (unweighted, summed over the passes) and each
// layer's routed assignments per expert.
struct MoeStats {
  int64_t passes = 0;
  double aux_loss = 0;        // the load-balancing loss, E sum_e f_e P_e over all layers' tokens (Mixtral's)
  double z_loss = 0;          // mean over all layers' tokens of logsumexp(router logits)^2
  std::vector<int64_t> load;  // (L, E): assignments each layer's router sent to each expert
  int64_t dropped = 0;        // assignments dropped by the capacity (--moe_capacity_factor)
};

class ModelRuntime {
 public:
  explicit ModelRuntime(Transformer& model);
  ModelRuntime(const ModelRuntime&) = delete;
  ModelRuntime& operator=(const ModelRuntime&) = delete;

  // Layers a strategy swaps in (src/parallel): the embedding and the LM head with its loss;
  // null: the single-device ones. They must outlive their use.
  void set_embedding(const nn::Embedding* e) { embedding_ = e; }
  void set_lm_head(const nn::LmHeadLoss* h) { lm_head_ = h; }
  // The model's blocks, for a strategy that attaches its regions to them (nn/block.h); binding
  // them to each pass's weights leaves the regions as they are.
  std::vector<nn::Block>& blocks() { return blocks_; }
  // Each row the pass runs is part of a sequence of `tokens` tokens (0: rows are whole
  // sequences): the caller gives every row's global positions (B, T) as `positions` (position
  // embedding / RoPE; not a packing), the blocks' attention regions cover the whole sequence, and
  // RoPE tables that depend on the sequence's length (longrope) follow it.
  void set_sequence_length(int tokens);
  // Whether a strategy changed any of the above (the GPU runs one plain model for now).
  bool layers_swapped() const;

  // Mixed precision and activation recomputation (nn::ActPlan); takes effect at the next
  // plan(). recompute_layers is clamped to the layer count by the caller's validation.
  void set_act_plan(const nn::ActPlan& p);
  const nn::ActPlan& act_plan() const { return act_plan_; }
  // See Transformer::plan.
  void plan(int B, int T, bool training, int slots = 1);
  // A pipeline stage runs only some blocks: per layer, whether its activations (and the
  // residual streams entering and leaving it) are carved at the next plan(); empty = all.
  void set_held_layers(std::vector<char> held);
  // When set, every later head_forward_backward writes each token's loss into out (B*T; 0
  // where the target is ignored): the per-channel losses (observe/channel_losses.h). null: off.
  void set_token_losses(double* out) { token_losses_ = out; }
  double* token_losses() const { return token_losses_; }
  // The same for each token's rank among the vocabulary (kernels::LmHeadDims::token_rank: CPU,
  // whole-vocabulary head): the probability probes (observe/task_eval.h). null: off.
  void set_token_ranks(int64_t* out) { token_ranks_ = out; }
  // Sophia's curvature pass: nonzero makes every LM head pass draw its targets from the model's
  // own softmax (kernels::LmHeadDims::sample_seed), each pass with its own stream; 0 turns it off.
  void set_sampled_targets(uint64_t seed) {
    sample_seed_ = seed;
    sample_passes_ = 0;
  }

  // LoRA's dropout masks derive from this (the trainer's: its seed, the rank and the step), the
  // training passes since it was set, the layer and the Linear.
  void set_dropout_seed(uint64_t seed) {
    dropout_seed_ = seed;
    dropout_passes_ = 0;
  }

  // Where the pass takes parameters and gradients from; null = the model's flat buffers.
  // The provider must outlive its use.
  void set_provider(ParamProvider* p) { provider_ = p; }
  // For sharded training: frees the model's flat parameter and gradient buffers (a provider
  // holds the state now) and stops plan() from allocating gradients. restore_flat_params()
  // allocates the parameters again (zeros) so a caller can gather them for export.
  void drop_flat_state();
  void restore_flat_params();
  // Allocates the flat gradient buffer now (plan() would), for callers that need it first.
  void ensure_grads();
  // For a provider that keeps the gradients itself (a pipeline stage's own units): frees the
  // flat gradient buffer and stops plan() from allocating it; the parameters stay.
  void drop_flat_grads();

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
  TensorView residual_grad() const { return scratch_views_.dres; }
  // The pieces composed on slot 0 (Transformer::forward_backward / forward_loss).
  double forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale, int64_t* count,
                          const int32_t* positions);
  double forward_loss(const int32_t* inputs, const int32_t* targets, int64_t* count, const int32_t* positions);

  // Bytes of the activation arena and temporaries planned for (B, T), `slots` and an
  // ActPlan; *compute_copy gets the bytes of the weights' compute copy (mixed precision).
  // cut: the part of each layer the model holds (its local shapes and vocabulary rows); held: a
  // pipeline stage's blocks (set_held_layers), null = all.
  // The routers' statistics since the last call (empty when the model has no experts), and reset.
  MoeStats take_moe_stats();
  // Pipeline parallelism with experts (parallel/pipeline.cpp): the auxiliary losses need every
  // layer's routing. A stage's chunk receives with its input activations the routing totals of the
  // layers before it (set_moe_incoming; null: none, the first chunk) and sends on the totals through
  // its own layers (moe_totals: moe_totals_size() doubles); the last chunk's losses use them. Their
  // gradients, the same at every router (dprob (E), z_grad: E + 1 floats), travel back with the
  // residual gradient (moe_loss_grads: what the slot's blocks' backward reads).
  int moe_totals_size() const { return cfg_.moe.on() ? 2 * cfg_.moe.num_experts + 2 : 0; }
  void set_moe_incoming(int slot, const double* totals);
  void moe_totals(int slot, int first, int last, double* out) const;
  float* moe_loss_grads(int slot);
  // Context parallelism: a micro-batch's rows are spread over the group, so the auxiliary losses sum
  // their routing totals (and token counts) over it first: f all-reduces n doubles (a collective).
  void set_moe_reduce(std::function<void(double*, int)> f) { moe_reduce_ = std::move(f); }

  static void planned_bytes(const ModelConfig& cfg, int B, int T, size_t* activations, size_t* temporary, int slots = 1,
                            const nn::ActPlan& plan = {}, size_t* compute_copy = nullptr, const LayerCut& cut = {},
                            const std::vector<char>* held = nullptr);

 private:
  friend class Transformer;
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
    nn::LoraScratch lora;                       // LoRA's temporaries (empty without adapters)
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
  // The model moved to another device (Transformer::set_device): everything made for the old
  // one is dropped, and the layers bound again.
  void reset_for_device();
  // Unit u's weights in the compute dtype (mixed precision), made at its first forward
  // acquire of each pass from the fp32 view P; the fp32 view itself otherwise.
  TensorView compute_view(int u, TensorView P);
  void bind_layers();
  // Binds block l's layers (or the final norm) to a unit's views; grads may be empty.
  void bind_block(int l, TensorView params, TensorView grads, TensorView compute = {});
  // The base's layers of block l bound to views starting at flat offset `base`; LoRA's adapters
  // bound to the unit's views (the frozen base then binds the frozen buffer).
  void bind_base_block(int l, TensorView params, TensorView grads, TensorView compute, int64_t base);
  void bind_adapters(int l, TensorView params, TensorView grads, TensorView compute);
  // The routed experts' adapters (P, G: the held experts' blocks, G empty without gradients).
  void bind_expert_adapters(nn::Block& b, const ExpertAdapters& ex, TensorView P, TensorView G, float dropout,
                            uint64_t seed);
  // LoRA: the frozen base in the compute dtype, converted once per change of the base (the
  // fp32 view itself under fp32).
  TensorView frozen_compute();
  // QLoRA on a mixture of experts: one expert's weights dequantized (nn::Moe::nf4_scratch), shared by
  // every layer (the layers run one at a time).
  TensorView moe_nf4_scratch(DType t);
  void bind_head(TensorView params, TensorView grads);
  ParamProvider& provider() { return provider_ ? *provider_ : flat_; }
  TensorView lm_head_slice(TensorView unit_view, int unit) const;
  nn::Packing prepare_packing(const int32_t* positions, SlotInput* in);
  // A RoPE table covering positions up to max_pos in `in` (packed rows, context parallel ranks).
  void extend_rope(int32_t max_pos, SlotInput* in);
  // Gemma 3: pack_local from pack and the window, for the layers that slide.
  void prepare_local(SlotInput* in);
  // The packing and RoPE table block l of a slot runs with.
  const nn::Packing& pack_of(const SlotInput& in, int l) const;
  const nn::RopeTable& rope_of(const SlotInput& in, int l) const;
  // Scales the embedding's output (Gemma), or its gradient, by the model's embedding multiplier.
  void scale_embedding(TensorView x) const;
  // The RoPE tables (rows of HS/2 cos, then as many sin) computed on the host, into cos/sin
  // on the model's device. longrope chooses its factors by the planned row length T, whatever
  // the rows filled.
  void fill_rope(const RopeFreqs& f, float* cos, float* sin, int rows);
  // Copies the micro-batch's host arrays to the device (GPU only): tokens, positions, doc_start.
  void upload_slot(SlotInput* in, const int32_t* inputs);
  DeviceKind dev() const;
  const nn::Embedding& embedding_layer() const { return embedding_ ? *embedding_ : single_device_embedding_; }
  const nn::LmHeadLoss& lm_head_layer() const { return lm_head_ ? *lm_head_ : single_device_lm_head_; }
  nn::EmbeddingPass embedding_pass(const SlotInput& in) const;
  // Mixture of experts: the auxiliary losses of a slot's pass, weighted by its counted tokens (what
  // head_forward_backward adds to the loss sum), and their gradients at the routers for backward
  // (moe_grad_) scaled like the LM head's (models/moe_loss.cpp).
  double moe_losses(int slot, float grad_scale, int64_t count, bool backward);
  // A training pass's per-layer loads and dropped assignments into moe_stats_.
  void add_moe_layer_stats(int first, int last, const SlotActs& a);

  Transformer& model_;
  // The model's, by reference (the runtime binds its layers to each unit's views).
  const ModelConfig& cfg_;
  const ModelLayout& layout_;
  std::vector<nn::Block>& blocks_;
  nn::Norm& lnf_;
  nn::ActPlan act_plan_;
  Buffer acts_, scratch_;
  // Mixed precision: the weights' compute copy (bf16, or fp32 rounded to fp16), per unit
  // at the unit's offsets, and the pass in which each unit was last converted.
  Buffer compute_params_;
  Buffer frozen_compute_;  // LoRA: the frozen base's compute copy
  Buffer moe_nf4_scratch_;
  nn::MoeLoraScratch moe_lora_scratch_;  // the routed experts' adapters' temporaries (sized per call)
  uint64_t frozen_converted_ = ~uint64_t(0);
  uint64_t dropout_seed_ = 0x5EEDu;  // set_dropout_seed
  uint64_t dropout_passes_ = 0;      // training passes since it
  std::vector<uint64_t> converted_in_pass_;
  uint64_t pass_ = 0;
  FlatParamProvider flat_;
  ParamProvider* provider_ = nullptr;
  nn::Embedding single_device_embedding_;
  nn::LmHeadLoss single_device_lm_head_;
  const nn::Embedding* embedding_ = nullptr;  // set_embedding; null: single_device_embedding_
  const nn::LmHeadLoss* lm_head_ = nullptr;   // set_lm_head; null: single_device_lm_head_
  int sequence_length_ = 0;                   // set_sequence_length
  bool external_state_ = false, external_grads_ = false;
  int B_ = 0, T_ = 0;
  bool training_ = false, backward_ = false;
  double* token_losses_ = nullptr;                // set_token_losses
  int64_t* token_ranks_ = nullptr;                // set_token_ranks
  uint64_t sample_seed_ = 0, sample_passes_ = 0;  // set_sampled_targets
  std::vector<SlotActs> slots_;
  std::vector<char> held_layers_;
  std::vector<SlotInput> inputs_;
  Scratch scratch_views_;
  // Packed batches: a RoPE table for positions >= T (rows that start mid-document), grown
  // on demand up to the context.
  Buffer rope_ext_, rope_local_ext_;
  int rope_ext_rows_ = 0;
  Buffer targets_;  // on a GPU: the head's targets there (N)
  // Per activation slot: d loss / d p at every router (E; the load-balancing loss) and the z-loss's
  // gradient scale (E + 1), from the slot's head until its blocks' backward; the routing totals of
  // the layers before the slot's chunk (pipeline: received, 2 E + 2) and that chunk's first layer.
  std::vector<std::vector<float>> moe_grad_;
  std::vector<std::vector<double>> moe_in_;
  std::vector<int> moe_first_;
  std::function<void(double*, int)> moe_reduce_;
  std::vector<std::unique_ptr<nn::MoeExpertSide>> ep_sides_;  // per slot and layer when slots > 1
  MoeStats moe_stats_;
};

}  // namespace zt
