// embedding_head.h: the layers at the two ends of the model, as layers a strategy can swap:
// the token (+ learned position) embedding, and the LM head fused with the cross-entropy loss.
// The model binds them to each pass's weights (models/model_runtime.h); src/parallel swaps in
// vocabulary-parallel variants (parallel/tensor_parallel.h: each rank holds rows of the
// vocabulary) without the model knowing.
#pragma once
#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/cross_entropy.h"

namespace zt::nn {

// One micro-batch as the embedding sees it: N = B T tokens.
struct EmbeddingPass {
  const int32_t* ids = nullptr;        // (N) token ids
  const int32_t* positions = nullptr;  // (N) position ids, or null: 0..T-1 in every row
  int64_t N = 0;
  int T = 0, C = 0;
  DeviceKind dev = DeviceKind::cpu;
  TensorView all_rows;  // (N, C) scratch, for a variant whose output holds a share of the rows
};

class Embedding {
 public:
  virtual ~Embedding() = default;
  // out (N, C) = wte[ids] + wpe[positions]; wpe null: no learned positions (RoPE models).
  virtual void forward(TensorView out, const float* wte, const float* wpe, const EmbeddingPass& p) const;
  // dwte[ids] += dy, dwpe[positions] += dy (dwpe null: none); dy is forward's out's gradient.
  virtual void backward(float* dwte, float* dwpe, TensorView dy, const EmbeddingPass& p) const;
};

// One micro-batch as the LM head sees it (kernels/cross_entropy.h's arguments).
struct LmHeadPass {
  kernels::LmHeadDims dims{};
  float grad_scale = 0.f;
  float* logits = nullptr;                       // (chunk, V) scratch
  const kernels::LmHeadCompute* lowp = nullptr;  // mixed precision: the compute-dtype operands
  double* token_losses = nullptr;                // (N) per-token losses, or null
  DeviceKind dev = DeviceKind::cpu;
};

class LmHeadLoss {
 public:
  virtual ~LmHeadLoss() = default;
  // The rows of the head's input (N, C) this rank computes: all of them, or a variant's share.
  virtual TensorView local_rows(TensorView full) const { return full; }
  // The head's input x (N, C) is complete in this rank's rows: a variant gathers the rest.
  virtual void input_ready(TensorView x) const {}
  // The sum over counted targets of -log softmax(x w^T)[target] (*count gets how many);
  // dx / dw (null: forward only) get the gradients of grad_scale times it.
  virtual double forward(float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                         const LmHeadPass& p, int64_t* count) const;
  // After backward: the input's gradient `grad` (N, C) as this rank's rows in out (a variant
  // sums partial gradients over its group first).
  virtual void input_grad(TensorView out, TensorView grad) const {}
};

}  // namespace zt::nn
