// quantize.h: blockwise symmetric int8 quantization for ZeRO++'s quantized weight
// communication (qwZ: parameters all-gathered as int8) and quantized gradients (qgZ:
// gradients exchanged as int8 and summed after dequantization).
//
// Each block of `block` consecutive values (the last may be shorter) has one fp32 scale
// = max|x| / 127 and values q = round(x / scale) (ties to even) in [-127, 127], so the
// reconstruction error is at most scale / 2 = max|x| / 254 per value. An all-zero block
// has scale 0. A block with a NaN or an infinity gets a non-finite scale and dequantizes
// to NaN, so overflow checks downstream still see it.
//
// The packed form puts [scales (float32 per block)][values (int8)] in one byte buffer,
// so a Communicator's byte all_gather / all_to_all moves it as is (dst / src must be
// 4-byte aligned for the scales; per-rank slots of quant_packed_bytes() keep that when
// n is a multiple of 4).
// It deliberately is not stochastic rounding, or a kernel for other bit widths.
#pragma once
#include <cstddef>
#include <cstdint>

namespace zt::parallel {

constexpr int kQuantBlock = 256;

int64_t quant_num_blocks(int64_t n, int block = kQuantBlock);
void quantize_int8(int8_t* q, float* scales, const float* x, int64_t n, int block = kQuantBlock);
void dequantize_int8(float* x, const int8_t* q, const float* scales, int64_t n, int block = kQuantBlock);
// acc += dequantized values (qgZ sums the shards it receives from every rank).
void dequantize_int8_add(float* acc, const int8_t* q, const float* scales, int64_t n, int block = kQuantBlock);

size_t quant_packed_bytes(int64_t n, int block = kQuantBlock);
void quantize_int8_packed(void* dst, const float* x, int64_t n, int block = kQuantBlock);
void dequantize_int8_packed(float* x, const void* src, int64_t n, int block = kQuantBlock);

}  // namespace zt::parallel
