// cross_entropy.h: the fused LM head + softmax cross-entropy.
// logits = x (N, C) @ w^T (w is (V, C)); the loss and, when dx is given, the gradients
// dx (=) and dw (+=) are produced chunk by chunk over tokens, so only chunk*V logits
// ever exist (never the full N*V). grad_scale multiplies d(loss_sum)/d(logits), e.g.
// 1 / (tokens in the optimizer step) for a mean loss. Targets equal to kIgnoreIndex
// (HF's -100) contribute neither loss nor gradient.
#pragma once
#include <cstdint>

namespace zt::kernels {

constexpr int32_t kIgnoreIndex = -100;

struct LmHeadDims {
  int64_t N;
  int C, V;
  int64_t chunk;  // tokens per chunk; scratch holds chunk * V floats
};

// Returns the sum over non-ignored tokens of -log softmax(logits)[target]; *count gets
// how many tokens were counted.
double lmhead_ce(float* dx, float* dw, const float* x, const float* w, const int32_t* targets, const LmHeadDims& d,
                 float grad_scale, float* scratch, int64_t* count);

}  // namespace zt::kernels
