// layers.h: the building blocks a transformer block is made of. A layer holds typed views
// of its parameters and gradients (set by the model from whatever its ParamProvider hands
// out: the flat fp32 buffers, a gathered ZeRO-3 unit, later a bf16 compute copy or a
// tensor-parallel slice); it holds no activations itself: the caller passes the saved
// tensors back in. Views are checked (dtype f32, shapes) here, at the layer boundary;
// kernels below take raw pointers.
// Dimension glossary: N rows (= B*T tokens), C width, F ffn width.
#pragma once
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/nf4.h"

namespace zt::nn {

class TpRegion;  // nn/block.h

// Which tensor-parallel role a Linear plays (Megatron): column-parallel splits the outputs
// (no communication in forward), row-parallel splits the inputs (its partial outputs are
// reduced before the residual add: the TpRegion in block.h). plain: neither.
enum class LinearKind { plain, column, row };

// Mixed precision (--bf16 / --fp16). fp32 masters, gradients and optimizer state always;
// GEMM inputs (weights' compute copies, saved inputs, output gradients) are bf16 under
// bf16, and fp32 values rounded to fp16 under fp16 (these CPUs have no fp16 arithmetic, so
// fp16 reproduces fp16's rounding and range, not its speed). Norms, softmax, attention,
// the loss and every GEMM output stay fp32.
enum class Precision : uint8_t { fp32, bf16, fp16 };
// The dtype GEMM inputs are stored in.
inline DType compute_dtype(Precision p) { return p == Precision::bf16 ? DType::bf16 : DType::f32; }
const char* precision_name(Precision p);

// Activation recomputation per block: none keeps everything backward reads; selective
// keeps the GEMM outputs qkv and fc and recomputes the norms' outputs, attention, the
// residual stream after attention (rerunning the C x C projection) and the activation
// function in backward; full keeps only the block's input and reruns the
// whole block forward in backward.
enum class Recompute : uint8_t { none, selective, full };
const char* recompute_name(Recompute r);

// Makes a GEMM input that a kernel computed in fp32 at `land` final in dst: bf16 converts
// into dst; fp16 rounds to fp16 values into dst (fp32; dst may be land); fp32 does nothing
// (land is dst).
void lower(Precision p, TensorView dst, TensorView land, DeviceKind dev = DeviceKind::cpu);

// LoRA (nn/lora.cpp): y += scale * dropout(x) A^T B^T on each part's outputs. Its temporaries
// (rows N): h = x A^T and g = scale * dy B, (N, R) in fp32 and in the GEMMs' dtype; with dropout,
// the dropped input (N, in) in the GEMMs' dtype and its gradient (N, in) in fp32.
struct LoraScratch {
  TensorView h, h_c, g, g_c, xd, dxd;
  // IA3 (nn/ia3.cpp): the scaled input (N, in) and the scaled output gradient (N, out) in the
  // GEMMs' dtype; a recomputed output or input gradient (N, max(in, out)) in fp32.
  // DoRA uses ia3_dy (its scaled output gradient) and ia3_f32 (its recomputed outputs) too.
  TensorView ia3_x, ia3_dy, ia3_f32;
  // DoRA: W + s B A of kDoraRows rows of one part (kDoraRows, in), and per output its norm, scale
  // m / norm and bias shift.
  TensorView dora_w, dora_n, dora_c, dora_shift;
};
inline constexpr int kDoraRows = 256;
struct LoraPart {
  int out_begin = 0, out_size = 0;  // the Linear's outputs this part adapts
  TensorView b, db, bc;             // B (out_size, r); its gradient; its compute copy
  TensorView m, dm;                 // DoRA: the magnitude vector (out_size) and its gradient
};
struct LinearLora {
  int r = 0;  // 0: no adapter
  float scale = 0.f;
  float dropout = 0.f;             // this pass's (0 in evaluation)
  uint64_t seed = 0;               // the dropout mask's, fixed for a pass, a layer and a Linear
  int in_whole = 0, in_begin = 0;  // a row-parallel cut's inputs within the whole (0: uncut)
  Precision precision = Precision::fp32;
  bool dora = false;  // the parts' outputs rescaled by m / ||W + s B A|| (nn/lora.cpp)
  // A row-parallel cut's TP group, holding the other slices of every weight row: DoRA sums the rows'
  // squared norms over it; null without a cut (the binding takes it from Block::row_slices).
  TpRegion* row_group = nullptr;
  TensorView a, da, ac;  // every part's A (r, in), back to back: (parts r, in)
  std::vector<LoraPart> parts;
  const LoraScratch* scratch = nullptr;
  // IA3 (PEFT's ia3_l): vectors scaling the outputs [o, o + m) (bias included, as PEFT's), and
  // for a feedforward module one scaling the input (in); fp32, with their gradients.
  struct Ia3Out {
    int out_begin = 0, out_size = 0;
    TensorView l, dl;
  };
  std::vector<Ia3Out> ia3_out;
  TensorView ia3_in, ia3_din;
  bool on() const { return r > 0; }
  bool ia3_on() const { return !ia3_out.empty() || bool(ia3_in); }
};

struct Linear {
  LinearKind kind = LinearKind::plain;
  int in = 0, out = 0;
  // HF GPT-2's Conv1D stores weights [in, out] (y = x W); nn.Linear stores [out, in]
  // (y = x W^T). Keeping the file layout avoids any transpose at load and save.
  bool w_in_out = false;
  TensorView w, b, dw, db;  // w (in, out) or (out, in); b (out); gradients may be empty
  // The weight the GEMMs read (mixed precision): w itself in fp32; its bf16 compute copy
  // under --bf16; an fp32 copy rounded to fp16 under --fp16. GEMM inputs (x, and dy's
  // compute copy) come in the same dtype; outputs and weight gradients are fp32.
  TensorView wc;
  DeviceKind dev = DeviceKind::cpu;  // where the views live and the kernels run
  // A frozen weight (LoRA's base: dw and db empty) takes no weight gradient.
  LinearLora lora;
  // QLoRA: the frozen weight in NF4 ((out, in), kernels/nf4.h) instead of w / wc; the GEMMs
  // dequantize it a tile at a time.
  const kernels::Nf4View* nf4 = nullptr;

