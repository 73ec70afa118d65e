// attention_tc.cu: the tensor-core attention kernels (bf16 mode, HS 64 or 128), FlashAttention-2's
// design on mma.sync m16n8k16 (bf16 in, fp32 accumulate) with inline PTX.
//
// Inputs are converted to bf16 once per call (qkv, and dO in the backward) by bandwidth-bound
// kernels into device scratch, so the attention kernels stream bf16 tiles with cp.async into
// double buffers while the tensor cores work on the previous tile. Fragments come from shared
// memory with ldmatrix (.trans where the product wants the tile's other index as k).
//
// Each warp owns 16 rows of its product (queries in the forward pass, keys in the backward),
// so a row's scores sit in the 4 threads of a quad (m16n8 accumulator: thread t holds rows
// t/4 and t/4 + 8, columns 2 (t%4) + {0, 1}): the softmax reduces with 2 shuffles, and P (or
// dS^T) goes from the score accumulators straight into the A fragments of the next product,
// rounded to bf16 pairs, without touching shared memory.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/attention_cuda.h"

namespace zt::kernels::cuda::detail {
namespace {

using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;

struct TcGeom {
  int B, T, NH, KVH;
  int64_t rs;          // qkv row stride (elements)
  const int32_t* doc;  // (B, T) first visible key, or null
  float scale;         // AttnDims::softmax_scale()
};

// ---- PTX wrappers -------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 fills zeros (rows past T).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Four 8x8 bf16 matrices; lane l supplies the address of row l % 8 of matrix l / 8, and
// register i receives matrix i (thread t: row t/4, columns 2 (t%4) + {0, 1}; transposed with
// .trans: rows 2 (t%4) + {0, 1}, column t/4).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c (16x8, fp32) += a (16x16, bf16, row) * b (16x8, bf16, col).
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair, the first in the low half (the lower column of a fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Fragment addresses for a 16x16 tile at (r0, c0) of a row-major bf16 array with stride ld.
// a_frag: the A operand (rows = m, columns = k). b_pair: B operands of two n-blocks of 8 from
// a tile stored with n along rows and k along columns (K for S = Q K^T): registers 0, 1 are
// n-block r0's b0, b1, registers 2, 3 n-block r0 + 8's. bt_pair (with .trans): the same from
// a tile stored with k along rows and n along columns (V for O = P V): n-blocks c0, c0 + 8.
// at_frag (with .trans): the A operand from a tile stored transposed (k along rows, m along
// columns), e.g. dS read out of dS^T.
__device__ __forceinline__ const bf16* a_frag(const bf16* p, int ld, int r0, int c0, int lane) {
  return p + (r0 + (lane & 15)) * ld + c0 + 8 * (lane >> 4);
}
__device__ __forceinline__ const bf16* b_pair(const bf16* p, int ld, int r0, int c0, int lane) {
  return p + (r0 + (lane & 7) + 8 * (lane >> 4)) * ld + c0 + 8 * ((lane >> 3) & 1);
}
__device__ __forceinline__ const bf16* bt_pair(const bf16* p, int ld, int r0, int c0, int lane) {
  return p + (r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + c0 + 8 * (lane >> 4);
}
__device__ __forceinline__ const bf16* at_frag(const bf16* p, int ld, int r0, int c0, int lane) {
  return p + (r0 + (lane & 7) + 8 * (lane >> 4)) * ld + c0 + 8 * ((lane >> 3) & 1);
}

// ---- shared helpers -----------------------------------------------------------------------

// First key query t of row b may see; INT_MAX for a padding row past T, which sees none.
__device__ __forceinline__ int first_key(const TcGeom& g, int b, int t) {
  if (t >= g.T) return INT_MAX;
  return g.doc ? g.doc[int64_t(b) * g.T + t] : 0;
}

// cp.async of rows [r0, r0 + n) x HS (bf16, global row stride `stride`) into dst (stride ld);
// rows at or past T are zero-filled so masked products stay finite.
template <int HS, int NT>
__device__ __forceinline__ void load_tile(bf16* dst, int ld, const bf16* src, int64_t stride, int r0, int n, int T) {
  constexpr int V = HS / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < n * V; idx += NT) {
    const int r = idx / V, c = (idx % V) * 8;
    const bool in = r0 + r < T;
    cp_async16(dst + r * ld + c, src + int64_t(in ? r0 + r : 0) * stride + c, in ? 16 : 0);
  }
}

// ---- conversion kernels -------------------------------------------------------------------

// dst = bf16(src), n a multiple of 4.
__global__ void to_bf16_kernel(bf16* dst, const float* src, int64_t n4) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(src)[i];
    uint2 w;
    w.x = pack_bf16(v.x, v.y);
    w.y = pack_bf16(v.z, v.w);
    reinterpret_cast<uint2*>(dst)[i] = w;
  }
}

// The backward's per-row inputs in one pass over dO: dO in bf16, and D (B, NH, T) =
// rowsum(dO * O) in fp32 (from the fp32 values, as the CUDA-core path). One warp per (row, head).
template <int HS>
__global__ void dout_prep_kernel(bf16* dout_h, float* D, const float* dout, const float* out, int B, int T, int NH) {
  constexpr int E = HS / 32;  // 2 or 4 consecutive entries per lane
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= int64_t(B) * T * NH) return;
  const int64_t off = w * HS + lane * E;  // (row, head) w is row w / NH, head w % NH: contiguous
  float a[E], o[E];
  if constexpr (E == 4) {
    const float4 x = *reinterpret_cast<const float4*>(dout + off), y = *reinterpret_cast<const float4*>(out + off);
    a[0] = x.x, a[1] = x.y, a[2] = x.z, a[3] = x.w, o[0] = y.x, o[1] = y.y, o[2] = y.z, o[3] = y.w;
    *reinterpret_cast<uint2*>(dout_h + off) = make_uint2(pack_bf16(a[0], a[1]), pack_bf16(a[2], a[3]));
  } else {
    const float2 x = *reinterpret_cast<const float2*>(dout + off), y = *reinterpret_cast<const float2*>(out + off);
    a[0] = x.x, a[1] = x.y, o[0] = y.x, o[1] = y.y;
    *reinterpret_cast<uint32_t*>(dout_h + off) = pack_bf16(a[0], a[1]);
  }
  float acc = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) acc += a[e] * o[e];
  for (int s = 16; s; s >>= 1) acc += __shfl_xor_sync(~0u, acc, s);
  const int64_t row = w / NH;
  const int h = int(w % NH);
  if (lane == 0) D[(row / T * NH + h) * T + row % T] = acc;
}

