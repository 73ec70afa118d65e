// transformer.h: a decoder-only language model (GPT-2 or Llama) over one flat
// parameter buffer: its configuration, layout, parameters and layers, with an explicit
// forward and backward pass. It is written single-device: parallelism is applied to it
// from src/parallel through its runtime (models/model_runtime.h: the activation arena, the
// compute copies, the parameter provider, the pass in stage-able pieces), never inside it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/nf4.h"
#include "models/config.h"
#include "models/layout.h"
#include "models/model_runtime.h"
#include "models/param_provider.h"
#include "models/params.h"
#include "models/rope.h"
#include "nn/block.h"

namespace zt {

class ModelRuntime;

class Transformer {
 public:
  // cut: the part of each layer this model holds (models/layout.h); whole by default.
  // hold_params false: no flat parameter buffer (a ZeRO engine takes its shard's initial values
  // from init_values or a checkpoint; runtime().restore_flat_params() makes one when needed).
  explicit Transformer(const ModelConfig& cfg, const LayerCut& cut = {}, bool hold_params = true);
  ~Transformer();
  // The runtime keeps references into the model: it stays where it was made.
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // The device the model's buffers live on and its kernels run on (core/device.h, kernels/
  // dispatch.h). Call before plan(): it moves the parameters (values kept) and drops the
  // gradients, compute copies and arena, which plan() makes again there. The GPU runs one
  // device for now: no cut or swapped layers and no external ParamProvider. Inputs,
  // targets and positions stay host arrays: the pass copies each micro-batch's over.
  // flat_params() / flat_grads() are then device pointers.
  void set_device(DeviceKind dev);
  DeviceKind device() const { return dev_; }

  const ModelConfig& config() const { return cfg_; }
  const ModelLayout& layout() const { return layout_; }
  const ParamTable& params() const { return layout_.table; }
  // The flat fp32 parameter and gradient buffers, (num_params); empty when not held.
  TensorView flat_params() const { return flat_view(params_); }
  // LoRA (layout().frozen_base): the base model's parameters, frozen, in base_params()'s layout;
  // empty otherwise. base_params(): the table an HF folder's weights load into (the base's under
  // LoRA, else params()). A caller that writes the base calls base_changed() after.
  TensorView frozen_params() const { return flat_view(frozen_); }
  const ParamTable& base_params() const { return layout_.frozen_base ? layout_.base_table : layout_.table; }
  void base_changed() { ++frozen_version_; }
  // QLoRA (config().lora.nf4), after the base is loaded: its block linear weights become NF4
  // (models/qlora.cpp) and the fp32 base keeps the rest (base_params() shrinks to it). nf4_weight:
  // block l's Linear k (0 qkv, 1 proj, 2 fc_in, 3 fc_out), null before or without it; nf4_bytes:
  // the NF4 storage's bytes (and *params its parameters).
  void quantize_base();
  // The same from a source of the base's values (fill(begin, n, dst): flat elements [begin, begin + n)
  // of base_params()), one weight at a time: the fp32 base is never whole in memory.
  using BaseFill = std::function<void(int64_t begin, int64_t n, float* dst)>;
  void quantize_base_from(const BaseFill& fill);
  const kernels::Nf4View* nf4_weight(int l, int k) const {
    if (nf4_views_.empty() || nf4_views_[size_t(l) * 4 + size_t(k)].numel() == 0) return nullptr;
    return &nf4_views_[size_t(l) * 4 + size_t(k)];
  }
  size_t nf4_bytes(int64_t* params = nullptr) const;
  // Block l's held experts in NF4 (2 per expert, nn::Moe::experts_nf4); null without them.
  const kernels::Nf4View* nf4_experts(int l) const {
    const size_t per_layer = size_t(2 * layout_.cut.experts);
    return nf4_expert_views_.empty() ? nullptr : &nf4_expert_views_[size_t(l) * per_layer];
  }
  TensorView flat_grads() const { return flat_view(grads_); }
  int64_t num_params() const { return params().total(); }

