// ops.cu: see ops_cuda.h. Row kernels give each row one warp (C is at most a few thousand:
// a warp's 32 lanes stride the row, shuffles reduce); parameter gradients are column sums over
// rows, taken by column_sums_* kernels whose blocks each own a slice of rows and add their
// partial sums with one atomic per column.
#include <cuda_bf16.h>

#include <algorithm>
#include <vector>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/ops_cuda.h"

namespace zt::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

int blocks_for(int64_t n, int per_block = kThreads) {
  int64_t b = (n + per_block - 1) / per_block;
  return int(b < 65535 * 8 ? b : 65535 * 8);  // grid-stride loops cover the rest
}

int row_blocks(int64_t N) { return int((N + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// Row slices for the column-sum kernels: enough blocks to fill the GPU, rows per block >= 32.
dim3 column_grid(int64_t N, int C, int64_t* rows_per_block) {
  int64_t groups = (N + 63) / 64;
  if (groups > 256) groups = 256;
  *rows_per_block = (N + groups - 1) / groups;
  return dim3((C + kThreads - 1) / kThreads, unsigned(groups));
}

__global__ void layernorm_fwd_k(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                int64_t N, int C, float eps) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* xr = x + row * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += xr[c];
  const float m = warp_sum(s) / C;
  float v = 0;
  for (int c = lane; c < C; c += 32) v += (xr[c] - m) * (xr[c] - m);
  const float r = 1.0f / sqrtf(warp_sum(v) / C + eps);
  float* o = out + row * C;
  for (int c = lane; c < C; c += 32) o[c] = (xr[c] - m) * r * w[c] + b[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dx += per row; mean == nullptr means RMSNorm (no centring, no db).
// woff: the weight's offset (Gemma's (1 + w) RMSNorm: 1), added in fp32 as the CPU's 1 + w.
__global__ void norm_bwd_dx_k(float* dx, const float* dout, const float* x, const float* w, const float* mean,
                              const float* rstd, int64_t N, int C, float woff) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* xr = x + row * C;
  const float* dr = dout + row * C;
  const float m = mean ? mean[row] : 0.0f, r = rstd[row];
  float sd = 0, sdx = 0;
  for (int c = lane; c < C; c += 32) {
    const float g = dr[c] * (w[c] + woff);
    sd += g;
    sdx += g * (xr[c] - m) * r;
  }
  sd = warp_sum(sd) / C;
  sdx = warp_sum(sdx) / C;
  float* o = dx + row * C;
  for (int c = lane; c < C; c += 32) {
    const float xh = (xr[c] - m) * r;
    o[c] += r * (dr[c] * (w[c] + woff) - (mean ? sd : 0.0f) - xh * sdx);
  }
}

// dw[c] += sum_rows dout * xhat, db[c] += sum_rows dout (db may be null).
__global__ void norm_bwd_dw_k(float* dw, float* db, const float* dout, const float* x, const float* mean,
                              const float* rstd, int64_t N, int C, int64_t rows_per_block) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < N ? r0 + rows_per_block : N;
  float aw = 0, ab = 0;
  for (int64_t i = r0; i < r1; ++i) {
    const float d = dout[i * C + c];
    aw += d * (x[i * C + c] - (mean ? mean[i] : 0.0f)) * rstd[i];
    ab += d;
  }
  atomicAdd(dw + c, aw);
  if (db) atomicAdd(db + c, ab);
}

__global__ void rmsnorm_fwd_k(float* out, float* rstd, const float* x, const float* w, int64_t N, int C, float eps,
                              float woff) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* xr = x + row * C;
  float v = 0;
  for (int c = lane; c < C; c += 32) v += xr[c] * xr[c];
  const float r = 1.0f / sqrtf(warp_sum(v) / C + eps);
  float* o = out + row * C;
  for (int c = lane; c < C; c += 32) o[c] = xr[c] * r * (w[c] + woff);
  if (lane == 0) rstd[row] = r;
}

__device__ __forceinline__ float gelu_tanh(float v) {
  const float s = 0.7978845608028654f;
  return 0.5f * v * (1.0f + tanhf(s * (v + 0.044715f * v * v * v)));
}

__global__ void gelu_fwd_k(float* out, const float* x, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = gelu_tanh(x[i]);
}

__global__ void gelu_bwd_k(float* dx, const float* dout, const float* x, int64_t n) {
  const float s = 0.7978845608028654f, k = 0.044715f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i], t = tanhf(s * (v + k * v * v * v));
    dx[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * s * (1.0f + 3.0f * k * v * v));
  }
}

