// dropout.cpp: see dropout.h. Elementwise and memory-bound beside the GEMMs it feeds, so plain
// loops over OpenMP threads serve on every ISA.
#include "kernels/dropout.h"

#include "core/error.h"

namespace zt::kernels {

namespace {
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

bool dropout_keeps(uint64_t seed, int64_t i, float p) {
  const double u = double(mix(seed + 0x9E3779B97F4A7C15ull * uint64_t(i + 1)) >> 11) * 0x1.0p-53;
  return u >= double(p);
}

void dropout_forward(DType t, void* dst, const void* src, int64_t n, float p, uint64_t seed, DropoutCut cut) {
  ZT_ASSERT(t == DType::f32 || t == DType::bf16, "dropout runs on f32 or bf16");
  const float k = 1.0f / (1.0f - p);
  if (t == DType::f32) {
    float* d = static_cast<float*>(dst);
    const float* s = static_cast<const float*>(src);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = dropout_keeps(seed, cut.index(i), p) ? s[i] * k : 0.f;
    return;
  }
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = dropout_keeps(seed, cut.index(i), p) ? f32_to_bf16(bf16_to_f32(s[i]) * k) : 0;
}

void dropout_backward_add(float* dx, const float* g, int64_t n, float p, uint64_t seed, DropoutCut cut) {
  const float k = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    if (dropout_keeps(seed, cut.index(i), p)) dx[i] += g[i] * k;
}

}  // namespace zt::kernels
