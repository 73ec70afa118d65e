// adamw.cpp: see adamw.h.
#include "optim/adamw.h"

#include <cmath>

namespace zt::optim {

AdamW::AdamW(int64_t numel, std::vector<ParamRange> ranges, AdamWConfig cfg)
    : numel_(numel),
      ranges_(std::move(ranges)),
      cfg_(cfg),
      m_(size_t(numel) * sizeof(float), MemCategory::optimizer_state),
      v_(size_t(numel) * sizeof(float), MemCategory::optimizer_state) {}

void AdamW::step(float* params, const float* grads, double lr) {
  std::vector<AdamWPiece> pieces;
  pieces.reserve(ranges_.size());
  for (const ParamRange& r : ranges_)
    pieces.push_back({params + r.offset, grads + r.offset, r.offset, r.numel, r.decay});
  step_pieces(pieces, lr);
}

void AdamW::step_pieces(const std::vector<AdamWPiece>& pieces, double lr) {
  ++t_;
  const float b1 = float(cfg_.beta1), b2 = float(cfg_.beta2), eps = float(cfg_.eps);
  const float one_minus_b1 = float(1.0 - cfg_.beta1), one_minus_b2 = float(1.0 - cfg_.beta2);
  // Bias corrections in double then rounded, as PyTorch computes them in Python floats.
  const double bc1 = 1.0 - std::pow(cfg_.beta1, double(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, double(t_));
  const float step_size = float(lr / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
  float* m = m_.as<float>();
  float* v = v_.as<float>();
  for (const AdamWPiece& r : pieces) {
    const float decay = r.decay ? float(1.0 - lr * cfg_.weight_decay) : 1.0f;
    float* p = r.params;
    const float* g = r.grads;
    float* mr = m + r.state_offset;
    float* vr = v + r.state_offset;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < r.numel; ++i) {
      float pi = p[i] * decay;
      float mi = mr[i] * b1 + g[i] * one_minus_b1;
      float vi = vr[i] * b2 + g[i] * g[i] * one_minus_b2;
      mr[i] = mi;
      vr[i] = vi;
      p[i] = pi - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    }
  }
}

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
