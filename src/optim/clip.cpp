// clip.cpp: see clip.h.
#include "optim/clip.h"

#include <algorithm>
#include <cmath>

namespace zt::optim {

double grad_norm(const float* grads, int64_t numel) {
  double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
  for (int64_t i = 0; i < numel; ++i) s += double(grads[i]) * double(grads[i]);
  return std::sqrt(s);
}

void clip_grads(float* grads, int64_t numel, double norm, double max_norm, double unscale) {
  const double coef = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
  if (coef >= 1.0 && unscale == 1.0) return;
  // Two roundings as PyTorch does them (unscale_, then clip_grad_norm_), unless one is 1.
  const float u = float(unscale), c = float(coef);
  if (unscale != 1.0 && coef < 1.0) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < numel; ++i) grads[i] = grads[i] * u * c;
    return;
  }
  const float k = unscale != 1.0 ? u : c;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < numel; ++i) grads[i] *= k;
}

}  // namespace zt::optim
