// layers.h: the building blocks a transformer block is made of. A layer holds typed views
// of its parameters and gradients (set by the model from whatever its ParamProvider hands
// out: the flat fp32 buffers, a gathered ZeRO-3 unit, later a bf16 compute copy or a
// tensor-parallel slice); it holds no activations itself: the caller passes the saved
// tensors back in. Views are checked (dtype f32, shapes) here, at the layer boundary;
// kernels below take raw pointers.
// Dimension glossary: N rows (= B*T tokens), C width, F ffn width.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::nn {

// Which tensor-parallel role a Linear plays (Megatron): column-parallel splits the outputs
// (no communication in forward), row-parallel splits the inputs (its partial outputs are
// reduced before the residual add: the TpRegion hook in block.h). plain: neither.
enum class LinearKind { plain, column, row };

struct Linear {
  LinearKind kind = LinearKind::plain;
  int in = 0, out = 0;
  // HF GPT-2's Conv1D stores weights [in, out] (y = x W); nn.Linear stores [out, in]
  // (y = x W^T). Keeping the file layout avoids any transpose at load and save.
  bool w_in_out = false;
  TensorView w, b, dw, db;  // w (in, out) or (out, in); b (out); gradients may be empty

  // y (N, out) = x (N, in) W (+ b).
  void forward(TensorView y, TensorView x) const;
  // dx (=, skipped when empty) ; dw += ; db +=.
  void backward(TensorView dx, TensorView dy, TensorView x) const;
  // dx (=) only, for callers that must take the weight gradient first (buffer reuse).
  void backward_input(TensorView dx, TensorView dy) const;
};

enum class NormKind { layernorm, rmsnorm };

struct Norm {
  NormKind kind = NormKind::layernorm;
  int C = 0;
  float eps = 1e-5f;
  TensorView w, b, dw, db;

  // out (N, C); mean (N) is unused (may be empty) for RMSNorm; rstd (N).
  void forward(TensorView out, TensorView mean, TensorView rstd, TensorView x) const;
  // dx += (the residual stream).
  void backward(TensorView dx, TensorView dout, TensorView x, TensorView mean, TensorView rstd) const;
};

// Rows of a (N, ...) activation view.
inline int64_t rows(const TensorView& v) { return v.shape[0]; }

}  // namespace zt::nn
