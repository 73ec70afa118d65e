// block_norm.cpp: OLMo-2's q / k norm under tensor parallelism (see block.h). The norm runs over
// the whole q (or k) projection, of which each rank holds its heads' columns, so the row sums it
// needs (the sum of squares forward; sum(dout w x) backward) are reduced over the group. These
// are plain loops on the host: tensor parallelism runs on the CPU only (docs/gpu.md).
#include <cmath>
#include <vector>

#include "core/profile.h"
#include "nn/block.h"

namespace zt::nn {

// x (N, C) is this rank's C of the norm's width C * size / replicas: `replicas` ranks hold each
// column (replicated KV heads), so the reduced sums count every column `replicas` times.
void Block::sharded_norm_forward(const Norm& n, TensorView out, TensorView rstd, TensorView x, int replicas,
                                 const BlockScratch& s) const {
  ZT_PROFILE("qk_norm");
  const int64_t N = rows(x), C = n.C;
  const double width = double(C) * tp->size() / replicas;
  const float* xp = x.as<const float>();
  const float* w = n.w.as<const float>();
  float* sums = s.qk_sums.as<float>();
  float* op = out.as<float>();
  float* rp = rstd.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < C; ++j) acc += double(xp[i * C + j]) * xp[i * C + j];
    sums[i] = float(acc);
  }
  tp->all_reduce_sum(sums, N);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float r = float(1.0 / std::sqrt(double(sums[i]) / replicas / width + double(n.eps)));
    rp[i] = r;
    for (int64_t j = 0; j < C; ++j) op[i * C + j] = xp[i * C + j] * r * w[j];
  }
}

// dx += d(out)/dx^T dout; dw += sum over rows of dout x rstd. With y = x r w and r = (mean x^2 +
// eps)^-1/2 over the whole width: dx_j = r w_j g_j - x_j r^3 / width * sum_k g_k w_k x_k, whose sum
// over k the group reduces. A replicated column's gradient is split over its replicas (each
// rank's queries' share), which the caller sums, so each takes 1 / replicas of the shared term.
void Block::sharded_norm_backward(const Norm& n, TensorView dx, TensorView dout, TensorView x, TensorView rstd,
                                  int replicas, const BlockScratch& s) const {
  ZT_PROFILE("qk_norm");
  const int64_t N = rows(x), C = n.C;
  const double width = double(C) * tp->size() / replicas;
  const float* xp = x.as<const float>();
  const float* gp = dout.as<const float>();
  const float* w = n.w.as<const float>();
  const float* rp = rstd.as<const float>();
  float* sums = s.qk_sums.as<float>();
  float* dxp = dx.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < C; ++j) acc += double(gp[i * C + j]) * w[j] * xp[i * C + j];
    sums[i] = float(acc);
  }
  tp->all_reduce_sum(sums, N);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const double r = rp[i], shared = double(sums[i]) / replicas * r * r * r / width;
    for (int64_t j = 0; j < C; ++j) dxp[i * C + j] += float(r * w[j] * gp[i * C + j] - xp[i * C + j] * shared);
  }
  if (!n.dw) return;
  float* dw = n.dw.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < C; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < N; ++i) acc += double(gp[i * C + j]) * xp[i * C + j] * rp[i];
    dw[j] += float(acc);
  }
}

}  // namespace zt::nn
