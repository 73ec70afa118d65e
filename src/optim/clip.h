// clip.h: the global gradient norm and clipping, PyTorch's clip_grad_norm_ (over a flat
// gradient, or each of a rank's shard ranges with the squared norms summed by the caller).
#pragma once
#include <cstdint>

namespace zt::optim {

// L2 norm of the whole gradient, accumulated in double.
double grad_norm(const float* grads, int64_t numel);
// PyTorch semantics: scale by max_norm / (norm + 1e-6) when that is < 1; times `unscale`
// (fp16 loss scaling: 1 / the scale, with norm the unscaled norm), in the same pass.
void clip_grads(float* grads, int64_t numel, double norm, double max_norm, double unscale = 1.0);

}  // namespace zt::optim
