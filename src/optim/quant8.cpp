// quant8.cpp: see quant8.h.
#include "optim/quant8.h"

#include <cmath>

namespace zt::optim {

uint8_t quantize_nearest(const float* map, float x) {
  // Branch-free binary search for the first code >= x, then the nearer of it and the one below.
  int lo = 0;
  for (int step = 128; step > 0; step >>= 1)
    if (map[lo + step - 1] < x) lo += step;
  if (map[lo] < x) return uint8_t(lo);  // beyond the last code
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

}  // namespace zt::optim