// ---- forward ------------------------------------------------------------------------------

// Block: BQ = 128 queries (8 warps x 16) of one (b, h); key tiles of 64, double-buffered. The
// last query tiles, which see the most keys, are scheduled first.
constexpr int kFwdWarps = 8, kFwdBQ = 16 * kFwdWarps, kFwdBK = 64;

template <int HS>
struct FwdSmem {
  static constexpr int LD = HS + 8;  // +16 bytes per row: ldmatrix's 8 rows hit distinct banks
  static constexpr size_t q = 0, k = q + size_t(kFwdBQ) * LD, v = k + 2 * size_t(kFwdBK) * LD;
  static constexpr size_t bytes = (v + 2 * size_t(kFwdBK) * LD) * sizeof(bf16);
};

template <int HS>
__global__ void __launch_bounds__(32 * kFwdWarps, 1) fwd_kernel(float* out, float* lse, const bf16* qkv, TcGeom g) {
  using L = FwdSmem<HS>;
  constexpr int BQ = kFwdBQ, BK = kFwdBK, LD = L::LD, NT = 32 * kFwdWarps;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  bf16* qs = smem + L::q;
  const int bh = g.B * g.NH, nqt = (g.T + BQ - 1) / BQ;
  const int qt = nqt - 1 - int(blockIdx.x / bh), b = int(blockIdx.x % bh) / g.NH, h = int(blockIdx.x % g.NH);
  const int grp = h / (g.NH / g.KVH), q0 = qt * BQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bf16* base = qkv + int64_t(b) * g.T * g.rs;
  const bf16* kg = base + (g.NH + grp) * HS;
  const bf16* vg = base + (g.NH + g.KVH + grp) * HS;

  const int k_begin = first_key(g, b, q0) / BK * BK, qlast = min(q0 + BQ, g.T) - 1;
  const int ntiles = (qlast - k_begin) / BK + 1;
  load_tile<HS, NT>(qs, LD, base + h * HS, g.rs, q0, BQ, g.T);
  load_tile<HS, NT>(smem + L::k, LD, kg, g.rs, k_begin, BK, g.T);
  load_tile<HS, NT>(smem + L::v, LD, vg, g.rs, k_begin, BK, g.T);
  cp_async_commit();

  // This thread's two rows and the warp's range (warp-uniform skip and mask decisions).
  const int wq0 = q0 + warp * 16, r0 = wq0 + lane / 4, r1 = r0 + 8, cq = 2 * (lane % 4);
  const int first0 = first_key(g, b, r0), first1 = first_key(g, b, r1);
  const int wlast = min(wq0 + 15, g.T - 1), wfirst_lo = first_key(g, b, wq0);
  const int wfirst_hi = wq0 < g.T ? first_key(g, b, wlast) : INT_MAX;
  const float sl2 = g.scale * kLog2e;  // scores in log2 units: exp2f

  float o[HS / 8][4] = {};
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // l: this thread's partial row sums
  uint32_t qf[HS / 16][4];
  cp_async_wait_all();
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) ldsm_x4(qf[kk], a_frag(qs, LD, warp * 16, kk * 16, lane));

  for (int t = 0; t < ntiles; ++t) {
    const int k0 = k_begin + t * BK;
    const bf16* ks = smem + L::k + (t & 1) * BK * LD;
    const bf16* vs = smem + L::v + (t & 1) * BK * LD;
    if (t + 1 < ntiles) {  // the other buffer's tile was finished by everyone before the last barrier
      load_tile<HS, NT>(smem + L::k + ((t + 1) & 1) * BK * LD, LD, kg, g.rs, k0 + BK, BK, g.T);
      load_tile<HS, NT>(smem + L::v + ((t + 1) & 1) * BK * LD, LD, vg, g.rs, k0 + BK, BK, g.T);
    }
    cp_async_commit();

    if (wq0 < g.T && k0 <= wlast && k0 + BK - 1 >= wfirst_lo) {  // else every key is masked for this warp
      float s[BK / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk)
#pragma unroll
        for (int np = 0; np < BK / 16; ++np) {
          uint32_t kb[4];
          ldsm_x4(kb, b_pair(ks, LD, np * 16, kk * 16, lane));
          mma16816(s[2 * np], qf[kk], kb[0], kb[1]);
          mma16816(s[2 * np + 1], qf[kk], kb[2], kb[3]);
        }
      if (k0 + BK - 1 > wq0 || k0 < wfirst_hi) {  // the diagonal or a document start crosses the tile
#pragma unroll
        for (int n = 0; n < BK / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = k0 + n * 8 + cq + (e & 1);
            const bool vis = e < 2 ? (j >= first0 && j <= r0) : (j >= first1 && j <= r1);
            if (!vis) s[n][e] = -INFINITY;
          }
      }
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) {
        mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
        mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
      }
#pragma unroll
      for (int sh = 1; sh <= 2; sh <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(~0u, mx0, sh));
        mx1 = fmaxf(mx1, __shfl_xor_sync(~0u, mx1, sh));
      }
      const float mn0 = fmaxf(m0, mx0 * sl2), mn1 = fmaxf(m1, mx1 * sl2);
      const float mr0 = mn0 == -INFINITY ? 0.f : mn0, mr1 = mn1 == -INFINITY ? 0.f : mn1;  // nothing visible: no NaN
      const float al0 = exp2f(m0 - mr0), al1 = exp2f(m1 - mr1);
      m0 = mn0, m1 = mn1;
      float sum0 = 0.f, sum1 = 0.f;
      uint32_t pa[BK / 16][4];
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) {
        const float p0 = exp2f(s[n][0] * sl2 - mr0), p1 = exp2f(s[n][1] * sl2 - mr0);
        const float p2 = exp2f(s[n][2] * sl2 - mr1), p3 = exp2f(s[n][3] * sl2 - mr1);
        sum0 += p0 + p1;
        sum1 += p2 + p3;
        // n-block n is the low (even n) or high (odd n) 8 keys of k-chunk n / 2.
        pa[n / 2][(n & 1) * 2] = pack_bf16(p0, p1);
        pa[n / 2][(n & 1) * 2 + 1] = pack_bf16(p2, p3);
      }
      l0 = l0 * al0 + sum0;
      l1 = l1 * al1 + sum1;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        o[n][0] *= al0, o[n][1] *= al0;
        o[n][2] *= al1, o[n][3] *= al1;
      }