  // y (N, out) = x (N, in) W (+ b).
  void forward(TensorView y, TensorView x) const;
  // fp32 training: dx (=, skipped when empty) ; dw += ; db +=.
  void backward(TensorView dx, TensorView dy, TensorView x) const;
  // dx (=) only, for callers that must take the weight gradient first (buffer reuse).
  // dy_c: dy in the GEMMs' dtype.
  void backward_input(TensorView dx, TensorView dy_c) const;
  // dw += x^T dy_c; db += column sums of dy (fp32, so the bias keeps its digits).
  void backward_weight(TensorView dy, TensorView dy_c, TensorView x) const;
  // The dense weight's GEMMs over outputs [o, o + m) alone, for the adapters' recomputations (inputs
  // in the GEMMs' dtype): z (N, m) = x W[o:o+m]^T, and dx (N, in) = beta dx + dy[:, o:o+m] W[o:o+m]
  // with dy's rows ld_dy apart.
  void forward_columns(const void* x, int64_t N, int o, int m, float* z) const;
  void backward_input_columns(const void* dy, int64_t ld_dy, int64_t N, int o, int m, float beta, float* dx) const;
};

// The adapter's share of Linear's passes (nn/lora.cpp): y += its output; dx += its input
// gradient; its A and B gradients +=.
void lora_forward(const Linear& l, TensorView y, TensorView x);
// dy_c: the gradient the adapter reads (DoRA's scaled one); dy_unscaled: the Linear's own (DoRA with
// dropout reads both).
void lora_backward_input(const Linear& l, TensorView dx, TensorView dy_c, TensorView dy_unscaled);
void lora_backward_weight(const Linear& l, TensorView dy_c, TensorView x);
// DoRA: the output gradient the base and adapter GEMMs read, dy_c with the parts' columns scaled
// by m / ||W + s B A|| (in the scratch); the magnitudes' gradients += (the unscaled outputs
// recomputed: one GEMM over the adapted columns).
TensorView dora_backward_dy(const Linear& l, TensorView dy_c);
void dora_backward_magnitude(const Linear& l, TensorView dy, TensorView x);
// IA3's share (nn/ia3.cpp). Forward: the GEMM's input (x scaled into the scratch, or x), then the
// outputs scaled in place. Backward: the output gradient the GEMM reads (dy_c scaled, or dy_c);
// the input gradient scaled in place; the vectors' gradients += (the unscaled output or input
// gradient recomputed with one GEMM: nothing is kept from forward).
const void* ia3_forward_input(const Linear& l, TensorView x);
void ia3_forward_output(const Linear& l, TensorView y);
const void* ia3_backward_dy(const Linear& l, TensorView dy_c);
void ia3_backward_dx(const Linear& l, TensorView dx);
void ia3_backward_weight(const Linear& l, TensorView dy, TensorView dy_c, TensorView x);

// none: the identity (OLMo-2 has no norm before attention and the MLP): forward copies, backward
// adds the gradient through, so a block without pre-norms runs the same code.
enum class NormKind { layernorm, rmsnorm, none };

struct Norm {
  NormKind kind = NormKind::layernorm;
  int C = 0;
  float eps = 1e-5f;
  // Gemma's RMSNorm scales by (1 + w): its weights are stored zero-centred (HF's layout), so the
  // norm multiplies by 1 + w, whose gradient is w's (kernels::rmsnorm_* with w_offset 1).
  bool unit_offset = false;
  TensorView w, b, dw, db;
  DeviceKind dev = DeviceKind::cpu;

  // out (N, C); mean (N) is unused (may be empty) for RMSNorm; rstd (N).
  void forward(TensorView out, TensorView mean, TensorView rstd, TensorView x) const;
  // dx += (the residual stream).
  void backward(TensorView dx, TensorView dout, TensorView x, TensorView mean, TensorView rstd) const;
};

// Rows of a (N, ...) activation view.
inline int64_t rows(const TensorView& v) { return v.shape[0]; }

}  // namespace zt::nn
