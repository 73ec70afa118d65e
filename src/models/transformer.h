// transformer.h: a decoder-only language model (GPT-2 or Llama) over one flat
// parameter buffer, with an explicit forward and backward pass and one planned
// activation arena. It is written single-device: parallelism (later) is applied to it
// from src/parallel, never inside it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.h"
#include "models/config.h"
#include "models/layout.h"
#include "models/param_provider.h"
#include "models/params.h"
#include "nn/block.h"

namespace zt {

class Transformer {
 public:
  explicit Transformer(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& params() const { return table_; }
  float* param_data() const { return params_.as<float>(); }
  float* grad_data() const { return grads_.as<float>(); }
  int64_t num_params() const { return table_.total(); }

  // GPT-2 style: N(0, 0.02), residual projections scaled by 1/sqrt(2L), norms 1, biases 0.
  void init_random(uint64_t seed);
  // Loads model.safetensors (HF names; F32/BF16/F16); checks every name and shape.
  void load_safetensors(const std::string& path);
  // Writes config.json + model.safetensors (dtype "F32" or "BF16") into folder.
  void save_hf(const std::string& folder, const std::string& dtype) const;

  // Allocates gradients (training) and the activation arena for batches of B x T.
  void plan(int B, int T, bool training);
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

  // Parameters in matrix multiplies (incl. the LM head), and training FLOPs per token:
  // 6 * matmul params + 12 * L * NH * HS * T (PaLM / torchtitan convention; causal
  // masking is not discounted).
  int64_t matmul_params() const;
  double flops_per_token(int T) const;
  // Read access for inference paths (KvDecoder) that reuse the layers one token at a time.
  const std::vector<nn::Block>& blocks() const { return blocks_; }
  const nn::Norm& final_norm() const { return lnf_; }
  const float* token_embedding() const { return params_.as<float>() + slots_.wte; }
  const float* position_embedding() const { return slots_.wpe >= 0 ? params_.as<float>() + slots_.wpe : nullptr; }
  const float* lm_head() const { return lm_head_weight(); }

  // Parameter units (param_provider.h): 0 embeddings, 1..L blocks, L+1 head.
  const std::vector<ParamUnit>& units() const { return units_; }
  // Where run() takes parameters and gradients from; null = the model's flat buffers.
  // The provider must outlive its use.
  void set_provider(ParamProvider* p) { provider_ = p; }
  // For sharded training: frees the flat parameter and gradient buffers (a provider holds
  // the state now) and stops plan() from allocating gradients. restore_flat_params()
  // allocates the parameters again (zeros) so a caller can gather them for export.
  void drop_flat_state();
  void restore_flat_params();
  // Allocates the flat gradient buffer now (plan() would), for callers that need its address first.
  void ensure_grads();

  // Bytes of the activation arena and temporaries planned for (B, T).
  static void planned_bytes(const ModelConfig& cfg, int B, int T, size_t* activations, size_t* temporary);

 private:
  struct Views;
  static void carve(Carver& acts, Carver& scratch, const ModelConfig& cfg, const nn::BlockShape& shape, int B, int T,
                    Views* v);
  void bind_layers();
  double run(const int32_t* inputs, const int32_t* targets, float grad_scale, int64_t* count, bool backward,
             const int32_t* positions);
  nn::Packing prepare_packing(const int32_t* positions, nn::RopeTable* rope);
  const float* lm_head_weight() const;
  float* lm_head_grad() const;
  // Binds block l's layers (or the final norm) to unit pointers; grads may be null.
  void bind_block(int l, float* params, float* grads);
  void bind_head(float* params, float* grads);

  ModelConfig cfg_;
  ParamTable table_;
  ModelSlots slots_;
  std::vector<nn::Block> blocks_;
  nn::Norm lnf_;
  Buffer params_, grads_, acts_, scratch_;
  std::vector<ParamUnit> units_;
  FlatParamProvider flat_;
  ParamProvider* provider_ = nullptr;
  bool external_state_ = false;
  int B_ = 0, T_ = 0;
  bool training_ = false;
  // Carved views (set by plan()).
  std::vector<float*> res_;  // L+1 residual-stream tensors (B*T, C)
  std::vector<nn::BlockActs> block_acts_;
  nn::BlockScratch block_scratch_{};
  float *lnf_out_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;
  float *dres_ = nullptr, *dlnf_ = nullptr, *logits_ = nullptr, *rope_cos_ = nullptr, *rope_sin_ = nullptr;
  int64_t lm_chunk_ = 0;
  // Packed batches: per-token first visible key, and a RoPE table for positions >= T
  // (rows that start mid-document), grown on demand up to the context.
  std::vector<int32_t> doc_start_;
  Buffer rope_ext_;
  int rope_ext_rows_ = 0;
};

}  // namespace zt