#pragma unroll
      for (int kc = 0; kc < BK / 16; ++kc)
#pragma unroll
        for (int dp = 0; dp < HS / 16; ++dp) {
          uint32_t vb[4];
          ldsm_x4_t(vb, bt_pair(vs, LD, kc * 16, dp * 16, lane));
          mma16816(o[2 * dp], pa[kc], vb[0], vb[1]);
          mma16816(o[2 * dp + 1], pa[kc], vb[2], vb[3]);
        }
    }
    cp_async_wait_all();
    __syncthreads();
  }

#pragma unroll
  for (int sh = 1; sh <= 2; sh <<= 1) {
    l0 += __shfl_xor_sync(~0u, l0, sh);
    l1 += __shfl_xor_sync(~0u, l1, sh);
  }
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  const int64_t ostride = int64_t(g.NH) * HS;
  float* orow0 = out + (int64_t(b) * g.T + r0) * ostride + h * HS + cq;
  float* orow1 = orow0 + 8 * ostride;
  float* lrow = lse + (int64_t(b) * g.NH + h) * g.T;
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
    if (r0 < g.T) *reinterpret_cast<float2*>(orow0 + n * 8) = make_float2(o[n][0] * inv0, o[n][1] * inv0);
    if (r1 < g.T) *reinterpret_cast<float2*>(orow1 + n * 8) = make_float2(o[n][2] * inv1, o[n][3] * inv1);
  }
  if (lane % 4 == 0) {
    if (r0 < g.T) lrow[r0] = (m0 + log2f(l0)) / kLog2e;
    if (r1 < g.T) lrow[r1] = (m1 + log2f(l1)) / kLog2e;
  }
}

