// clip.cpp: see clip.h.
#include "optim/clip.h"

#include <cmath>

namespace zt::optim {

double grad_norm(const float* grads, int64_t numel) {
  double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
  for (int64_t i = 0; i < numel; ++i) s += double(grads[i]) * double(grads[i]);
  return std::sqrt(s);
}

void clip_grads(float* grads, int64_t numel, double norm, double max_norm) {
  if (max_norm <= 0) return;
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return;
  float c = float(coef);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < numel; ++i) grads[i] *= c;
}

}  // namespace zt::optim
