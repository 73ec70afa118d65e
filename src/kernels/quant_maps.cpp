// quant_maps.cpp: see quant_maps.h.
#include "kernels/quant_maps.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace zt::kernels {

namespace {

// Floats in an unsigned order (negative ones reversed below the positive ones); the top kBits
// of it name a bucket: sign, exponent and 5 mantissa bits.
constexpr int kBits = 14;
inline uint32_t ordered(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Per bucket, the first code not below the bucket's smallest float: a lookup then a step or two
// replaces the 8-step binary search, the 8-bit optimizers' hot spot.
struct CodeIndex {
  std::vector<uint8_t> first;
  explicit CodeIndex(const float* map) : first(size_t(1) << kBits) {
    int c = 0;
    for (uint32_t b = 0; b < first.size(); ++b) {
      const uint32_t low = b << (32 - kBits);  // the bucket's smallest ordered value
      while (c < 256 && ordered(map[c]) < low) ++c;
      first[b] = uint8_t(c > 255 ? 255 : c);
    }
  }
};

const CodeIndex& index_of(const float* map) {
  static const CodeIndex s(kDynamicSigned), u(kDynamicUnsigned);
  return map == kDynamicSigned ? s : u;
}

}  // namespace

uint8_t quantize_nearest(const float* map, float x) {
  if (map == kDynamicSigned || map == kDynamicUnsigned) {
    // The first code >= x from the bucket's first code, then the nearer of it and the one below.
    int lo = index_of(map).first[ordered(x) >> (32 - kBits)];
    while (lo < 255 && map[lo] < x) ++lo;
    if (map[lo] < x) return uint8_t(lo);  // beyond the last code
    if (lo == 0) return 0;
    return std::fabs(x - map[lo - 1]) <= std::fabs(map[lo] - x) ? uint8_t(lo - 1) : uint8_t(lo);
  }
  // Another sorted map: binary search for the first code >= x.
  int lo = 0;
  for (int step = 128; step > 0; step >>= 1)
    if (map[lo + step - 1] < x) lo += step;
  if (map[lo] < x) return uint8_t(lo);
  if (lo == 0) return 0;
  return std::fabs(x - map[lo - 1]) <= std::fabs(map[lo] - x) ? uint8_t(lo - 1) : uint8_t(lo);
}

float quantize_block(const float* map, const float* x, int64_t n, uint8_t* codes) {
  float absmax = 0.f;
  for (int64_t i = 0; i < n; ++i) absmax = std::fmax(absmax, std::fabs(x[i]));
  if (absmax == 0.f) absmax = 1.f;
  for (int64_t i = 0; i < n; ++i) codes[i] = quantize_nearest(map, x[i] / absmax);
  return absmax;
}

void dequantize_block(const float* map, const uint8_t* codes, int64_t n, float absmax, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = map[codes[i]] * absmax;
}

uint8_t dynamic_quantize_bnb(const float* map, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.f, upper = 1.f, val = map[pivot];
  for (int step = 64; step > 0; step >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += step;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= step;
    }
    val = map[pivot];
  }
  // The brackets still at their initial codes hold the map's ends, not the search's +-1.
  if (upper_pivot == 255) upper = map[255];
  if (lower_pivot == 0) lower = map[0];
  if (x > val) return uint8_t(x > (upper + val) * 0.5f ? upper_pivot : pivot);
  return uint8_t(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

}  // namespace zt::kernels