// ---- backward -----------------------------------------------------------------------------

// Block: BK = 128 keys (8 warps x 16) of one (b, KV head), over the group's query heads and
// the query tiles (BQ = 64, double-buffered) that see them. Per tile each warp forms
// S^T = K Q^T and dP^T = V dO^T for its 16 keys, P^T and dS^T in registers, and accumulates
// dV += P^T dO, dK += dS^T Q in registers; dS^T goes through shared memory for dQ = dS K, which
// is added to global memory with float2 atomics (dqkv's q part is zeroed first).
constexpr int kBwdWarps = 8, kBwdBK = 16 * kBwdWarps, kBwdBQ = 64;

template <int HS>
struct BwdSmem {
  static constexpr int LD = HS + 8, LDS = kBwdBQ + 8;
  static constexpr size_t k = 0, v = k + size_t(kBwdBK) * LD;                      // bf16 elements
  static constexpr size_t q = v + size_t(kBwdBK) * LD;                             // 2 buffers
  static constexpr size_t o = q + 2 * size_t(kBwdBQ) * LD;                         // dO, 2 buffers
  static constexpr size_t ds = o + 2 * size_t(kBwdBQ) * LD;                        // dS^T (BK x LDS)
  static constexpr size_t vec_bytes = (ds + size_t(kBwdBK) * LDS) * sizeof(bf16);  // lse2, D, first
  static constexpr size_t bytes = vec_bytes + 2 * 3 * kBwdBQ * sizeof(float);
};

