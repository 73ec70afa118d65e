// dropout.h: inverted dropout whose mask is a function of (seed, element): nothing is stored, so a
// backward pass (or a recomputed forward) regenerates the forward's mask exactly. LoRA's
// lora_dropout uses it on an adapter's input (nn/lora.cpp).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::kernels {

// Whether element i survives dropout with probability p under `seed` (splitmix64 of seed + i
// against p): the mask both functions below apply.
bool dropout_keeps(uint64_t seed, int64_t i, float p);
// Where element i of a (rows, cols) block sits in the whole (rows, ld) matrix it was cut from, at
// column col0: the mask follows the whole matrix's numbering, so a tensor-parallel rank holding
// columns [col0, col0 + cols) draws the mask one process draws there. cols == ld: uncut.
struct DropoutCut {
  int64_t cols = 0, ld = 0, col0 = 0;
  int64_t index(int64_t i) const { return cols == ld ? i : (i / cols) * ld + col0 + i % cols; }
};
// dst = src * keep / (1 - p), n elements of dtype t (f32 or bf16); dst may be src.
void dropout_forward(DType t, void* dst, const void* src, int64_t n, float p, uint64_t seed, DropoutCut cut = {});
// dx += g * keep / (1 - p), n fp32 elements.
void dropout_backward_add(float* dx, const float* g, int64_t n, float p, uint64_t seed, DropoutCut cut = {});

}  // namespace zt::kernels
