// nf4.cpp: see nf4.h. Compiled with -ffp-contract=off (CMakeLists.txt): a decoded absmax is a
// product then a sum, two float32 roundings as in bitsandbytes' two ops, never one fused FMA.
#include "kernels/nf4.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/gemm.h"
#include "kernels/quant_maps.h"

namespace zt::kernels {

namespace {

void check_blocksize(int bs) {
  ZT_CHECK(bs >= 32 && bs <= 4096 && (bs & (bs - 1)) == 0, "NF4 blocksize ", bs,
           " is not one of bitsandbytes' 32, 64, 128, 256, 512, 1024, 2048, 4096");
}

void check_compute_type(DType t) {
  ZT_CHECK(t == DType::f32 || t == DType::bf16, "NF4 GEMMs take f32 or bf16 inputs, not ", dtype_name(t));
}

// One block of n values: the codes (one a byte, in `code`) of w * (1 / absmax); returns absmax.
// bitsandbytes multiplies by the reciprocal, which can round differently from a division. An
// all-zero block has absmax 0 and the GPU scales by 1 / 0: every 0 * inf is NaN, which passes no
// threshold, so bitsandbytes stores code 0 there (and in the pad nibble); so does this, without
// computing the NaN.
float quantize_block_nf4(const float* w, int64_t n, uint8_t* code, uint8_t* pad) {
  float am = 0.f;
  for (int64_t i = 0; i < n; ++i) am = std::fmax(am, std::fabs(w[i]));
  if (am == 0.f) {
    std::memset(code, 0, size_t(n));
    *pad = 0;
    return am;
  }
  const float r = 1.f / am;
  for (int64_t i = 0; i < n; ++i) code[i] = nf4_code(w[i] * r);
  *pad = nf4_code(0.f * r);  // the GPU loads 0 past the end of the tensor
  return am;
}

// quantize_blockwise(absmax - offset, blocksize = 256) with the signed dynamic map.
void double_quantize(const std::vector<float>& absmax, Nf4Tensor& t) {
  const int64_t nb = int64_t(absmax.size());
  double sum = 0;
  for (float a : absmax) sum += a;
  t.offset = float(sum / double(nb));
  t.qabsmax.resize(size_t(nb));
  t.absmax_scale.resize(size_t((nb + kNf4NestedBlock - 1) / kNf4NestedBlock));
  for (int64_t b = 0; b < int64_t(t.absmax_scale.size()); ++b) {
    const int64_t lo = b * kNf4NestedBlock, hi = std::min(nb, lo + kNf4NestedBlock);
    float v[kNf4NestedBlock], am = 0.f;
    for (int64_t j = lo; j < hi; ++j) {
      v[j - lo] = absmax[size_t(j)] - t.offset;
      am = std::fmax(am, std::fabs(v[j - lo]));
    }
    t.absmax_scale[size_t(b)] = am;
    // All equal to the mean: 0 * (1 / 0) is NaN on the GPU, which dQuantize sends to code 0.
    const float r = am == 0.f ? 0.f : 1.f / am;
    for (int64_t j = lo; j < hi; ++j)
      t.qabsmax[size_t(j)] = am == 0.f ? 0 : dynamic_quantize_bnb(kDynamicSigned, v[j - lo] * r);
  }
}

std::atomic<int64_t> g_tile_rows{0};

// Rows per tile: about 4 MiB of dequantized weight (a multiple of 16 rows), all rows if fewer:
// big enough that the per-tile GEMMs run near the whole product's speed, small beside any model.
int64_t tile_rows(const Nf4View& w, DType t) {
  if (const int64_t forced = g_tile_rows.load()) return std::min(forced, w.rows);
  const int64_t per_row = std::max<int64_t>(1, w.cols * int64_t(dtype_size(t)));
  const int64_t r = std::max<int64_t>(16, ((int64_t(4) << 20) / per_row) / 16 * 16);
  return std::min(r, w.rows);
}

// This thread's tile buffer of `n` values of type t: kept between calls (a frozen model runs the
// same shapes every step), one per type so the memory is only ever used as its own type.
void* tile_buffer(DType t, int64_t n) {
  thread_local std::vector<float> f32;
  thread_local std::vector<uint16_t> bf16;
  if (t == DType::f32) {
    if (f32.size() < size_t(n)) f32.resize(size_t(n));
    return f32.data();
  }
  if (bf16.size() < size_t(n)) bf16.resize(size_t(n));
  return bf16.data();
}

void check_view(const Nf4View& w) {
  ZT_CHECK(w.codes && w.rows > 0 && w.cols > 0 && (w.absmax || (w.qabsmax && w.absmax_scale)),
           "NF4 weight view is empty or lacks its absmax");
}

}  // namespace

size_t Nf4Tensor::bytes() const {
  size_t b = codes.size() + absmax.size() * sizeof(float);
  if (double_quant()) b += qabsmax.size() + absmax_scale.size() * sizeof(float) + sizeof(offset);
  return b;
}

int64_t nf4_stored_bytes(int64_t n, int blocksize, bool double_quant) {
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  const int64_t scales = double_quant ? blocks + (blocks + kNf4NestedBlock - 1) / kNf4NestedBlock * 4 + 4 : 4 * blocks;
  return (n + 1) / 2 + scales;
}

int64_t int8_stored_bytes(int64_t rows, int64_t cols) { return rows * cols + 4 * rows; }

Nf4View Nf4Tensor::view() const {
  Nf4View v;
  v.codes = codes.data();
  v.absmax = double_quant() ? nullptr : absmax.data();
  v.qabsmax = double_quant() ? qabsmax.data() : nullptr;
  v.absmax_scale = double_quant() ? absmax_scale.data() : nullptr;
  v.offset = offset;
  v.rows = rows;
  v.cols = cols;
  v.blocksize = blocksize;
  v.int8 = int8;
  return v;
}

Nf4Tensor int8_quantize_weight(const float* w, int64_t rows, int64_t cols) {
  ZT_CHECK(rows > 0 && cols > 0, "int8 quantization of an empty tensor (", rows, " x ", cols, ")");
  ZT_CHECK(cols <= (int64_t(1) << 30), "int8 quantization: rows of ", cols, " values are too long");
  Nf4Tensor t;
  t.int8 = true;
  t.rows = rows;
  t.cols = cols;
  t.blocksize = int(cols);
  t.codes.assign(size_t(rows * cols), 0);
  t.absmax.assign(size_t(rows), 0.f);
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t(1) << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float am = 0.f;
    for (int64_t j = 0; j < cols; ++j) am = std::max(am, std::fabs(row[j]));
    t.absmax[size_t(r)] = am;
    if (am == 0.f) continue;
    const float scale = 127.0f / am;
    for (int64_t j = 0; j < cols; ++j) {
      const float c = std::clamp(std::nearbyint(row[j] * scale), -127.f, 127.f);
      t.codes[size_t(r * cols + j)] = uint8_t(int8_t(c));
    }
  }
  return t;
}

