// quantize.cpp: see quantize.h. Blocks are independent, so they are spread over the
// OpenMP threads; inside a block the loops are plain and vectorize.
#include "parallel/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace zt::parallel {
namespace {

void check_args(int64_t n, int block) {
  ZT_CHECK(block > 0, "quantization block size must be positive, got ", block);
  ZT_CHECK(n >= 0, "negative element count ", n);
}

template <bool kAdd>
void dequant(float* x, const int8_t* q, const float* scales, int64_t n, int block) {
  check_args(n, block);
  const int64_t nb = quant_num_blocks(n, block);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    const float s = scales[b];
    if (!std::isfinite(s)) {
      // The block held a NaN or an infinity (its q are 0): make every value NaN.
      for (int64_t i = lo; i < hi; ++i)
        x[i] = kAdd ? x[i] + std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    for (int64_t i = lo; i < hi; ++i) {
      float v = float(q[i]) * s;
      x[i] = kAdd ? x[i] + v : v;
    }
  }
}

}  // namespace

int64_t quant_num_blocks(int64_t n, int block) { return (n + block - 1) / block; }

void quantize_int8(int8_t* q, float* scales, const float* x, int64_t n, int block) {
  check_args(n, block);
  const int64_t nb = quant_num_blocks(n, block);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    float amax = 0.f;
    bool finite = true;
    for (int64_t i = lo; i < hi; ++i) {
      amax = std::max(amax, std::fabs(x[i]));
      finite &= std::isfinite(x[i]);
    }
    if (!finite) {
      // Converting NaN or inf to an integer is undefined: store 0 and mark the scale.
      scales[b] = std::numeric_limits<float>::quiet_NaN();
      std::memset(q + lo, 0, size_t(hi - lo));
      continue;
    }
    const float s = amax / 127.f;
    scales[b] = s;
    if (s == 0.f) {
      std::memset(q + lo, 0, size_t(hi - lo));
      continue;
    }
    for (int64_t i = lo; i < hi; ++i) {
      // |x / s| <= 127 up to rounding; the clamp guards the last ulp.
      float v = std::nearbyint(x[i] / s);
      q[i] = int8_t(std::clamp(v, -127.f, 127.f));
    }
  }
}

void dequantize_int8(float* x, const int8_t* q, const float* scales, int64_t n, int block) {
  dequant<false>(x, q, scales, n, block);
}

void dequantize_int8_add(float* acc, const int8_t* q, const float* scales, int64_t n, int block) {
  dequant<true>(acc, q, scales, n, block);
}

size_t quant_packed_bytes(int64_t n, int block) {
  check_args(n, block);
  return size_t(quant_num_blocks(n, block)) * sizeof(float) + size_t(n);
}

void quantize_int8_packed(void* dst, const float* x, int64_t n, int block) {
  auto* scales = static_cast<float*>(dst);
  quantize_int8(reinterpret_cast<int8_t*>(scales + quant_num_blocks(n, block)), scales, x, n, block);
}

void dequantize_int8_packed(float* x, const void* src, int64_t n, int block) {
  const auto* scales = static_cast<const float*>(src);
  dequantize_int8(x, reinterpret_cast<const int8_t*>(scales + quant_num_blocks(n, block)), scales, n, block);
}

}  // namespace zt::parallel
