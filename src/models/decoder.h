// decoder.h: incremental (KV-cache) decoding for generation. Each new token runs the
// model's own layers on one row and attends over cached keys and values, so the cost
// per token is one pass over the weights, not a forward over the whole prefix.
// Batch size 1; the cache holds up to max_len positions.
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "models/transformer.h"

namespace zt {

class KvDecoder {
 public:
  KvDecoder(const Transformer& model, int max_len);
  // Bytes of the key/value cache for max_len positions (what the constructor allocates).
  static int64_t cache_bytes(const ModelConfig& c, int max_len);
  // Feeds the token at the next position and returns the logits (V) for the one after,
  // valid until the next step.
  TensorView step(int32_t token);
  int position() const { return pos_; }
  void reset() { pos_ = 0; }

 private:
  const Transformer& model_;
  int max_len_, pos_ = 0;
  Buffer kv_, work_;
  std::vector<float*> k_cache_, v_cache_;  // per layer: (max_len, KVH*HS)
  float *x_, *h_, *qkv_, *att_, *fc_, *act_, *logits_, *cos_, *sin_;
  float *cos_local_ = nullptr, *sin_local_ = nullptr;  // Gemma 3: the sliding layers' RoPE table
  float mean_ = 0, rstd_ = 0;
  std::vector<float> qk_rstd_;  // (NH + KVH) rstds of the q/k head norms (Qwen3)
  float* moe_out_ = nullptr;    // mixture of experts: the layer's output row (C), and its activations for one row
  nn::MoeActs moe_acts_;
};

}  // namespace zt