template <int HS>
__global__ void __launch_bounds__(32 * kBwdWarps, 1)
    bwd_kernel(float* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D, TcGeom g) {
  using L = BwdSmem<HS>;
  constexpr int BQ = kBwdBQ, BK = kBwdBK, LD = L::LD, LDS = L::LDS, NT = 32 * kBwdWarps;
  constexpr int RB = BQ / 16, DPW = HS / (kBwdWarps / RB);  // dQ: 16-row blocks, dims per warp
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  const bf16* ks = smem + L::k;
  const bf16* vs = smem + L::v;
  bf16* dss = smem + L::ds;
  float* vec = reinterpret_cast<float*>(smem_raw + L::vec_bytes);  // [buf][lse2 | D | first]
  // Key tiles in the slowest index: the first tiles, seen by the most queries, start first.
  const int gb = g.KVH * g.B, kt = int(blockIdx.x / gb), grp = int(blockIdx.x % gb) % g.KVH;
  const int b = int(blockIdx.x % gb) / g.KVH, k0 = kt * BK, heads = g.NH / g.KVH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, cq = 2 * (lane % 4);
  const bf16* base = qkv + int64_t(b) * g.T * g.rs;
  const bf16* dbase = dout + int64_t(b) * g.T * g.NH * HS;
  const int klast = min(k0 + BK, g.T) - 1;

  // Query tiles start at k0 (earlier queries see none of these keys) and end before the first
  // query whose document starts after klast (doc_start is non-decreasing): binary search.
  int lo = k0, hi = g.T;  // first_key(lo) <= klast; answer in (lo, hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first_key(g, b, mid) <= klast)
      lo = mid;
    else
      hi = mid;
  }
  const int nq = (hi - k0 + BQ - 1) / BQ, n_it = heads * nq;

  // Issues iteration it's Q, dO tiles (cp.async) and per-query vectors (plain stores) into buffer buf.
  auto prefetch = [&](int it, int buf) {
    const int h = grp * heads + it / nq, i0 = k0 + (it % nq) * BQ;
    load_tile<HS, NT>(smem + L::q + buf * BQ * LD, LD, base + h * HS, g.rs, i0, BQ, g.T);
    load_tile<HS, NT>(smem + L::o + buf * BQ * LD, LD, dbase + h * HS, int64_t(g.NH) * HS, i0, BQ, g.T);
    if (threadIdx.x < BQ) {
      const int i = i0 + threadIdx.x;
      const bool in = i < g.T;
      const int64_t at = (int64_t(b) * g.NH + h) * g.T + i;
      float* vb = vec + buf * 3 * BQ;
      vb[threadIdx.x] = in ? lse[at] * kLog2e : 0.f;
      vb[BQ + threadIdx.x] = in ? D[at] : 0.f;
      reinterpret_cast<int*>(vb)[2 * BQ + threadIdx.x] = first_key(g, b, i);
    }
  };

  if (k0 < g.T) {
    load_tile<HS, NT>(smem + L::k, LD, base + (g.NH + grp) * HS, g.rs, k0, BK, g.T);
    load_tile<HS, NT>(smem + L::v, LD, base + (g.NH + g.KVH + grp) * HS, g.rs, k0, BK, g.T);
    if (n_it > 0) prefetch(0, 0);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  const int kw = k0 + warp * 16, j0 = kw + lane / 4, j1 = j0 + 8;  // this thread's two keys
  const float sl2 = g.scale * kLog2e;
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};

  for (int it = 0; it < n_it; ++it) {
    const int buf = it & 1, h = grp * heads + it / nq, i0 = k0 + (it % nq) * BQ;
    if (it + 1 < n_it) prefetch(it + 1, buf ^ 1);
    cp_async_commit();
    const bf16* qs = smem + L::q + buf * BQ * LD;
    const bf16* dos = smem + L::o + buf * BQ * LD;
    const float* lse_s = vec + buf * 3 * BQ;
    const float* d_s = lse_s + BQ;
    const int* first_s = reinterpret_cast<const int*>(lse_s + 2 * BQ);

    // Every pair (key, query) of this warp masked: keys past the tile's last query, before
    // its first visible key, or past T. dS^T's rows still need zeros for dQ.
    const bool skip = kw >= g.T || kw > i0 + BQ - 1 || kw + 15 < first_s[0];
    if (skip) {
#pragma unroll
      for (int e = lane; e < 16 * BQ / 2; e += 32)
        reinterpret_cast<uint32_t*>(dss + (warp * 16 + e / (BQ / 2)) * LDS)[e % (BQ / 2)] = 0u;
    } else {
      float s[BQ / 8][4] = {}, dp[BQ / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk) {
        uint32_t ka[4], va[4];
        ldsm_x4(ka, a_frag(ks, LD, warp * 16, kk * 16, lane));
        ldsm_x4(va, a_frag(vs, LD, warp * 16, kk * 16, lane));
#pragma unroll
        for (int np = 0; np < BQ / 16; ++np) {
          uint32_t qb[4], ob[4];
          ldsm_x4(qb, b_pair(qs, LD, np * 16, kk * 16, lane));
          ldsm_x4(ob, b_pair(dos, LD, np * 16, kk * 16, lane));
          mma16816(s[2 * np], ka, qb[0], qb[1]);
          mma16816(s[2 * np + 1], ka, qb[2], qb[3]);
          mma16816(dp[2 * np], va, ob[0], ob[1]);
          mma16816(dp[2 * np + 1], va, ob[2], ob[3]);
        }
      }
      // P^T = exp(S - lse) on visible pairs, dS^T = P^T (dP^T - D) scale; s and dp become them.
      const bool need_mask = kw + 15 > i0 || kw < first_s[BQ - 1];
#pragma unroll
      for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = n * 8 + cq + (e & 1), j = e < 2 ? j0 : j1;
          const bool vis = !need_mask || (j >= first_s[c] && j <= i0 + c);  // first = INT_MAX past T
          const float p = vis ? exp2f(s[n][e] * sl2 - lse_s[c]) : 0.f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - d_s[c]) * g.scale;
        }
      uint32_t pa[BQ / 16][4], da[BQ / 16][4];
