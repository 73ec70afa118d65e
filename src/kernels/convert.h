// convert.h: element conversions between fp32 and the 16-bit compute types of mixed
// precision (bf16, fp16), vectorized with AVX-512 (AVX512-BF16's round-to-nearest-even
// converter where the CPU has it).
// Rounding is round-to-nearest-even in both directions, like PyTorch's .to(); fp16
// overflows to +-inf (that is what a loss scaler detects). Scalar references are
// core/tensor.h's f32_to_bf16 / f32_to_f16, which the tests compare against.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::kernels {

// dst (n, 16-bit of type t: bf16 or f16) = src (n, fp32).
void to_lowp(DType t, uint16_t* dst, const float* src, int64_t n);
// dst (n, fp32) = src (n, bf16 or f16).
void from_lowp(DType t, float* dst, const uint16_t* src, int64_t n);
// Both at once (a bf16-kept tensor): dst = bf16(src), then src = the kept values in fp32.
void to_bf16_keep(uint16_t* dst, float* src, int64_t n);
// dst = src rounded to the nearest fp16 value (as fp32; dst may be src): fp16 mode's
// GEMM inputs. Overflow gives +-inf.
void round_to_f16(float* dst, const float* src, int64_t n);

}  // namespace zt::kernels
