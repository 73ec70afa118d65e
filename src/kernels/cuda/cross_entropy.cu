// cross_entropy.cu: see cross_entropy_cuda.h. The row kernel gives each token's row of V logits
// one block: three passes over the row (max; exp and sum, the exponentials written back; scale
// into the gradient), reductions through shared memory. Each row's loss is
// log(sum) - (z_target - max), as on the CPU, in double on the host from the row's float sum and
// shifted target logit.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/cross_entropy_cuda.h"
#include "kernels/cuda/gemm_cuda.h"

namespace zt::kernels::cuda {

namespace {

constexpr int kThreads = 512;

// op 0: max, op 1: sum. Every thread returns the block's result.
__device__ float block_reduce(float v, int op, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = op == 0 ? fmaxf(v, u) : v + u;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? shared[lane] : (op == 0 ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float u = __shfl_xor_sync(0xffffffffu, v, o);
      v = op == 0 ? fmaxf(v, u) : v + u;
    }
    if (lane == 0) shared[32] = v;
  }
  __syncthreads();
  const float r = shared[32];
  __syncthreads();  // shared[] is reused by the next reduction
  return r;
}

// z (rows, V) logits -> gradient (when grad), row_stats[2*i] = sum of exp, [2*i+1] = z_t - max.
// cap > 0 (Gemma 2's final_logit_softcapping): the logits become cap tanh(z / cap) first, and
// the gradient goes through 1 - tanh^2; the capped logits stay in z until the gradient pass,
// which takes the exponentials again (the CPU keeps 1 - tanh^2 in a buffer instead).
__global__ void softmax_ce_k(float* z, __nv_bfloat16* low, float* row_stats, const int32_t* targets, int V,
                             float grad_scale, bool grad, float cap) {
  __shared__ float shared[33];
  const int64_t i = blockIdx.x;
  float* zr = z + i * V;
  const int32_t tgt = targets[i];
  if (tgt == kIgnoreIndex) {
    if (grad) {
      for (int v = threadIdx.x; v < V; v += blockDim.x) {
        zr[v] = 0.0f;
        if (low) low[i * V + v] = __float2bfloat16_rn(0.0f);
      }
    }
    if (threadIdx.x == 0) row_stats[2 * i] = row_stats[2 * i + 1] = 0.0f;
    return;
  }
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    if (cap > 0.f) zr[v] = cap * tanhf(zr[v] / cap);
    mx = fmaxf(mx, zr[v]);
  }
  mx = block_reduce(mx, 0, shared);
  const float shifted = zr[tgt] - mx;
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float e = expf(zr[v] - mx);
    if (cap == 0.f) zr[v] = e;
    sum += e;
  }
  sum = block_reduce(sum, 1, shared);
  if (threadIdx.x == 0) {
    row_stats[2 * i] = sum;
    row_stats[2 * i + 1] = shifted;
  }
  if (!grad) return;
  const float ks = grad_scale / sum;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float g = (cap > 0.f ? expf(zr[v] - mx) : zr[v]) * ks;
    if (v == tgt) g -= grad_scale;
    if (cap > 0.f) {
      const float t = zr[v] / cap;
      g *= 1.0f - t * t;
    }
    zr[v] = g;
    if (low) low[i * V + v] = __float2bfloat16_rn(g);
  }
}

}  // namespace

double lmhead_ce(float* dx, float* dw, const float* x, const float* w, const int32_t* targets, const LmHeadDims& d,
                 float grad_scale, float* scratch, int64_t* count, const LmHeadCompute* compute, double* token_loss) {
  const int C = d.C, V = d.V;
  LmHeadCompute fp32{DType::f32, x, w, nullptr, false};
  const LmHeadCompute& k = compute ? *compute : fp32;
  if (d.token_rank)
    throw Error("GPU lm head: the rank of a target among the vocabulary (--eval_probes) is computed on the CPU only");
  if (k.t != DType::f32 && k.t != DType::bf16)
    throw Error("GPU lm head: fp16 compute is not supported on the GPU yet; use --bf16 or fp32");
  const size_t es = dtype_size(k.t);
  std::vector<int32_t> host_targets(size_t(d.N));
  copy_to_host(host_targets.data(), targets, host_targets.size() * sizeof(int32_t));
  check_lm_targets(host_targets.data(), d.N, V);
  // Each row's (sum of exp, shifted target logit) stays on the device until the last chunk: one
  // copy per call instead of a synchronisation per chunk.
  static DeviceBuffer stats;
  grow_device_buffer(&stats, size_t(2 * std::max<int64_t>(d.N, 1)) * sizeof(float), "lm head row statistics");
  for (int64_t r0 = 0; r0 < d.N; r0 += d.chunk) {
    const int64_t rows = std::min(d.chunk, d.N - r0);
    const void* xc = static_cast<const char*>(k.x) + size_t(r0) * C * es;
    gemm(k.t, false, true, rows, V, C, 1.0f, xc, C, k.w, C, 0.0f, scratch, V);
    auto* low = k.t == DType::bf16 && dx ? static_cast<__nv_bfloat16*>(k.dlogits) : nullptr;
    softmax_ce_k<<<unsigned(rows), kThreads>>>(scratch, low, stats.as<float>() + 2 * r0, targets + r0, V, grad_scale,
                                               dx != nullptr, d.softcap);
    ZT_CUDA_LAUNCH_CHECK();
    if (dx) {
      const void* g = low ? static_cast<const void*>(low) : scratch;
      gemm(k.t, false, false, rows, C, V, 1.0f, g, V, k.w, C, 0.0f, dx + r0 * C, C);
      gemm(k.t, true, false, V, C, rows, 1.0f, g, V, xc, C, 1.0f, dw, C);
    }
  }
  std::vector<float> host_stats(size_t(2 * d.N));
  copy_to_host(host_stats.data(), stats.data(), host_stats.size() * sizeof(float));
  double loss = 0.0;
  int64_t counted = 0;
  for (int64_t i = 0; i < d.N; ++i) {
    if (host_targets[size_t(i)] == kIgnoreIndex) {
      if (token_loss) token_loss[i] = 0.0;
      continue;
    }
    const double li = std::log(double(host_stats[size_t(2 * i)])) - double(host_stats[size_t(2 * i + 1)]);
    loss += li;
    ++counted;
    if (token_loss) token_loss[i] = li;
  }
  if (count) *count = counted;
  return loss;
}

}  // namespace zt::kernels::cuda
