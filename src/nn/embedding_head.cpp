// embedding_head.cpp: the single-device embedding and LM head (see embedding_head.h).
#include "nn/embedding_head.h"

#include "kernels/dispatch.h"

namespace zt::nn {

void Embedding::forward(TensorView out, const float* wte, const float* wpe, const EmbeddingPass& p) const {
  kernels::embedding_forward(p.dev, out.as<float>(), p.ids, wte, wpe, p.N, p.T, p.C, p.positions);
}

void Embedding::backward(float* dwte, float* dwpe, TensorView dy, const EmbeddingPass& p) const {
  kernels::embedding_backward(p.dev, dwte, dwpe, dy.as<const float>(), p.ids, p.N, p.T, p.C, p.positions);
}

double LmHeadLoss::forward(float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                           const LmHeadPass& p, int64_t* count) const {
  return kernels::lmhead_ce(p.dev, dx, dw, x, w, targets, p.dims, p.grad_scale, p.logits, count, p.lowp,
                            p.token_losses);
}

}  // namespace zt::nn