#pragma unroll
      for (int n = 0; n < BQ / 8; ++n) {
        pa[n / 2][(n & 1) * 2] = pack_bf16(s[n][0], s[n][1]);
        pa[n / 2][(n & 1) * 2 + 1] = pack_bf16(s[n][2], s[n][3]);
        da[n / 2][(n & 1) * 2] = pack_bf16(dp[n][0], dp[n][1]);
        da[n / 2][(n & 1) * 2 + 1] = pack_bf16(dp[n][2], dp[n][3]);
        // dS^T rows j0, j1 (tile-local), query columns c, c + 1.
        *reinterpret_cast<uint32_t*>(dss + (warp * 16 + lane / 4) * LDS + n * 8 + cq) = da[n / 2][(n & 1) * 2];
        *reinterpret_cast<uint32_t*>(dss + (warp * 16 + lane / 4 + 8) * LDS + n * 8 + cq) = da[n / 2][(n & 1) * 2 + 1];
      }
#pragma unroll
      for (int kc = 0; kc < BQ / 16; ++kc)
#pragma unroll
        for (int dq = 0; dq < HS / 16; ++dq) {
          uint32_t ob[4], qb[4];
          ldsm_x4_t(ob, bt_pair(dos, LD, kc * 16, dq * 16, lane));
          ldsm_x4_t(qb, bt_pair(qs, LD, kc * 16, dq * 16, lane));
          mma16816(dv[2 * dq], pa[kc], ob[0], ob[1]);
          mma16816(dv[2 * dq + 1], pa[kc], ob[2], ob[3]);
          mma16816(dk[2 * dq], da[kc], qb[0], qb[1]);
          mma16816(dk[2 * dq + 1], da[kc], qb[2], qb[3]);
        }
    }
    __syncthreads();  // dS^T complete

    // dQ (BQ x HS) += dS K: warp = (16-query block rb, DPW dims from d0), over the BK keys.
    {
      const int rb = warp % RB, d0 = (warp / RB) * DPW, qrow = i0 + rb * 16 + lane / 4;
      float dq[DPW / 8][4] = {};
#pragma unroll
      for (int kc = 0; kc < BK / 16; ++kc) {
        if (k0 + kc * 16 > i0 + rb * 16 + 15) break;  // keys past these queries: dS is zero
        uint32_t a[4];
        ldsm_x4_t(a, at_frag(dss, LDS, kc * 16, rb * 16, lane));
#pragma unroll
        for (int dpi = 0; dpi < DPW / 16; ++dpi) {
          uint32_t kb[4];
          ldsm_x4_t(kb, bt_pair(ks, LD, kc * 16, d0 + dpi * 16, lane));
          mma16816(dq[2 * dpi], a, kb[0], kb[1]);
          mma16816(dq[2 * dpi + 1], a, kb[2], kb[3]);
        }
      }
      float* dst = dqkv + (int64_t(b) * g.T + qrow) * g.rs + h * HS + d0 + cq;
#pragma unroll
      for (int n = 0; n < DPW / 8; ++n) {
        if (qrow < g.T) atomicAdd(reinterpret_cast<float2*>(dst + n * 8), make_float2(dq[n][0], dq[n][1]));
        if (qrow + 8 < g.T)
          atomicAdd(reinterpret_cast<float2*>(dst + 8 * g.rs + n * 8), make_float2(dq[n][2], dq[n][3]));
      }
    }
    cp_async_wait_all();
    __syncthreads();  // the next tile landed; everyone is done with this one and with dS^T
  }

  float* krow0 = dqkv + (int64_t(b) * g.T + j0) * g.rs + (g.NH + grp) * HS + cq;
  float* vrow0 = krow0 + int64_t(g.KVH) * HS;
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
    if (j0 < g.T) {
      *reinterpret_cast<float2*>(krow0 + n * 8) = make_float2(dk[n][0], dk[n][1]);
      *reinterpret_cast<float2*>(vrow0 + n * 8) = make_float2(dv[n][0], dv[n][1]);
    }
    if (j1 < g.T) {
      *reinterpret_cast<float2*>(krow0 + 8 * g.rs + n * 8) = make_float2(dk[n][2], dk[n][3]);
      *reinterpret_cast<float2*>(vrow0 + 8 * g.rs + n * 8) = make_float2(dv[n][2], dv[n][3]);
    }
  }
}

