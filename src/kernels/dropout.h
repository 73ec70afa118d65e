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
// dst = src * keep / (1 - p), n elements of dtype t (f32 or bf16); dst may be src.
void dropout_forward(DType t, void* dst, const void* src, int64_t n, float p, uint64_t seed);
// dx += g * keep / (1 - p), n fp32 elements.
void dropout_backward_add(float* dx, const float* g, int64_t n, float p, uint64_t seed);

}  // namespace zt::kernels