Nf4Tensor nf4_quantize_weight(const float* w, int64_t rows, int64_t cols, int blocksize, bool double_quant) {
  check_blocksize(blocksize);
  ZT_CHECK(rows > 0 && cols > 0, "NF4 quantization of an empty tensor (", rows, " x ", cols, ")");
  Nf4Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.blocksize = blocksize;
  const int64_t n = rows * cols, nb = (n + blocksize - 1) / blocksize;
  t.codes.assign(size_t((n + 1) / 2), 0);
  t.absmax.resize(size_t(nb));
  // Blocks are even-sized, so each starts on a byte: the blocks fill disjoint bytes in parallel.
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 16))
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t lo = b * blocksize, len = std::min<int64_t>(blocksize, n - lo);
    uint8_t code[4096], pad;
    t.absmax[size_t(b)] = quantize_block_nf4(w + lo, len, code, &pad);
    if (len % 2) code[len] = pad;
    for (int64_t j = 0; j < (len + 1) / 2; ++j)
      t.codes[size_t(lo / 2 + j)] = uint8_t(code[2 * j] << 4 | code[2 * j + 1]);
  }
  if (double_quant) {
    double_quantize(t.absmax, t);
    t.absmax.clear();
    t.absmax.shrink_to_fit();
  }
  return t;
}

Nf4Tensor nf4_quantize(const float* w, int64_t n, int blocksize, bool double_quant) {
  return nf4_quantize_weight(w, 1, n, blocksize, double_quant);
}

void nf4_block_absmax(const Nf4View& q, int64_t b0, int64_t b1, float* out) {
  if (!q.nested()) {
    std::copy(q.absmax + b0, q.absmax + b1, out);
    return;
  }
  for (int64_t b = b0; b < b1; ++b) {
    const float decoded = kDynamicSigned[q.qabsmax[b]] * q.absmax_scale[b / kNf4NestedBlock];
    out[b - b0] = decoded + q.offset;
  }
}

namespace {
// Values [i0, i1) as T: per block, the 16 possible values (code * absmax, converted once), then a
// byte (two values) at a time. bf16 rounds each fp32 value to nearest even, as an element-wise
// conversion would, without a second pass over the output.
template <class T, class Convert>
void dequantize_range_as(const Nf4View& q, int64_t i0, int64_t i1, T* out, Convert convert) {
  if (q.int8) {  // int8_vectorwise_dequant: code * (SCB * (1 / 127)), one scale a row
    for (int64_t i = i0; i < i1;) {
      const int64_t r = i / q.cols, end = std::min(i1, (r + 1) * q.cols);
      const float scale = q.absmax[r] * 7.874015718698502e-3f;
      for (; i < end; ++i) out[i - i0] = convert(float(int8_t(q.codes[i])) * scale);
    }
    return;
  }
  const int64_t bs = q.blocksize;
  const uint8_t* codes = q.codes;
  for (int64_t b = i0 / bs; b * bs < i1; ++b) {
    float am;
    nf4_block_absmax(q, b, b + 1, &am);
    T lut[16];
    for (int c = 0; c < 16; ++c) lut[c] = convert(kNf4Code[c] * am);
    // Element i: the high nibble of byte i / 2 when i is even, the low one when odd.
    int64_t i = std::max(i0, b * bs);
    const int64_t hi = std::min(i1, (b + 1) * bs);
    if ((i & 1) && i < hi) {  // a range starting mid-byte
      out[i - i0] = lut[codes[i >> 1] & 15];
      ++i;
    }
    for (; i + 1 < hi; i += 2) {
      const uint8_t byte = codes[i >> 1];
      out[i - i0] = lut[byte >> 4];
      out[i + 1 - i0] = lut[byte & 15];
    }
    if (i < hi) out[i - i0] = lut[codes[i >> 1] >> 4];
  }
}
}  // namespace