__global__ void swiglu_fwd_k(float* out, const float* x, int64_t N, int F) {
  const int64_t n = N * F;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, f = i % F;
    const float g = x[r * 2 * F + f], u = x[r * 2 * F + F + f];
    out[i] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void swiglu_bwd_k(float* dx, const float* dout, const float* x, int64_t N, int F) {
  const int64_t n = N * F;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, f = i % F;
    const float g = x[r * 2 * F + f], u = x[r * 2 * F + F + f], s = 1.0f / (1.0f + expf(-g));
    dx[r * 2 * F + F + f] = dout[i] * g * s;
    dx[r * 2 * F + f] = dout[i] * u * (s + g * s * (1.0f - s));
  }
}

// GeGLU (Gemma): gelu_tanh(gate) * up over rows [gate (F) | up (F)], as SwiGLU's layout.
__global__ void geglu_fwd_k(float* out, const float* x, int64_t N, int F) {
  const int64_t n = N * F;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, f = i % F;
    out[i] = gelu_tanh(x[r * 2 * F + f]) * x[r * 2 * F + F + f];
  }
}

__global__ void geglu_bwd_k(float* dx, const float* dout, const float* x, int64_t N, int F) {
  const float s = 0.7978845608028654f, k = 0.044715f;
  const int64_t n = N * F;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, f = i % F;
    const float g = x[r * 2 * F + f], u = x[r * 2 * F + F + f], t = tanhf(s * (g + k * g * g * g));
    dx[r * 2 * F + F + f] = dout[i] * 0.5f * g * (1.0f + t);
    dx[r * 2 * F + f] = dout[i] * u * (0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * s * (1.0f + 3.0f * k * g * g));
  }
}

// One thread per (row, head, i < HS/2) pair; sign -1 rotates back (the backward pass).
__global__ void rope_k(float* qkv, const float* cos_t, const float* sin_t, int B, int T, int heads, int HS,
                       int64_t row_stride, const int32_t* positions, float sign) {
  const int half = HS / 2;
  const int64_t n = int64_t(B) * T * heads * half;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int64_t rh = idx / half;
    const int h = int(rh % heads);
    const int64_t row = rh / heads;
    const int64_t pos = positions ? positions[row] : row % T;
    const float c = cos_t[pos * half + i], s = sign * sin_t[pos * half + i];
    float* xr = qkv + row * row_stride + int64_t(h) * HS;
    const float a = xr[i], b = xr[i + half];
    xr[i] = a * c - b * s;
    xr[i + half] = b * c + a * s;
  }
}

__global__ void embedding_fwd_k(float* out, const int32_t* tok, const float* wte, const float* wpe, int64_t N, int T,
                                int C, const int32_t* positions) {
  const int64_t n = N * C;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / C, c = idx % C;
    float v = wte[int64_t(tok[i]) * C + c];
    if (wpe) v += wpe[(positions ? int64_t(positions[i]) : i % T) * C + c];
    out[idx] = v;
  }
}

__global__ void embedding_bwd_k(float* dwte, float* dwpe, const float* dout, const int32_t* tok, int64_t N, int T,
                                int C, const int32_t* positions) {
  const int64_t n = N * C;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / C, c = idx % C;
    atomicAdd(dwte + int64_t(tok[i]) * C + c, dout[idx]);
    if (dwpe) atomicAdd(dwpe + (positions ? int64_t(positions[i]) : i % T) * C + c, dout[idx]);
  }
}

__global__ void bias_fwd_k(float* y, const float* b, int64_t N, int M) {
  const int64_t n = N * M;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += b[i % M];
}

