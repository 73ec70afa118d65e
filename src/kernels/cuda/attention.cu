// attention.cu: causal grouped-query attention on the GPU, the CUDA-core kernels and the entry
// points (attention_cuda.h). FlashAttention-2's plan: the forward pass streams key tiles past a
// block of query rows with an online softmax in fp32 and keeps each row's log-sum-exp; the
// backward pass rebuilds P = exp(S - lse) tile by tile, with D = rowsum(dO * O) precomputed, so
// no T x T matrix is ever stored.
//
// These kernels serve every head size (a multiple of 8 up to 256) and both precisions; bf16
// mode rounds Q, K, V, dO as they enter shared memory and P, dS before their products, like
// the tensor-core kernels of attention_tc.cu (HS 64 / 128 in bf16) that replace them there.
//
// Work split: a warp owns kRows "rows" (queries in the forward and dQ kernels, keys in the dK/dV
// kernel) held in shared memory and read by broadcast; a tile of 32 "columns" (keys, or queries)
// sits in shared memory with one column per lane, so a row's 32 scores are one warp register.
// Products that sum over the head dimension give each lane its own column; products that sum
// over the tile give each lane the head-dimension entries d = lane + 32 c.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "core/cuda_check.h"
#include "core/device.h"
#include "core/error.h"
#include "kernels/cuda/attention_cuda.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 4;                    // rows per warp: one column load feeds four rows
constexpr int kBlockRows = kWarps * kRows;  // rows per block
constexpr int kTile = 32;                   // columns per tile, one per lane
constexpr int kMaxCols = 8;                 // head-dimension entries per lane: HS <= 256

// The device-side copy of AttnDims plus what every kernel derives from it.
struct Geom {
  int B, T, NH, KVH, HS;
  int64_t rs;          // qkv row stride (floats)
  const int32_t* doc;  // (B, T) first visible key, or null
  float scale;         // AttnDims::softmax_scale(): 1 / sqrt(HS), or Gemma's
  float cap;           // Gemma 2's soft-cap of the scores; 0: none
};

Geom make_geom(const AttnDims& d) {
  return Geom{d.B, d.T, d.NH, d.KVH, d.HS, d.row_stride(), d.doc_start, d.softmax_scale(), d.softcap};
}

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// A visible score s = q.k scaled, soft-capped (cap tanh(s / cap)) when the model caps it.
__device__ __forceinline__ float score(const Geom& g, float qk) {
  const float z = qk * g.scale;
  return g.cap > 0.f ? g.cap * tanhf(z / g.cap) : z;
}
// P = exp(score - lse) and dS = P (dP - D) d score / d(q.k): scale times (capped) 1 - tanh^2.
__device__ __forceinline__ void prob_and_dscore(const Geom& g, float qk, float lse, float dp, float D, float* p,
                                                float* ds) {
  const float z = qk * g.scale;
  float sc = z, dcap = 1.f;
  if (g.cap > 0.f) {
    const float th = tanhf(z / g.cap);
    sc = g.cap * th;
    dcap = 1.f - th * th;
  }
  *p = expf(sc - lse);
  *ds = *p * (dp - D) * dcap * g.scale;
}