// ---- host side ----------------------------------------------------------------------------

// Growable device scratch, kept for the process (attention runs every step; freeing at exit
// could race the runtime's teardown). slot: 0 = qkv in bf16, 1 = dO in bf16, 2 = D.
void* scratch(int slot, size_t bytes) {
  static void* ptr[3] = {};
  static size_t cap[3] = {};
  if (bytes > cap[slot]) {
    device_free(ptr[slot], cap[slot]);
    ptr[slot] = nullptr;
    ptr[slot] = device_alloc(bytes, "attention scratch");
    cap[slot] = bytes;
  }
  return ptr[slot];
}

TcGeom make_tc_geom(const AttnDims& d) {
  return TcGeom{d.B, d.T, d.NH, d.KVH, d.row_stride(), d.doc_start, d.softmax_scale()};
}

const bf16* qkv_to_bf16(const float* qkv, const AttnDims& d) {
  const int64_t n = int64_t(d.B) * d.T * d.row_stride();
  auto* dst = static_cast<bf16*>(scratch(0, size_t(n) * sizeof(bf16)));
  const int64_t n4 = n / 4;
  const unsigned blocks = unsigned(std::min<int64_t>((n4 + 255) / 256, 132 * 16));
  to_bf16_kernel<<<blocks, 256>>>(dst, qkv, n4);
  ZT_CUDA_LAUNCH_CHECK();
  return dst;
}

template <int HS>
void launch_forward(float* out, float* lse, const float* qkv, const AttnDims& d) {
  using L = FwdSmem<HS>;
  const bf16* qh = qkv_to_bf16(qkv, d);
  ZT_CUDA_CHECK(cudaFuncSetAttribute(fwd_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::bytes)));
  const int64_t blocks = int64_t((d.T + kFwdBQ - 1) / kFwdBQ) * d.B * d.NH;
  fwd_kernel<HS><<<unsigned(blocks), 32 * kFwdWarps, L::bytes>>>(out, lse, qh, make_tc_geom(d));
  ZT_CUDA_LAUNCH_CHECK();
}

template <int HS>
void launch_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                     const AttnDims& d) {
  using L = BwdSmem<HS>;
  const bf16* qh = qkv_to_bf16(qkv, d);
  const int64_t rows = int64_t(d.B) * d.T, warps = rows * d.NH;
  auto* oh = static_cast<bf16*>(scratch(1, size_t(warps) * HS * sizeof(bf16)));
  auto* D = static_cast<float*>(scratch(2, size_t(warps) * sizeof(float)));
  dout_prep_kernel<HS><<<unsigned((warps * 32 + 255) / 256), 256>>>(oh, D, dout, out, d.B, d.T, d.NH);
  ZT_CUDA_LAUNCH_CHECK();
  // dQ is accumulated with atomics over key tiles: the q columns of every row start at zero.
  ZT_CUDA_CHECK(cudaMemset2DAsync(dqkv, size_t(d.row_stride()) * sizeof(float), 0, size_t(d.NH) * HS * sizeof(float),
                                  size_t(rows)));
  ZT_CUDA_CHECK(cudaFuncSetAttribute(bwd_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::bytes)));
  const int64_t blocks = int64_t((d.T + kBwdBK - 1) / kBwdBK) * d.B * d.KVH;
  bwd_kernel<HS><<<unsigned(blocks), 32 * kBwdWarps, L::bytes>>>(dqkv, oh, qh, lse, D, make_tc_geom(d));
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void attention_forward_tc(float* out, float* lse, const float* qkv, const AttnDims& d) {
  if (d.HS == 64) return launch_forward<64>(out, lse, qkv, d);
  return launch_forward<128>(out, lse, qkv, d);
}

void attention_backward_tc(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                           const AttnDims& d) {
  if (d.HS == 64) return launch_backward<64>(dqkv, dout, qkv, out, lse, d);
  return launch_backward<128>(dqkv, dout, qkv, out, lse, d);
}

}  // namespace zt::kernels::cuda::detail