__global__ void column_sum_k(float* db, const float* dy, int64_t N, int M, int64_t rows_per_block) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= M) return;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < N ? r0 + rows_per_block : N;
  float a = 0;
  for (int64_t i = r0; i < r1; ++i) a += dy[i * M + c];
  atomicAdd(db + c, a);
}

__global__ void add_k(float* y, const float* a, const float* b, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = a[i] + b[i];
}

__global__ void to_bf16_k(__nv_bfloat16* dst, const float* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void from_bf16_k(float* dst, const __nv_bfloat16* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

__global__ void to_bf16_keep_k(__nv_bfloat16* dst, float* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 h = __float2bfloat16_rn(src[i]);
    dst[i] = h;
    src[i] = __bfloat162float(h);
  }
}

__global__ void sum_squares_k(double* partial, const float* x, int64_t n) {
  __shared__ double warp_sums[kWarpsPerBlock];
  double s = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    s += double(x[i]) * double(x[i]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) t += warp_sums[w];
    partial[blockIdx.x] = t;
  }
}

__global__ void scale_k(float* x, int64_t n, float a, float b, bool two) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = two ? x[i] * a * b : x[i] * a;
}

}  // namespace

double sum_squares(const float* x, int64_t n) {
  if (n == 0) return 0.0;
  const int blocks = std::min(blocks_for(n), 1024);
  static DeviceBuffer partial;
  grow_device_buffer(&partial, size_t(blocks) * sizeof(double), "gradient norm partial sums");
  sum_squares_k<<<blocks, kThreads>>>(partial.as<double>(), x, n);
  ZT_CUDA_LAUNCH_CHECK();
  std::vector<double> host(static_cast<size_t>(blocks));
  copy_to_host(host.data(), partial.data(), host.size() * sizeof(double));
  double s = 0;
  for (double v : host) s += v;
  return s;
}

void scale(float* x, int64_t n, float a, float b) {
  if (n == 0) return;
  scale_k<<<blocks_for(n), kThreads>>>(x, n, a, b, b != 1.0f);
  ZT_CUDA_LAUNCH_CHECK();
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N,
                       int C, float eps) {
  if (N == 0) return;
  layernorm_fwd_k<<<row_blocks(N), kThreads>>>(out, mean, rstd, x, w, b, N, C, eps);
  ZT_CUDA_LAUNCH_CHECK();
}

void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int C) {
  if (N == 0) return;
  norm_bwd_dx_k<<<row_blocks(N), kThreads>>>(dx, dout, x, w, mean, rstd, N, C, 0.f);
  ZT_CUDA_LAUNCH_CHECK();
  int64_t rows = 0;
  dim3 grid = column_grid(N, C, &rows);
  norm_bwd_dw_k<<<grid, kThreads>>>(dw, db, dout, x, mean, rstd, N, C, rows);
  ZT_CUDA_LAUNCH_CHECK();
}

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int C, float eps,
                     float w_offset) {
  if (N == 0) return;
  rmsnorm_fwd_k<<<row_blocks(N), kThreads>>>(out, rstd, x, w, N, C, eps, w_offset);
  ZT_CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int C, float w_offset) {
  if (N == 0) return;
  norm_bwd_dx_k<<<row_blocks(N), kThreads>>>(dx, dout, x, w, nullptr, rstd, N, C, w_offset);
  ZT_CUDA_LAUNCH_CHECK();
  int64_t rows = 0;
  dim3 grid = column_grid(N, C, &rows);
  norm_bwd_dw_k<<<grid, kThreads>>>(dw, nullptr, dout, x, nullptr, rstd, N, C, rows);
  ZT_CUDA_LAUNCH_CHECK();
}

void gelu_forward(float* out, const float* x, int64_t n) {
  if (n == 0) return;
  gelu_fwd_k<<<blocks_for(n), kThreads>>>(out, x, n);
  ZT_CUDA_LAUNCH_CHECK();
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
  if (n == 0) return;
  gelu_bwd_k<<<blocks_for(n), kThreads>>>(dx, dout, x, n);
  ZT_CUDA_LAUNCH_CHECK();
}