  // GPT-2 style: N(0, 0.02), residual projections scaled by 1/sqrt(2L), norms 1, biases 0.
  void init_random(uint64_t seed);
  // LoRA: the frozen base's random initialisation (init_random's values of the model without
  // adapters); init_random does it too.
  void init_base(uint64_t seed);
  // Elements [begin, begin + n) of the frozen base as init_base draws them (QLoRA streams them).
  void init_base_values(uint64_t seed, int64_t begin, int64_t n, float* dst) const {
    init_table_values(layout_.base_table, seed, begin, n, dst);
  }
  // The values init_random(seed) puts at flat elements [begin, begin + n) (this layout, a cut's
  // slices included), computed without the rest: a ZeRO rank initialises only its shard.
  void init_values(uint64_t seed, int64_t begin, int64_t n, float* dst) const;
  // DoRA on a cut layout whose row layers hold slices of every weight row: sums their squared norms
  // over the ranks holding the other slices (the magnitudes start at the whole rows' norms), set
  // from outside; init_values is then a collective over those ranks.
  void set_row_slice_sum(std::function<void(float*, int64_t)> sum) { row_slice_sum_ = std::move(sum); }

  // Allocates gradients (training) and the activation arena for batches of B x T, with
  // `slots` micro-batches' activations kept at once (pipeline schedules; 1 otherwise).
  // Precision and recomputation: runtime().set_act_plan() first.
  void plan(int B, int T, bool training, int slots = 1);
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
  void zero_grad();

  // Training FLOPs per token: 6 * matmul params (incl. the LM head) + 12 * L * NH * HS * T
  // (PaLM / torchtitan convention; causal masking is not discounted).
  double flops_per_token(int T) const;

  // What the strategies (src/parallel) and the memory planner drive: the activation arena,
  // the compute copies, the parameter provider, the held layers and the micro-batches'
  // activations, with the pass in stage-able pieces (models/model_runtime.h).
  ModelRuntime& runtime() { return *runtime_; }
  const ModelRuntime& runtime() const { return *runtime_; }

 private:
  friend class ModelRuntime;
  friend class KvDecoder;  // inference reuses the layers one token at a time (models/decoder.h)

  // init_values over any table of this model (LoRA's base table too).
  void init_table_values(const ParamTable& table, uint64_t seed, int64_t begin, int64_t n, float* dst) const;
  // The buffer the base's layers read: the frozen base under LoRA, else the flat parameters.
  TensorView base_flat() const { return layout_.frozen_base ? frozen_params() : flat_params(); }
  static TensorView flat_view(const Buffer& b) {
    return TensorView(b.data(), DType::f32, {b.bytes() / 4 ? int64_t(b.bytes() / 4) : 0});
  }
  // Parameters in matrix multiplies (incl. the LM head) of the whole model.
  int64_t matmul_params() const;
  // For KvDecoder: the RoPE frequencies (Gemma 3's sliding layers' for them), the embedding
  // multiplier (Gemma: sqrt(hidden_size); 1 otherwise) and the embedding / LM head weights.
  const RopeFreqs& rope_for_layer(int l) const { return local_rope(l) ? rope_local_ : rope_; }
  float embed_multiplier() const;
  TensorView token_embedding() const;     // (V, C); a cut's (vocab_rows, C)
  TensorView position_embedding() const;  // (max_position, C); empty for RoPE models
  TensorView lm_head() const;             // (V, C)
  // Whether layer l is one of Gemma 3's sliding layers (its own window and RoPE table).
  bool local_layer(int l) const { return !cfg_.sliding_layers.empty() && cfg_.layer_slides(l); }
  bool local_rope(int l) const { return cfg_.rope_local_theta > 0.f && local_layer(l); }

  ModelConfig cfg_;
  ModelLayout layout_;
  RopeFreqs rope_, rope_local_;
  std::vector<nn::Block> blocks_;
  nn::Norm lnf_;
  Buffer params_, grads_;
  Buffer frozen_;                        // LoRA's base
  std::vector<kernels::Nf4Tensor> nf4_;  // QLoRA: the base's block linear weights
  MemCharge nf4_charge_;                 // their bytes, in the memory report's parameters
  std::vector<kernels::Nf4View> nf4_views_;
  // QLoRA on a mixture-of-experts model: each layer's held experts, two tensors each (nn::Moe::experts_nf4).
  std::vector<kernels::Nf4Tensor> nf4_experts_;
  std::vector<kernels::Nf4View> nf4_expert_views_;
  void quantize_experts(const BaseFill& fill, std::vector<std::pair<int64_t, int64_t>>& dropped);
  kernels::Nf4Tensor quantize_weight(const float* w, int64_t rows, int64_t cols) const;
  uint64_t frozen_version_ = 0;
  DeviceKind dev_ = DeviceKind::cpu;
  std::unique_ptr<ModelRuntime> runtime_;
  std::function<void(float*, int64_t)> row_slice_sum_;  // set_row_slice_sum
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
