// adamw.cu: AdamW over every piece of a flat parameter buffer in one launch (ops_cuda.h), with
// optim/adamw.cpp's arithmetic: the bias corrections are computed in double on the host and
// rounded to fp32, the update runs in fp32 in the same order. The pieces are concatenated into
// one index space; each thread finds its piece by binary search over their starts (a model has
// a few hundred pieces: 8 or 9 steps, against a memory-bound update of 16 bytes per element).
#include <cmath>
#include <vector>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/ops_cuda.h"

namespace zt::kernels::cuda {

namespace {

struct DevicePiece {
  float* params;
  const float* grads;
  int64_t state_offset, start;  // start: the piece's first index in the concatenation
  float decay;                  // 1 - lr * weight_decay, or 1
};

__global__ void adamw_k(const DevicePiece* pieces, int n_pieces, int64_t total, float* m, float* v, float b1, float b2,
                        float one_minus_b1, float one_minus_b2, float step_size, float bc2_sqrt, float eps) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    int lo = 0, hi = n_pieces - 1;
    while (lo < hi) {  // the last piece whose start <= idx
      const int mid = (lo + hi + 1) / 2;
      if (pieces[mid].start <= idx)
        lo = mid;
      else
        hi = mid - 1;
    }
    const DevicePiece& p = pieces[lo];
    const int64_t i = idx - p.start, s = p.state_offset + i;
    const float g = p.grads[i];
    const float pi = p.params[i] * p.decay;
    const float mi = m[s] * b1 + g * one_minus_b1;
    const float vi = v[s] * b2 + g * g * one_minus_b2;
    m[s] = mi;
    v[s] = vi;
    p.params[i] = pi - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

}  // namespace

void adamw_step(const AdamWPiece* pieces, int n_pieces, float* exp_avg, float* exp_avg_sq, const AdamWHyper& h) {
  std::vector<DevicePiece> table;
  table.reserve(size_t(n_pieces));
  int64_t total = 0;
  for (int i = 0; i < n_pieces; ++i) {
    if (pieces[i].numel == 0) continue;
    const float decay = pieces[i].decay ? float(1.0 - h.lr * h.weight_decay) : 1.0f;
    table.push_back({pieces[i].params, pieces[i].grads, pieces[i].state_offset, total, decay});
    total += pieces[i].numel;
  }
  if (total == 0) return;
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  // The table goes with each launch (a few KiB) into a buffer kept across steps.
  static DeviceBuffer dev;
  grow_device_buffer(&dev, table.size() * sizeof(DevicePiece), "AdamW piece table");
  copy_to_device(dev.data(), table.data(), table.size() * sizeof(DevicePiece));
  int64_t blocks = (total + 255) / 256;
  if (blocks > 65535 * 16) blocks = 65535 * 16;
  adamw_k<<<unsigned(blocks), 256>>>(dev.as<DevicePiece>(), int(table.size()), total, exp_avg, exp_avg_sq,
                                     float(h.beta1), float(h.beta2), float(1.0 - h.beta1), float(1.0 - h.beta2),
                                     float(h.lr / bc1), float(std::sqrt(bc2)), float(h.eps));
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace zt::kernels::cuda