// First key query t of row b may see; INT_MAX for a padding row past T, which sees none.
__device__ __forceinline__ int first_key(const Geom& g, int b, int t) {
  if (t >= g.T) return INT_MAX;
  return g.doc ? g.doc[int64_t(b) * g.T + t] : 0;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(~0u, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  return v;
}

// dst[r * ld + c] = src[(r0 + r) * stride + c] for r < n, c < HS; rows at or past T read as 0
// (their products are masked, but must not be NaN garbage); rounded to bf16 in bf16 mode.
__device__ void load_rows(float* dst, int ld, const float* src, int64_t stride, int r0, int n, int T, int HS,
                          bool bf16) {
  for (int idx = threadIdx.x; idx < n * HS; idx += blockDim.x) {
    const int r = idx / HS, c = idx - r * HS;
    float v = r0 + r < T ? src[int64_t(r0 + r) * stride + c] : 0.f;
    dst[r * ld + c] = bf16 ? round_bf16(v) : v;
  }
}

// Forward: block (query tile of kBlockRows, head h, batch b); key tiles from the tile's first
// visible key (doc_start is non-decreasing, so its first row's) to its last query.
__global__ void __launch_bounds__(kThreads) fwd_kernel(float* out, float* lse, const float* qkv, Geom g, bool bf16) {
  extern __shared__ float smem[];
  const int HS = g.HS, ldk = HS + 1;  // K is read one row per lane: pad against bank conflicts
  float* qs = smem;                   // kBlockRows x HS
  float* ks = qs + kBlockRows * HS;   // kTile x ldk
  float* vs = ks + kTile * ldk;       // kTile x HS
  const int b = blockIdx.z, h = blockIdx.y, grp = h / (g.NH / g.KVH), q0 = blockIdx.x * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kRows;
  const float* base = qkv + int64_t(b) * g.T * g.rs;
  load_rows(qs, HS, base + h * HS, g.rs, q0, kBlockRows, g.T, HS, bf16);

  int first[kRows];
  float m[kRows], l[kRows], o[kRows][kMaxCols];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    first[r] = first_key(g, b, q0 + row0 + r);
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < kMaxCols; ++c) o[r][c] = 0.f;
  }
  const int qlast = min(q0 + kBlockRows, g.T) - 1;
  for (int k0 = first_key(g, b, q0) / kTile * kTile; k0 <= qlast; k0 += kTile) {
    __syncthreads();  // the previous tile's readers are done
    load_rows(ks, ldk, base + (g.NH + grp) * HS, g.rs, k0, kTile, g.T, HS, bf16);
    load_rows(vs, HS, base + (g.NH + g.KVH + grp) * HS, g.rs, k0, kTile, g.T, HS, bf16);
    __syncthreads();
    float s[kRows] = {};
#pragma unroll 4
    for (int c = 0; c < HS; ++c) {
      const float kv = ks[lane * ldk + c];
#pragma unroll
      for (int r = 0; r < kRows; ++r) s[r] += qs[(row0 + r) * HS + c] * kv;
    }
    const int j = k0 + lane;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool visible = j >= first[r] && j <= q0 + row0 + r;
      const float x = visible ? score(g, s[r]) : -INFINITY;
      const float mnew = fmaxf(m[r], warp_max(x));
      const float mref = mnew == -INFINITY ? 0.f : mnew;  // a row with nothing visible yet: no NaN
      const float p = expf(x - mref), alpha = expf(m[r] - mref);
      l[r] = l[r] * alpha + warp_sum(p);
      m[r] = mnew;
      s[r] = bf16 ? round_bf16(p) : p;  // now the P operand
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c) o[r][c] *= alpha;
    }
    for (int jj = 0; jj < kTile; ++jj) {
      float pj[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) pj[r] = __shfl_sync(~0u, s[r], jj);
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c) {
        const int d = lane + 32 * c;
        if (d < HS) {
          const float v = vs[jj * HS + d];
#pragma unroll
          for (int r = 0; r < kRows; ++r) o[r][c] += pj[r] * v;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = q0 + row0 + r;
    if (i >= g.T) continue;
    float* orow = out + (int64_t(b) * g.T + i) * g.NH * HS + h * HS;
#pragma unroll
    for (int c = 0; c < kMaxCols; ++c)
      if (lane + 32 * c < HS) orow[lane + 32 * c] = o[r][c] / l[r];
    if (lane == 0) lse[(int64_t(b) * g.NH + h) * g.T + i] = m[r] + logf(l[r]);
  }
}

