// nf4.h: QLoRA's 4-bit NormalFloat (NF4) weights, blockwise as bitsandbytes stores them
// (quantize_4bit / dequantize_4bit with quant_type 'nf4', and compress_statistics = True for
// double quantization), and the frozen Linear's GEMMs over them (docs/nf4.md).
//
// Storage of n values in blocks of `blocksize` (64 by default): two 4-bit codes a byte, the
// first element in the high nibble (an odd count pads the last low nibble); one fp32 absmax per
// block (the block's largest |w|). A code c stands for kNf4Code[c] * absmax. Double
// quantization keeps the absmax values as 8-bit codes of the signed dynamic map (quant_maps.h)
// after subtracting their mean (`offset`), one fp32 scale per 256 of them: 0.5 + 1/64 + 4/16384
// bytes per parameter instead of 0.5 + 4/64.
//
// Equal to bitsandbytes' CUDA kernels bit for bit: the codes by dQuantizeNF4's thresholds on
// w * (1 / absmax), the nested codes by dQuantize<0>'s search (tests/kernels/nf4_vectors.py).
// The one value not taken from a kernel is the offset: bitsandbytes takes torch's float32 mean,
// ztrain the mean in double rounded once (they can differ in the last bit).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace zt::kernels {

// get_4bit_type('nf4'): quantiles of N(0, 1) scaled to [-1, 1], code 7 exactly 0.
inline constexpr float kNf4Code[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};
// dQuantizeNF4's decision thresholds, ascending: the float32 midpoints of neighbouring codes.
// Its tree gives the number of thresholds strictly below x (a value on a threshold takes the
// lower code; a NaN, which passes no test, code 0).
inline constexpr float kNf4Threshold[15] = {
    -0.8480964004993439f,  -0.6106329262256622f,   -0.4599952697753906f, -0.33967943489551544f, -0.23460740596055984f,
    -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,   0.2035212516784668f,
    0.2920137718319893f,   0.3893125355243683f,    0.5016634166240692f,  0.6427869200706482f,   0.8614784181118011f,
};
// The block of bitsandbytes' nested (double) quantization of the absmax values.
inline constexpr int kNf4NestedBlock = 256;

// dQuantizeNF4: the code of x (x already scaled by 1 / absmax).
inline uint8_t nf4_code(float x) {
  int c = 0;
  for (float t : kNf4Threshold) c += x > t;
  return uint8_t(c);
}

// Raw pointers to NF4 storage: host memory here, device memory for a GPU twin (kernels/cuda).
// Exactly one of `absmax` (single quantization) and `qabsmax` + `absmax_scale` (double) is set.
// int8 (--load_in_8bit): bitsandbytes' Int8Params instead, one int8 code a value and one absmax a
// row (its SCB), value = code * absmax / 127; blocksize is then the row's length. Every function
// below reads both formats.
struct Nf4View {
  bool int8 = false;
  const uint8_t* codes = nullptr;       // (numel + 1) / 2 bytes
  const float* absmax = nullptr;        // blocks() fp32 values
  const uint8_t* qabsmax = nullptr;     // blocks() codes of the signed dynamic map
  const float* absmax_scale = nullptr;  // one per kNf4NestedBlock codes
  float offset = 0.f;                   // added back to each decoded absmax
  int64_t rows = 0, cols = 0;           // a weight (out, in), row-major; a flat tensor is (1, n)
  int blocksize = 64;

  int64_t numel() const { return rows * cols; }
  int64_t blocks() const { return (numel() + blocksize - 1) / blocksize; }
  bool nested() const { return qabsmax != nullptr; }
};

// NF4 storage owned on the host, what nf4_quantize returns.
struct Nf4Tensor {
  bool int8 = false;  // Int8Params (int8_quantize_weight): codes one a value, absmax one a row
  std::vector<uint8_t> codes;
  std::vector<float> absmax;        // empty when double-quantized
  std::vector<uint8_t> qabsmax;     // empty unless double-quantized
  std::vector<float> absmax_scale;  // empty unless double-quantized
  float offset = 0.f;
  int64_t rows = 0, cols = 0;
  int blocksize = 64;