void nf4_dequantize_range(const Nf4View& q, int64_t i0, int64_t i1, float* out) {
  dequantize_range_as(q, i0, i1, out, [](float v) { return v; });
}

void nf4_dequantize_range(const Nf4View& q, int64_t i0, int64_t i1, uint16_t* out) {
  dequantize_range_as(q, i0, i1, out, [](float v) { return f32_to_bf16(v); });
}

void nf4_dequantize(const Nf4View& q, float* out) {
  const int64_t n = q.numel(), chunk = int64_t(1) << 14;
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 16))
  for (int64_t a = 0; a < n; a += chunk) nf4_dequantize_range(q, a, std::min(n, a + chunk), out + a);
}

void nf4_dequantize_rows(const Nf4View& q, int64_t r0, int64_t r1, DType t, void* tile) {
  check_compute_type(t);
  ZT_ASSERT(0 <= r0 && r0 <= r1 && r1 <= q.rows, "rows [", r0, ", ", r1, ") of ", q.rows);
  const int64_t c = q.cols;
#pragma omp parallel for schedule(static) if ((r1 - r0) * c >= (int64_t(1) << 15))
  for (int64_t r = r0; r < r1; ++r) {
    if (t == DType::f32)
      nf4_dequantize_range(q, r * c, (r + 1) * c, static_cast<float*>(tile) + (r - r0) * c);
    else
      nf4_dequantize_range(q, r * c, (r + 1) * c, static_cast<uint16_t*>(tile) + (r - r0) * c);
  }
}

void nf4_linear_forward_rows(DType t, float* y, int64_t ldy, const void* x, const Nf4View& w, int64_t row0,
                             int64_t rows, int64_t N, float beta) {
  check_compute_type(t);
  check_view(w);
  ZT_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= w.rows, "nf4: rows [", row0, ", ", row0 + rows,
           ") outside the weight's ", w.rows);
  if (N == 0 || rows == 0) return;
  const int64_t tr = tile_rows(w, t), end = row0 + rows;
  void* tile = tile_buffer(t, tr * w.cols);
  // Each tile of W's rows gives the matching columns of y: y[:, r0:r1] = x W[r0:r1]^T.
  for (int64_t r0 = row0; r0 < end; r0 += tr) {
    const int64_t r1 = std::min(end, r0 + tr);
    nf4_dequantize_rows(w, r0, r1, t, tile);
    gemm_typed(t, false, true, N, r1 - r0, w.cols, 1.f, x, w.cols, tile, w.cols, beta, y + (r0 - row0), ldy);
  }
}

void nf4_linear_forward(DType t, float* y, const void* x, const Nf4View& w, int64_t N, float beta) {
  nf4_linear_forward_rows(t, y, w.rows, x, w, 0, w.rows, N, beta);
}

void nf4_linear_backward_input_rows(DType t, float* dx, const void* dy, int64_t ld_dy, const Nf4View& w, int64_t row0,
                                    int64_t rows, int64_t N, float beta) {
  check_compute_type(t);
  check_view(w);
  ZT_CHECK(row0 >= 0 && rows > 0 && row0 + rows <= w.rows, "nf4: rows [", row0, ", ", row0 + rows,
           ") outside the weight's ", w.rows);
  if (N == 0) return;
  const int64_t tr = tile_rows(w, t), elt = int64_t(dtype_size(t)), end = row0 + rows;
  void* tile = tile_buffer(t, tr * w.cols);
  // A tile of W's rows is a slice of the reduction: dx += dy[:, r0:r1] W[r0:r1] (beta on the first).
  for (int64_t r0 = row0; r0 < end; r0 += tr) {
    const int64_t r1 = std::min(end, r0 + tr);
    nf4_dequantize_rows(w, r0, r1, t, tile);
    const void* dy_cols = static_cast<const char*>(dy) + (r0 - row0) * elt;
    gemm_typed(t, false, false, N, w.cols, r1 - r0, 1.f, dy_cols, ld_dy, tile, w.cols, r0 == row0 ? beta : 1.f, dx,
               w.cols);
  }
}

void nf4_linear_backward_input(DType t, float* dx, const void* dy, const Nf4View& w, int64_t N, float beta) {
  nf4_linear_backward_input_rows(t, dx, dy, w.rows, w, 0, w.rows, N, beta);
}

void nf4_tile_rows_for_tests(int64_t rows) { g_tile_rows = rows; }

}  // namespace zt::kernels