// dK, dV: block (key tile of kBlockRows, KV head grp, batch b), looping over the group's query
// heads and the query tiles that can see the keys; lane = query. Assigns the block's dK, dV rows.
__global__ void __launch_bounds__(kThreads) bwd_dkdv_kernel(float* dqkv, const float* dout, const float* qkv,
                                                            const float* lse, const float* D, Geom g, bool bf16) {
  extern __shared__ float smem[];
  const int HS = g.HS, ldq = HS + 1;
  float* ks = smem;                  // kBlockRows x HS
  float* vs = ks + kBlockRows * HS;  // kBlockRows x HS
  float* qs = vs + kBlockRows * HS;  // kTile x ldq
  float* dos = qs + kTile * ldq;     // kTile x ldq
  const int b = blockIdx.z, grp = blockIdx.y, k0 = blockIdx.x * kBlockRows, heads = g.NH / g.KVH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kRows;
  const float* base = qkv + int64_t(b) * g.T * g.rs;
  const float* dbase = dout + int64_t(b) * g.T * g.NH * HS;
  load_rows(ks, HS, base + (g.NH + grp) * HS, g.rs, k0, kBlockRows, g.T, HS, bf16);
  load_rows(vs, HS, base + (g.NH + g.KVH + grp) * HS, g.rs, k0, kBlockRows, g.T, HS, bf16);
  float dk[kRows][kMaxCols] = {}, dv[kRows][kMaxCols] = {};
  const int klast = min(k0 + kBlockRows, g.T) - 1;
  for (int hh = 0; hh < heads; ++hh) {
    const int h = grp * heads + hh;
    // Queries before k0 see none of these keys; from the first query whose document starts
    // after klast on, none does either (doc_start is non-decreasing).
    for (int i0 = k0; i0 < g.T && first_key(g, b, i0) <= klast; i0 += kTile) {
      __syncthreads();
      load_rows(qs, ldq, base + h * HS, g.rs, i0, kTile, g.T, HS, bf16);
      load_rows(dos, ldq, dbase + h * HS, int64_t(g.NH) * HS, i0, kTile, g.T, HS, bf16);
      __syncthreads();
      const int i = i0 + lane, fi = first_key(g, b, i);
      const float lse_i = i < g.T ? lse[(int64_t(b) * g.NH + h) * g.T + i] : 0.f;
      const float D_i = i < g.T ? D[(int64_t(b) * g.NH + h) * g.T + i] : 0.f;
      float s[kRows] = {}, dp[kRows] = {};
#pragma unroll 4
      for (int c = 0; c < HS; ++c) {
        const float qv = qs[lane * ldq + c], dov = dos[lane * ldq + c];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          s[r] += ks[(row0 + r) * HS + c] * qv;
          dp[r] += vs[(row0 + r) * HS + c] * dov;
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int j = k0 + row0 + r;
        const bool visible = j >= fi && j <= i;  // fi = INT_MAX past T
        float p = 0.f, ds = 0.f;
        if (visible) prob_and_dscore(g, s[r], lse_i, dp[r], D_i, &p, &ds);
        s[r] = bf16 ? round_bf16(p) : p;
        dp[r] = bf16 ? round_bf16(ds) : ds;
      }
      for (int ii = 0; ii < kTile; ++ii) {
        float pr[kRows], dr[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          pr[r] = __shfl_sync(~0u, s[r], ii);
          dr[r] = __shfl_sync(~0u, dp[r], ii);
        }
#pragma unroll
        for (int c = 0; c < kMaxCols; ++c) {
          const int d = lane + 32 * c;
          if (d < HS) {
            const float dov = dos[ii * ldq + d], qv = qs[ii * ldq + d];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              dv[r][c] += pr[r] * dov;
              dk[r][c] += dr[r] * qv;
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int j = k0 + row0 + r;
    if (j >= g.T) continue;
    float* row = dqkv + (int64_t(b) * g.T + j) * g.rs;
#pragma unroll
    for (int c = 0; c < kMaxCols; ++c) {
      const int d = lane + 32 * c;
      if (d < HS) {
        row[(g.NH + grp) * HS + d] = dk[r][c];
        row[(g.NH + g.KVH + grp) * HS + d] = dv[r][c];
      }
    }
  }
}

// dQ: block (query tile of kBlockRows, head h, batch b) over the key tiles its rows see; lane = key.
__global__ void __launch_bounds__(kThreads) bwd_dq_kernel(float* dqkv, const float* dout, const float* qkv,
                                                          const float* lse, const float* D, Geom g, bool bf16) {
  extern __shared__ float smem[];
  const int HS = g.HS, ldk = HS + 1;
  float* qs = smem;                   // kBlockRows x HS
  float* dos = qs + kBlockRows * HS;  // kBlockRows x HS
  float* ks = dos + kBlockRows * HS;  // kTile x ldk
  float* vs = ks + kTile * ldk;       // kTile x ldk
  const int b = blockIdx.z, h = blockIdx.y, grp = h / (g.NH / g.KVH), q0 = blockIdx.x * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kRows;
  const float* base = qkv + int64_t(b) * g.T * g.rs;
  load_rows(qs, HS, base + h * HS, g.rs, q0, kBlockRows, g.T, HS, bf16);
  load_rows(dos, HS, dout + int64_t(b) * g.T * g.NH * HS + h * HS, int64_t(g.NH) * HS, q0, kBlockRows, g.T, HS, bf16);
  int first[kRows];
  float lse_r[kRows], D_r[kRows], dq[kRows][kMaxCols] = {};
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = q0 + row0 + r;
    first[r] = first_key(g, b, i);
    lse_r[r] = i < g.T ? lse[(int64_t(b) * g.NH + h) * g.T + i] : 0.f;
    D_r[r] = i < g.T ? D[(int64_t(b) * g.NH + h) * g.T + i] : 0.f;
  }
  const int qlast = min(q0 + kBlockRows, g.T) - 1;
  for (int k0 = first_key(g, b, q0) / kTile * kTile; k0 <= qlast; k0 += kTile) {
    __syncthreads();
    load_rows(ks, ldk, base + (g.NH + grp) * HS, g.rs, k0, kTile, g.T, HS, bf16);
    load_rows(vs, ldk, base + (g.NH + g.KVH + grp) * HS, g.rs, k0, kTile, g.T, HS, bf16);
    __syncthreads();
    float s[kRows] = {}, dp[kRows] = {};
#pragma unroll 4
    for (int c = 0; c < HS; ++c) {
      const float kv = ks[lane * ldk + c], vv = vs[lane * ldk + c];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        s[r] += qs[(row0 + r) * HS + c] * kv;
        dp[r] += dos[(row0 + r) * HS + c] * vv;
      }
    }
    const int j = k0 + lane;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool visible = j >= first[r] && j <= q0 + row0 + r;
      float p = 0.f, ds = 0.f;
      if (visible) prob_and_dscore(g, s[r], lse_r[r], dp[r], D_r[r], &p, &ds);
      s[r] = bf16 ? round_bf16(ds) : ds;  // now the dS operand
    }
    for (int jj = 0; jj < kTile; ++jj) {
      float dr[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) dr[r] = __shfl_sync(~0u, s[r], jj);
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c) {
        const int d = lane + 32 * c;
        if (d < HS) {
          const float kv = ks[jj * ldk + d];
#pragma unroll
          for (int r = 0; r < kRows; ++r) dq[r][c] += dr[r] * kv;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = q0 + row0 + r;
    if (i >= g.T) continue;
    float* row = dqkv + (int64_t(b) * g.T + i) * g.rs + h * HS;
#pragma unroll
    for (int c = 0; c < kMaxCols; ++c)
      if (lane + 32 * c < HS) row[lane + 32 * c] = dq[r][c];
  }
}

// D[(b, h, t)] = sum_d dO * O over the head's HS entries: one warp per (row, head).
__global__ void rowdot_kernel(float* D, const float* dout, const float* out, int B, int T, int NH, int HS) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= int64_t(B) * T * NH) return;
  const int64_t row = w / NH;
  const int h = int(w % NH);
  const float* a = dout + row * NH * HS + h * HS;
  const float* o = out + row * NH * HS + h * HS;
  float acc = 0.f;
  for (int d = lane; d < HS; d += 32) acc += a[d] * o[d];
  acc = warp_sum(acc);
  if (lane == 0) D[(row / T * NH + h) * T + row % T] = acc;
}

void check_dims(const AttnDims& d) {
  ZT_CHECK(d.B > 0 && d.T > 0 && d.NH > 0 && d.KVH > 0 && d.NH % d.KVH == 0, "attention: bad dims B=", d.B, " T=", d.T,
           " NH=", d.NH, " KVH=", d.KVH);
  ZT_CHECK(d.HS > 0 && d.HS % 8 == 0 && d.HS <= 32 * kMaxCols, "attention (CUDA): head size ", d.HS,
           " is not supported (a multiple of 8 up to ", 32 * kMaxCols, ")");
}

// Dynamic shared memory beyond 48 KB needs the kernel's opt-in; set it every call (cheap).
template <class Kernel>
void allow_smem(Kernel k, size_t bytes) {
  ZT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// A growable device scratch (D), kept for the process: freeing at exit could race the
// runtime's teardown, and attention runs every step.
float* scratch_floats(size_t n) {
  static float* ptr = nullptr;
  static size_t cap = 0;
  if (n > cap) {
    device_free(ptr, cap * sizeof(float));
    ptr = nullptr;
    ptr = static_cast<float*>(device_alloc(n * sizeof(float), "attention scratch"));
    cap = n;
  }
  return ptr;
}

}  // namespace

bool attention_uses_tensor_cores(int HS, bool bf16, float softcap) {
  return bf16 && softcap == 0.f && (HS == 64 || HS == 128);
}

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d, bool bf16) {
  check_dims(d);
  if (attention_uses_tensor_cores(d.HS, bf16, d.softcap)) return detail::attention_forward_tc(out, lse, qkv, d);
  const Geom g = make_geom(d);
  const size_t smem = size_t(kBlockRows * d.HS + kTile * (d.HS + 1) + kTile * d.HS) * sizeof(float);
  allow_smem(fwd_kernel, smem);
  const dim3 grid((d.T + kBlockRows - 1) / kBlockRows, d.NH, d.B);
  fwd_kernel<<<grid, kThreads, smem>>>(out, lse, qkv, g, bf16);
  ZT_CUDA_LAUNCH_CHECK();
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d, bool bf16) {
  check_dims(d);
  if (attention_uses_tensor_cores(d.HS, bf16, d.softcap))
    return detail::attention_backward_tc(dqkv, dout, qkv, out, lse, d);
  float* D = scratch_floats(size_t(d.B) * d.NH * d.T);
  const int64_t warps = int64_t(d.B) * d.T * d.NH;
  rowdot_kernel<<<unsigned((warps * 32 + 255) / 256), 256>>>(D, dout, out, d.B, d.T, d.NH, d.HS);
  ZT_CUDA_LAUNCH_CHECK();
  const Geom g = make_geom(d);
  const size_t smem_kv = size_t(2 * kBlockRows * d.HS + 2 * kTile * (d.HS + 1)) * sizeof(float);
  allow_smem(bwd_dkdv_kernel, smem_kv);
  const dim3 grid_kv((d.T + kBlockRows - 1) / kBlockRows, d.KVH, d.B);
  bwd_dkdv_kernel<<<grid_kv, kThreads, smem_kv>>>(dqkv, dout, qkv, lse, D, g, bf16);
  ZT_CUDA_LAUNCH_CHECK();
  const size_t smem_q = smem_kv;  // the same four arrays, rows and tiles swapped
  allow_smem(bwd_dq_kernel, smem_q);
  const dim3 grid_q((d.T + kBlockRows - 1) / kBlockRows, d.NH, d.B);
  bwd_dq_kernel<<<grid_q, kThreads, smem_q>>>(dqkv, dout, qkv, lse, D, g, bf16);
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace zt::kernels::cuda
