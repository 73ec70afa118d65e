// layers.h: the building blocks a transformer block is made of. A layer owns views
// (pointers) into the model's flat parameter and gradient buffers, set once by the
// model; it holds no activations itself: the caller passes the saved tensors back in.
// Dimension glossary: N rows (= B*T tokens), C width, F ffn width.
#pragma once
#include <cstdint>

#include "core/memory.h"

namespace zt::nn {

struct Linear {
  int in = 0, out = 0;
  // HF GPT-2's Conv1D stores weights [in, out] (y = x W); nn.Linear stores [out, in]
  // (y = x W^T). Keeping the file layout avoids any transpose at load and save.
  bool w_in_out = false;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;

  // y (N, out) = x (N, in) W (+ b); with accumulate, y += instead (residual add for free).
  void forward(float* y, const float* x, int64_t N, bool accumulate = false) const;
  // dx (=, skipped when null) ; dw += ; db +=.
  void backward(float* dx, const float* dy, const float* x, int64_t N) const;
  // dx (=) only, for callers that must take the weight gradient first (buffer reuse).
  void backward_input(float* dx, const float* dy, int64_t N) const;
};

enum class NormKind { layernorm, rmsnorm };

struct Norm {
  NormKind kind = NormKind::layernorm;
  int C = 0;
  float eps = 1e-5f;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;

  // mean is unused (may be null) for RMSNorm.
  void forward(float* out, float* mean, float* rstd, const float* x, int64_t N) const;
  // dx += (the residual stream).
  void backward(float* dx, const float* dout, const float* x, const float* mean, const float* rstd, int64_t N) const;
};

}  // namespace zt::nn