void swiglu_forward(float* out, const float* x, int64_t N, int F) {
  if (N * F == 0) return;
  swiglu_fwd_k<<<blocks_for(N * F), kThreads>>>(out, x, N, F);
  ZT_CUDA_LAUNCH_CHECK();
}

void swiglu_backward(float* dx, const float* dout, const float* x, int64_t N, int F) {
  if (N * F == 0) return;
  swiglu_bwd_k<<<blocks_for(N * F), kThreads>>>(dx, dout, x, N, F);
  ZT_CUDA_LAUNCH_CHECK();
}

void geglu_forward(float* out, const float* x, int64_t N, int F) {
  if (N * F == 0) return;
  geglu_fwd_k<<<blocks_for(N * F), kThreads>>>(out, x, N, F);
  ZT_CUDA_LAUNCH_CHECK();
}

void geglu_backward(float* dx, const float* dout, const float* x, int64_t N, int F) {
  if (N * F == 0) return;
  geglu_bwd_k<<<blocks_for(N * F), kThreads>>>(dx, dout, x, N, F);
  ZT_CUDA_LAUNCH_CHECK();
}

void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                  int64_t row_stride, const int32_t* positions) {
  const int64_t n = int64_t(B) * T * (NH + KVH) * (HS / 2);
  if (n == 0) return;
  rope_k<<<blocks_for(n), kThreads>>>(qkv, cos, sin, B, T, NH + KVH, HS, row_stride, positions, 1.0f);
  ZT_CUDA_LAUNCH_CHECK();
}

void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int KVH, int HS,
                   int64_t row_stride, const int32_t* positions) {
  const int64_t n = int64_t(B) * T * (NH + KVH) * (HS / 2);
  if (n == 0) return;
  rope_k<<<blocks_for(n), kThreads>>>(dqkv, cos, sin, B, T, NH + KVH, HS, row_stride, positions, -1.0f);
  ZT_CUDA_LAUNCH_CHECK();
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T, int C,
                       const int32_t* positions) {
  if (N * C == 0) return;
  embedding_fwd_k<<<blocks_for(N * C), kThreads>>>(out, tokens, wte, wpe, N, T, C, positions);
  ZT_CUDA_LAUNCH_CHECK();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T, int C,
                        const int32_t* positions) {
  if (N * C == 0) return;
  embedding_bwd_k<<<blocks_for(N * C), kThreads>>>(dwte, dwpe, dout, tokens, N, T, C, positions);
  ZT_CUDA_LAUNCH_CHECK();
}

void bias_forward(float* y, const float* b, int64_t N, int M) {
  if (N * M == 0) return;
  bias_fwd_k<<<blocks_for(N * M), kThreads>>>(y, b, N, M);
  ZT_CUDA_LAUNCH_CHECK();
}

void bias_backward(float* db, const float* dy, int64_t N, int M) {
  if (N * M == 0) return;
  int64_t rows = 0;
  dim3 grid = column_grid(N, M, &rows);
  column_sum_k<<<grid, kThreads>>>(db, dy, N, M, rows);
  ZT_CUDA_LAUNCH_CHECK();
}

void add(float* y, const float* a, const float* b, int64_t n) {
  if (n == 0) return;
  add_k<<<blocks_for(n), kThreads>>>(y, a, b, n);
  ZT_CUDA_LAUNCH_CHECK();
}

void to_bf16(uint16_t* dst, const float* src, int64_t n) {
  if (n == 0) return;
  to_bf16_k<<<blocks_for(n), kThreads>>>(reinterpret_cast<__nv_bfloat16*>(dst), src, n);
  ZT_CUDA_LAUNCH_CHECK();
}

void from_bf16(float* dst, const uint16_t* src, int64_t n) {
  if (n == 0) return;
  from_bf16_k<<<blocks_for(n), kThreads>>>(dst, reinterpret_cast<const __nv_bfloat16*>(src), n);
  ZT_CUDA_LAUNCH_CHECK();
}

void to_bf16_keep(uint16_t* dst, float* src, int64_t n) {
  if (n == 0) return;
  to_bf16_keep_k<<<blocks_for(n), kThreads>>>(reinterpret_cast<__nv_bfloat16*>(dst), src, n);
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace zt::kernels::cuda
