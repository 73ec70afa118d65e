// cross_entropy.h: the fused LM head + softmax cross-entropy.
// logits = x (N, C) @ w^T (w is (V, C)); the loss and, when dx is given, the gradients
// dx (=) and dw (+=) are produced chunk by chunk over tokens, so only chunk*V logits
// ever exist (never the full N*V). grad_scale multiplies d(loss_sum)/d(logits), e.g.
// 1 / (tokens in the optimizer step) for a mean loss. Targets equal to kIgnoreIndex
// (HF's -100) contribute neither loss nor gradient.
#pragma once
#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace zt::kernels {

constexpr int32_t kIgnoreIndex = -100;

// A target indexes its row of logits (and the gradient written there): one outside [0, V) would
// read and write outside the scratch. The data loaders check every id against the vocabulary
// (data/token_data.h); this is the kernel's own guard, N compares beside N*V*C flops.
inline void check_lm_targets(const int32_t* targets, int64_t N, int V) {
  bool ok = true;
#ifdef _OPENMP  // also included by the GPU kernels' files, which nvcc builds without OpenMP
#pragma omp simd reduction(&& : ok)
#endif
  for (int64_t i = 0; i < N; ++i) ok = ok && (targets[i] == kIgnoreIndex || uint32_t(targets[i]) < uint32_t(V));
  if (ok) return;
  int64_t i = 0;
  while (targets[i] == kIgnoreIndex || uint32_t(targets[i]) < uint32_t(V)) ++i;
  throw Error(str_cat("lm head: target id ", targets[i], " at row ", i, " is outside the vocabulary [0, ", V,
                      "); the token data was not checked against the model"));
}

struct LmHeadDims {
  int64_t N;
  int C, V;
  int64_t chunk;  // tokens per chunk; scratch holds chunk * V floats
  // Gemma 2's final_logit_softcapping c: the logits become c tanh(z / c) before the softmax
  // (forward and backward; the CPU and GPU kernels); 0: none.
  float softcap = 0.f;
  // Sophia's Gauss-Newton-Bartlett pass: when nonzero, each counted row's target is replaced by a
  // label drawn from the row's own softmax, with a uniform from (sample_seed, row) (CPU, whole-
  // vocabulary head only).
  uint64_t sample_seed = 0;
  // When given (N): each counted row's rank of its target, 1 + the number of logits strictly above
  // the target's (0 for ignored rows): the probability probes' rank (observe/task_eval.h). CPU,
  // whole-vocabulary head only: the GPU and vocabulary-parallel heads refuse it.
  int64_t* token_rank = nullptr;
};

// The label a row of softmax numerators z (V of them, summing to sum) draws for uniform u in [0, 1).
int32_t sample_label(const float* z, int V, float sum, double u);
// A uniform in [0, 1) from (seed, row): splitmix64's finaliser, 53 bits.
double sample_uniform(uint64_t seed, int64_t row);

// Mixed precision: the GEMMs read x and w in dtype t (bf16, or fp32 holding fp16-rounded
// values when round_f16), and the logits' gradient is lowered the same way into dlogits
// (chunk * V of t; unused with t = f32 unless round_f16, when it may be null: rounded in
// place). Softmax and the loss are fp32 either way.
struct LmHeadCompute {
  DType t = DType::f32;
  const void* x = nullptr;  // (N, C)
  const void* w = nullptr;  // (V, C)
  void* dlogits = nullptr;
  bool round_f16 = false;
};

// Returns the sum over non-ignored tokens of -log softmax(logits)[target]; *count gets
// how many tokens were counted. compute == null: fp32 GEMMs on x and w. token_loss, when
// given (N), gets each token's loss (0 for ignored targets): the per-channel losses' input.
double lmhead_ce(float* dx, float* dw, const float* x, const float* w, const int32_t* targets, const LmHeadDims& d,
                 float grad_scale, float* scratch, int64_t* count, const LmHeadCompute* compute = nullptr,
                 double* token_loss = nullptr);

// Vocabulary-parallel form (tensor parallelism, Megatron's parallel cross-entropy): w holds
// rows [v0, v0 + d.V) of the vocabulary, of which the first nv are real (the rest padding,
// masked out). The logits are never gathered: per chunk, the rows' maxima are reduced with
// `max` across the group, then the sums of exp and the target logits (from the rank holding
// each target, 0 elsewhere) with one `sum`. Every rank returns the same loss; dx gets this
// rank's partial input gradient (the caller reduces it), dw its rows' gradient.
struct VocabShard {
  int v0 = 0, nv = 0;
  std::function<void(float*, int64_t)> max, sum;  // in-place all-reduces over the group
};
double lmhead_ce_vocab(float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                       const LmHeadDims& d, float grad_scale, float* scratch, int64_t* count, const VocabShard& vs,
                       const LmHeadCompute* compute = nullptr, double* token_loss = nullptr);

}  // namespace zt::kernels