  bool double_quant() const { return !qabsmax.empty(); }
  int64_t numel() const { return rows * cols; }
  // Every byte of the quantized data: codes, absmax (or its codes, scales and the offset). The
  // two code tables are shared constants; bitsandbytes' state dict repeats them per tensor
  // (16 + 256 fp32: 1088 bytes), which this does not count.
  size_t bytes() const;
  Nf4View view() const;
};

// bitsandbytes' quantize_4bit(w, blocksize, compress_statistics = double_quant, 'nf4') of n
// values, as a (1, n) tensor. blocksize: 32, 64, ..., 4096 (bitsandbytes' choices).
Nf4Tensor nf4_quantize(const float* w, int64_t n, int blocksize = 64, bool double_quant = false);
// The same of a (rows, cols) row-major weight: the blocks run over the flattened matrix, so a
// block may span two rows, as in bitsandbytes.
Nf4Tensor nf4_quantize_weight(const float* w, int64_t rows, int64_t cols, int blocksize = 64,
                              bool double_quant = false);

// bitsandbytes' int8_vectorwise_quant of a (rows, cols) weight, as Int8Params holds a frozen
// Linear8bitLt's weight: per row absmax (SCB) and code round(w * (127 / absmax)) (half to even); a
// zero row codes 0.
Nf4Tensor int8_quantize_weight(const float* w, int64_t rows, int64_t cols);
// What Nf4Tensor::bytes() will be, from the shape alone (memory estimates): NF4 of n values in
// blocks of `blocksize` (single or double quantization), or int8 of a (rows, cols) weight.
int64_t nf4_stored_bytes(int64_t n, int blocksize, bool double_quant);
int64_t int8_stored_bytes(int64_t rows, int64_t cols);

// The fp32 absmax of blocks [b0, b1): stored, or decoded as bitsandbytes' dequantize_blockwise
// then `+= offset` (two float32 roundings).
void nf4_block_absmax(const Nf4View& q, int64_t b0, int64_t b1, float* out);
// All values, fp32 (dequantize_4bit).
void nf4_dequantize(const Nf4View& q, float* out);
// Values [i0, i1) of the flattened tensor: fp32, or bf16 rounded to nearest even from the fp32
// value (bitsandbytes' bf16 output).
void nf4_dequantize_range(const Nf4View& q, int64_t i0, int64_t i1, float* out);
void nf4_dequantize_range(const Nf4View& q, int64_t i0, int64_t i1, uint16_t* out);
// Rows [r0, r1) of the (rows, cols) weight into a tile of (r1 - r0) x cols values of type t
// (f32 or bf16), leading dimension cols: what the GEMM below reads per tile.
void nf4_dequantize_rows(const Nf4View& q, int64_t r0, int64_t r1, DType t, void* tile);

// A frozen Linear with weight W (out, in) = q (rows = out, cols = in), on the CPU: x and dy of
// type t (f32 or bf16), y and dx fp32. W is dequantized a tile of rows at a time into a buffer
// of this thread, kept for the next call, and each tile goes through gemm_typed. The buffer is
// about 4 MiB whatever W's size (a smaller W is a single tile): never a dequantized copy of a big W.
// y (N, out) = x (N, in) W^T + beta * y.
void nf4_linear_forward(DType t, float* y, const void* x, const Nf4View& w, int64_t N, float beta = 0.f);
// dx (N, in) = dy (N, out) W + beta * dx. No weight gradient: the base is frozen.
void nf4_linear_backward_input(DType t, float* dx, const void* dy, const Nf4View& w, int64_t N, float beta = 0.f);
// The same over W's rows [row0, row0 + rows) (DoRA's and IA3's per-part outputs): y[:, 0:rows]
// (leading dimension ldy) = x W[row0:row0+rows]^T + beta y; dx = dy[:, 0:rows] (leading dimension
// ld_dy) W[row0:row0+rows] + beta dx (rows > 0).
void nf4_linear_forward_rows(DType t, float* y, int64_t ldy, const void* x, const Nf4View& w, int64_t row0,
                             int64_t rows, int64_t N, float beta = 0.f);
void nf4_linear_backward_input_rows(DType t, float* dx, const void* dy, int64_t ld_dy, const Nf4View& w, int64_t row0,
                                    int64_t rows, int64_t N, float beta = 0.f);

// Tests: tiles of `rows` rows (0 = the default size), to run many tiles on small matrices.
void nf4_tile_rows_for_tests(int64_t rows);

}  // namespace zt::kernels
