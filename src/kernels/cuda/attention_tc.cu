// attention_tc.cu: the tensor-core attention kernels (bf16 mode, HS 64 or 128): the plan of
// attention.cu's CUDA-core kernels with the five tile products on WMMA bf16 16x16x16 fragments
// and fp32 accumulators. Inputs arrive in fp32 and are rounded to bf16 as they enter shared
// memory; P and dS are rounded when written for their products.
//
// WMMA leaves the accumulator's element-to-thread layout unspecified, so the softmax does not
// work on fragments in registers: score tiles are stored to shared memory (fp32), each row is
// reduced there, and P is written back as bf16 for the next product. Rescaling the running O
// accumulator needs each element's row: it is read off at run time from a fragment loaded with
// M[r][c] = r, which holds whatever layout the compiler uses.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <climits>
#include <cmath>

#include "core/cuda_check.h"
#include "kernels/cuda/attention_cuda.h"

namespace zt::kernels::cuda::detail {
namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;

struct TcGeom {
  int B, T, NH, KVH;
  int64_t rs;          // qkv row stride (floats)
  const int32_t* doc;  // (B, T) first visible key, or null
  float scale;         // 1 / sqrt(HS)
};

constexpr size_t align128(size_t n) { return (n + 127) / 128 * 128; }

// Shared memory of the forward kernel. Rows are padded by 8 bf16 / 4 floats so that the 16-row
// fragment loads hit distinct banks; WMMA wants 32-byte aligned tiles, which these strides keep.
template <int HS>
struct FwdLayout {
  static constexpr int BQ = 16 * kWarps, BK = 64, LDH = HS + 8, LDS = BK + 4, LDP = BK + 8;
  static constexpr size_t k_off = 0;
  static constexpr size_t v_off = k_off + align128(size_t(BK) * LDH * 2);
  static constexpr size_t q_off = v_off + align128(size_t(BK) * LDH * 2);
  static constexpr size_t s_off = q_off + align128(size_t(BQ) * LDH * 2);  // S (fp32)
  static constexpr size_t p_off = s_off + align128(size_t(BQ) * LDS * 4);
  static constexpr size_t a_off = p_off + align128(size_t(BQ) * LDP * 2);  // per-row rescale factors
  static constexpr size_t bytes = a_off + align128(size_t(BQ) * 4);
};

template <int HS>
struct BwdLayout {
  static constexpr int BQ = 64, BK = 64, LDH = HS + 8, LDS = BQ + 4, LDP = BQ + 8;
  static constexpr size_t tile = align128(size_t(64) * LDH * 2);
  static constexpr size_t k_off = 0, v_off = tile, q_off = 2 * tile, o_off = 3 * tile;  // K, V, Q, dO
  static constexpr size_t s_off = 4 * tile;                                              // S^T (fp32)
  static constexpr size_t dp_off = s_off + align128(size_t(BK) * LDS * 4);               // dP^T (fp32)
  static constexpr size_t pt_off = dp_off + align128(size_t(BK) * LDS * 4);              // P^T (bf16)
  static constexpr size_t dst_off = pt_off + align128(size_t(BK) * LDP * 2);             // dS^T (bf16)
  static constexpr size_t lse_off = dst_off + align128(size_t(BK) * LDP * 2);
  static constexpr size_t d_off = lse_off + align128(BQ * 4);
  static constexpr size_t f_off = d_off + align128(BQ * 4);
  static constexpr size_t bytes = f_off + align128(BQ * 4);
};

// First key query t of row b may see; INT_MAX for a padding row past T, which sees none.
__device__ __forceinline__ int first_key(const TcGeom& g, int b, int t) {
  if (t >= g.T) return INT_MAX;
  return g.doc ? g.doc[int64_t(b) * g.T + t] : 0;
}

// dst (n rows, stride ld, bf16) = src rows [r0, r0 + n) x HS (fp32, row stride `stride`), rows
// at or past T as 0 so that masked products stay finite.
template <int HS>
__device__ void load_bf16(bf16* dst, int ld, const float* src, int64_t stride, int r0, int n, int T) {
  constexpr int V = HS / 4;
  for (int idx = threadIdx.x; idx < n * V; idx += kThreads) {
    const int r = idx / V, c = (idx % V) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r0 + r < T) v = *reinterpret_cast<const float4*>(src + int64_t(r0 + r) * stride + c);
    auto* d2 = reinterpret_cast<__nv_bfloat162*>(dst + r * ld + c);
    d2[0] = __floats2bfloat162_rn(v.x, v.y);
    d2[1] = __floats2bfloat162_rn(v.z, v.w);
  }
}

// Writes a warp's 16 x 16 accumulator tile to global rows (row r at dst + r * stride) for the
// rows r < valid, through a per-warp fp32 staging tile; add = float4 atomics instead of stores.
__device__ void write_tile(float* dst, int64_t stride, int valid, const FragAcc& f, float* stage, bool add) {
  const int lane = threadIdx.x % 32;
  __syncwarp();
  wmma::store_matrix_sync(stage, f, 16, wmma::mem_row_major);
  __syncwarp();
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int e = lane + 32 * t, r = e / 4, c = (e % 4) * 4;
    if (r >= valid) continue;
    const float4 v = *reinterpret_cast<const float4*>(stage + r * 16 + c);
    float4* p = reinterpret_cast<float4*>(dst + r * stride + c);
    if (add)
      atomicAdd(p, v);
    else
      *p = v;
  }
}

// Forward: block = one query tile of BQ rows (16 per warp) of one (b, h); the last query tiles,
// which see the most keys, go first. The loops over fragments are kept rolled on purpose: fully
// unrolled, the compiler hoists every fragment load and runs out of registers.
template <int HS>
__global__ void __launch_bounds__(kThreads, 1) fwd_tc_kernel(float* out, float* lse, const float* qkv, TcGeom g) {
  using L = FwdLayout<HS>;
  constexpr int BQ = L::BQ, BK = L::BK, LDH = L::LDH, LDS = L::LDS, LDP = L::LDP, NK = HS / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem + L::k_off);
  bf16* vs = reinterpret_cast<bf16*>(smem + L::v_off);
  float* ss = reinterpret_cast<float*>(smem + L::s_off);
  bf16* qs = reinterpret_cast<bf16*>(smem + L::q_off);
  bf16* ps = reinterpret_cast<bf16*>(smem + L::p_off);
  float* alpha_s = reinterpret_cast<float*>(smem + L::a_off);
  const int bh = g.B * g.NH, nqt = (g.T + BQ - 1) / BQ;
  const int qt = nqt - 1 - int(blockIdx.x / bh), b = int(blockIdx.x % bh) / g.NH, h = int(blockIdx.x % g.NH);
  const int grp = h / (g.NH / g.KVH), q0 = qt * BQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* base = qkv + int64_t(b) * g.T * g.rs;

  load_bf16<HS>(qs, LDH, base + h * HS, g.rs, q0, BQ, g.T);
  reinterpret_cast<float*>(ps)[threadIdx.x] = float(threadIdx.x / 16);  // the row-index matrix, 16 x 16
  __syncthreads();
  FragAcc map;
  wmma::load_matrix_sync(map, reinterpret_cast<float*>(ps), 16, wmma::mem_row_major);
  int row_of[FragAcc::num_elements];
#pragma unroll
  for (int e = 0; e < FragAcc::num_elements; ++e) row_of[e] = warp * 16 + int(map.x[e]);

  // Softmax ownership: two lanes per row of the warp's 16, each with every other column.
  const int half = lane & 1, my_row = warp * 16 + (lane >> 1), i = q0 + my_row;
  const int first_i = first_key(g, b, i);
  const int wq0 = q0 + warp * 16, wq1 = min(wq0 + 15, g.T - 1), wfirst = first_key(g, b, wq0);
  const float sl2 = g.scale * kLog2e;  // scores in log2 units: exp2f
  float m = -INFINITY, l = 0.f;
  FragAcc o[NK];
#pragma unroll
  for (int n = 0; n < NK; ++n) wmma::fill_fragment(o[n], 0.f);

  const int qlast = min(q0 + BQ, g.T) - 1;
  for (int k0 = first_key(g, b, q0) / BK * BK; k0 <= qlast; k0 += BK) {
    __syncthreads();  // everyone is done with the previous K, V
    load_bf16<HS>(ks, LDH, base + (g.NH + grp) * HS, g.rs, k0, BK, g.T);
    load_bf16<HS>(vs, LDH, base + (g.NH + g.KVH + grp) * HS, g.rs, k0, BK, g.T);
    __syncthreads();
    if (k0 > wq1 || k0 + BK - 1 < wfirst) continue;  // every key of the tile is masked for this warp

    FragAcc s[BK / 16];
#pragma unroll
    for (int n = 0; n < BK / 16; ++n) wmma::fill_fragment(s[n], 0.f);
#pragma unroll 1
    for (int kk = 0; kk < NK; ++kk) {
      FragA qa;
      wmma::load_matrix_sync(qa, qs + warp * 16 * LDH + kk * 16, LDH);
#pragma unroll
      for (int n = 0; n < BK / 16; ++n) {
        FragBT kb;  // K^T: column j of B is key row j
        wmma::load_matrix_sync(kb, ks + n * 16 * LDH + kk * 16, LDH);
        wmma::mma_sync(s[n], qa, kb, s[n]);
      }
    }
#pragma unroll
    for (int n = 0; n < BK / 16; ++n)
      wmma::store_matrix_sync(ss + warp * 16 * LDS + n * 16, s[n], LDS, wmma::mem_row_major);
    __syncwarp();

    // Online softmax of this lane's half row.
    const float* srow = ss + my_row * LDS;
    bf16* prow = ps + my_row * LDP;
    // Key k0 + c is visible to this row iff c in [c_lo, c_hi].
    const int c_lo = max(first_i - k0, 0), c_hi = min(i - k0, BK - 1);
    float mx = -INFINITY;
#pragma unroll 8
    for (int t = 0; t < BK / 2; ++t) {
      const int c = half + 2 * t;
      if (c >= c_lo && c <= c_hi) mx = fmaxf(mx, srow[c] * sl2);
    }
    mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 1));
    const float mnew = fmaxf(m, mx), mref = mnew == -INFINITY ? 0.f : mnew;  // nothing visible yet: no NaN
    float sum = 0.f;
#pragma unroll 8
    for (int t = 0; t < BK / 2; ++t) {
      const int c = half + 2 * t;
      const float p = c >= c_lo && c <= c_hi ? exp2f(srow[c] * sl2 - mref) : 0.f;
      sum += p;
      prow[half + 2 * t] = __float2bfloat16_rn(p);
    }
    sum += __shfl_xor_sync(~0u, sum, 1);
    const float alpha = exp2f(m - mref);
    l = l * alpha + sum;
    m = mnew;
    if (half == 0) alpha_s[my_row] = alpha;
    __syncwarp();

#pragma unroll
    for (int n = 0; n < NK; ++n)
#pragma unroll
      for (int e = 0; e < FragAcc::num_elements; ++e) o[n].x[e] *= alpha_s[row_of[e]];
#pragma unroll 1
    for (int kk = 0; kk < BK / 16; ++kk) {
      FragA pa;
      wmma::load_matrix_sync(pa, ps + warp * 16 * LDP + kk * 16, LDP);
#pragma unroll
      for (int n = 0; n < NK; ++n) {
        FragB vb;
        wmma::load_matrix_sync(vb, vs + kk * 16 * LDH + n * 16, LDH);
        wmma::mma_sync(o[n], pa, vb, o[n]);
      }
    }
  }

  __syncwarp();  // the last rescale's reads of alpha_s are done
  if (half == 0) {
    alpha_s[my_row] = l > 0.f ? 1.f / l : 0.f;
    if (i < g.T) lse[(int64_t(b) * g.NH + h) * g.T + i] = (m + log2f(l)) / kLog2e;
  }
  __syncwarp();
  float* stage = ss + warp * 16 * LDS;  // this warp's own score rows, free now
  const int valid = min(16, g.T - wq0);
  float* orow = out + (int64_t(b) * g.T + wq0) * g.NH * HS + h * HS;
#pragma unroll
  for (int n = 0; n < NK; ++n) {
#pragma unroll
    for (int e = 0; e < FragAcc::num_elements; ++e) o[n].x[e] *= alpha_s[row_of[e]];
    if (valid > 0) write_tile(orow + n * 16, int64_t(g.NH) * HS, valid, o[n], stage, false);
  }
}

// S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x 32 queries, then P^T = exp(S - lse) on
// the visible pairs (else 0) and dS^T = P^T (dP^T - D) scale, both rounded to bf16.
template <int HS>
__device__ void bwd_scores(unsigned char* smem, const TcGeom& g, int k0, int i0) {
  using L = BwdLayout<HS>;
  constexpr int LDH = L::LDH, LDS = L::LDS, LDP = L::LDP, NK = HS / 16;
  const bf16* ks = reinterpret_cast<const bf16*>(smem + L::k_off);
  const bf16* vs = reinterpret_cast<const bf16*>(smem + L::v_off);
  const bf16* qs = reinterpret_cast<const bf16*>(smem + L::q_off);
  const bf16* dos = reinterpret_cast<const bf16*>(smem + L::o_off);
  float* ss = reinterpret_cast<float*>(smem + L::s_off);
  float* dps = reinterpret_cast<float*>(smem + L::dp_off);
  bf16* pts = reinterpret_cast<bf16*>(smem + L::pt_off);
  bf16* dsts = reinterpret_cast<bf16*>(smem + L::dst_off);
  const float* lse_s = reinterpret_cast<const float*>(smem + L::lse_off);
  const float* d_s = reinterpret_cast<const float*>(smem + L::d_off);
  const int* first_s = reinterpret_cast<const int*>(smem + L::f_off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kb = warp % 4, qb0 = 2 * (warp / 4);

  FragAcc s[2], dp[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    wmma::fill_fragment(s[u], 0.f);
    wmma::fill_fragment(dp[u], 0.f);
  }
#pragma unroll 1
  for (int kk = 0; kk < NK; ++kk) {
    FragA ka, va;
    wmma::load_matrix_sync(ka, ks + kb * 16 * LDH + kk * 16, LDH);
    wmma::load_matrix_sync(va, vs + kb * 16 * LDH + kk * 16, LDH);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      FragBT qb, ob;  // Q^T, dO^T: column i of B is query row i
      wmma::load_matrix_sync(qb, qs + (qb0 + u) * 16 * LDH + kk * 16, LDH);
      wmma::load_matrix_sync(ob, dos + (qb0 + u) * 16 * LDH + kk * 16, LDH);
      wmma::mma_sync(s[u], ka, qb, s[u]);
      wmma::mma_sync(dp[u], va, ob, dp[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    wmma::store_matrix_sync(ss + kb * 16 * LDS + (qb0 + u) * 16, s[u], LDS, wmma::mem_row_major);
    wmma::store_matrix_sync(dps + kb * 16 * LDS + (qb0 + u) * 16, dp[u], LDS, wmma::mem_row_major);
  }
  __syncwarp();
  const float sl2 = g.scale * kLog2e;
  const int col = qb0 * 16 + lane, i = i0 + col;  // lane = query column, loop over the 16 keys
  const int fi = first_s[col];
  const float lse_i = lse_s[col], D_i = d_s[col];
#pragma unroll 4
  for (int t = 0; t < 16; ++t) {
    const int kr = kb * 16 + t, j = k0 + kr;
    const bool visible = j >= fi && j <= i;  // fi = INT_MAX past T
    const float p = visible ? exp2f(ss[kr * LDS + col] * sl2 - lse_i) : 0.f;
    const float ds = p * (dps[kr * LDS + col] - D_i) * g.scale;
    pts[kr * LDP + col] = __float2bfloat16_rn(p);
    dsts[kr * LDP + col] = __float2bfloat16_rn(ds);
  }
}

// Backward: block = one key tile of BK keys of one (b, KV head), over the group's query heads and
// the query tiles that see the tile. dK, dV stay in fragments (warp: 16 keys x HS/2 of each);
// dQ goes to global memory with float4 atomics (dqkv's q part is zero on entry).
template <int HS>
__global__ void __launch_bounds__(kThreads, 1) bwd_tc_kernel(float* dqkv, const float* dout, const float* qkv,
                                                             const float* lse, const float* D, TcGeom g) {
  using L = BwdLayout<HS>;
  constexpr int BQ = L::BQ, BK = L::BK, LDH = L::LDH, LDP = L::LDP, NF = HS / 32, HALF = HS / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem + L::k_off);
  bf16* vs = reinterpret_cast<bf16*>(smem + L::v_off);
  bf16* qs = reinterpret_cast<bf16*>(smem + L::q_off);
  bf16* dos = reinterpret_cast<bf16*>(smem + L::o_off);
  const bf16* pts = reinterpret_cast<const bf16*>(smem + L::pt_off);
  const bf16* dsts = reinterpret_cast<const bf16*>(smem + L::dst_off);
  float* lse_s = reinterpret_cast<float*>(smem + L::lse_off);
  float* d_s = reinterpret_cast<float*>(smem + L::d_off);
  int* first_s = reinterpret_cast<int*>(smem + L::f_off);
  // Key tiles in the slowest index: the first tiles, seen by the most queries, start first.
  const int gb = g.KVH * g.B, kt = int(blockIdx.x / gb), grp = int(blockIdx.x % gb) % g.KVH;
  const int b = int(blockIdx.x % gb) / g.KVH, k0 = kt * BK, heads = g.NH / g.KVH;
  const int warp = threadIdx.x / 32, rb = warp % 4, dh = warp / 4;  // 16-row block, HS half
  float* stage = reinterpret_cast<float*>(smem + L::s_off) + warp * 256;  // free after bwd_scores
  const float* base = qkv + int64_t(b) * g.T * g.rs;
  const float* dbase = dout + int64_t(b) * g.T * g.NH * HS;
  load_bf16<HS>(ks, LDH, base + (g.NH + grp) * HS, g.rs, k0, BK, g.T);
  load_bf16<HS>(vs, LDH, base + (g.NH + g.KVH + grp) * HS, g.rs, k0, BK, g.T);
  FragAcc dk[NF], dv[NF];
#pragma unroll
  for (int n = 0; n < NF; ++n) {
    wmma::fill_fragment(dk[n], 0.f);
    wmma::fill_fragment(dv[n], 0.f);
  }
  const int klast = min(k0 + BK, g.T) - 1;
  for (int hh = 0; hh < heads; ++hh) {
    const int h = grp * heads + hh;
    // Queries before k0 see none of these keys; from the first query whose document starts
    // after klast on, none does (doc_start is non-decreasing).
    for (int i0 = k0; i0 < g.T && first_key(g, b, i0) <= klast; i0 += BQ) {
      __syncthreads();  // the previous tile's products are done
      load_bf16<HS>(qs, LDH, base + h * HS, g.rs, i0, BQ, g.T);
      load_bf16<HS>(dos, LDH, dbase + h * HS, int64_t(g.NH) * HS, i0, BQ, g.T);
      if (threadIdx.x < BQ) {
        const int i = i0 + threadIdx.x;
        const bool in = i < g.T;
        lse_s[threadIdx.x] = in ? lse[(int64_t(b) * g.NH + h) * g.T + i] * kLog2e : 0.f;
        d_s[threadIdx.x] = in ? D[(int64_t(b) * g.NH + h) * g.T + i] : 0.f;
        first_s[threadIdx.x] = first_key(g, b, i);
      }
      __syncthreads();
      bwd_scores<HS>(smem, g, k0, i0);
      __syncthreads();  // P^T and dS^T complete

      // dV += P^T dO and dK += dS^T Q: this warp's keys rb, head-dimension half dh.
#pragma unroll 1
      for (int kk = 0; kk < BQ / 16; ++kk) {
        FragA pa, dsa;
        wmma::load_matrix_sync(pa, pts + rb * 16 * LDP + kk * 16, LDP);
        wmma::load_matrix_sync(dsa, dsts + rb * 16 * LDP + kk * 16, LDP);
#pragma unroll
        for (int n = 0; n < NF; ++n) {
          FragB ob, qb;
          wmma::load_matrix_sync(ob, dos + kk * 16 * LDH + dh * HALF + n * 16, LDH);
          wmma::load_matrix_sync(qb, qs + kk * 16 * LDH + dh * HALF + n * 16, LDH);
          wmma::mma_sync(dv[n], pa, ob, dv[n]);
          wmma::mma_sync(dk[n], dsa, qb, dk[n]);
        }
      }
      // dQ = dS K: this warp's queries rb, half dh. dS is read transposed out of dS^T.
      FragAcc dq[NF];
#pragma unroll
      for (int n = 0; n < NF; ++n) wmma::fill_fragment(dq[n], 0.f);
#pragma unroll 1
      for (int kk = 0; kk < BK / 16; ++kk) {
        FragAT da;
        wmma::load_matrix_sync(da, dsts + kk * 16 * LDP + rb * 16, LDP);
#pragma unroll
        for (int n = 0; n < NF; ++n) {
          FragB kb;
          wmma::load_matrix_sync(kb, ks + kk * 16 * LDH + dh * HALF + n * 16, LDH);
          wmma::mma_sync(dq[n], da, kb, dq[n]);
        }
      }
      const int qrow = i0 + rb * 16;
      float* dq_dst = dqkv + (int64_t(b) * g.T + qrow) * g.rs + h * HS + dh * HALF;
#pragma unroll
      for (int n = 0; n < NF; ++n)
        if (qrow < g.T) write_tile(dq_dst + n * 16, g.rs, min(16, g.T - qrow), dq[n], stage, true);
    }
  }
  const int krow = k0 + rb * 16;
  if (krow >= g.T) return;
  float* row = dqkv + (int64_t(b) * g.T + krow) * g.rs + dh * HALF;
#pragma unroll
  for (int n = 0; n < NF; ++n) {
    write_tile(row + (g.NH + grp) * HS + n * 16, g.rs, min(16, g.T - krow), dk[n], stage, false);
    write_tile(row + (g.NH + g.KVH + grp) * HS + n * 16, g.rs, min(16, g.T - krow), dv[n], stage, false);
  }
}

TcGeom make_tc_geom(const AttnDims& d) {
  return TcGeom{d.B, d.T, d.NH, d.KVH, d.row_stride(), d.doc_start, 1.f / std::sqrt(float(d.HS))};
}

template <int HS>
void launch_forward(float* out, float* lse, const float* qkv, const AttnDims& d) {
  using L = FwdLayout<HS>;
  ZT_CUDA_CHECK(cudaFuncSetAttribute(fwd_tc_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::bytes)));
  const int64_t blocks = int64_t((d.T + L::BQ - 1) / L::BQ) * d.B * d.NH;
  fwd_tc_kernel<HS><<<unsigned(blocks), kThreads, L::bytes>>>(out, lse, qkv, make_tc_geom(d));
  ZT_CUDA_LAUNCH_CHECK();
}

template <int HS>
void launch_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                     const AttnDims& d) {
  using L = BwdLayout<HS>;
  ZT_CUDA_CHECK(cudaFuncSetAttribute(bwd_tc_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::bytes)));
  const int64_t blocks = int64_t((d.T + L::BK - 1) / L::BK) * d.B * d.KVH;
  bwd_tc_kernel<HS><<<unsigned(blocks), kThreads, L::bytes>>>(dqkv, dout, qkv, lse, D, make_tc_geom(d));
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void attention_forward_tc(float* out, float* lse, const float* qkv, const AttnDims& d) {
  if (d.HS == 64) return launch_forward<64>(out, lse, qkv, d);
  return launch_forward<128>(out, lse, qkv, d);
}

void attention_backward_tc(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                           const AttnDims& d) {
  if (d.HS == 64) return launch_backward<64>(dqkv, dout, qkv, lse, D, d);
  return launch_backward<128>(dqkv, dout, qkv, lse, D, d);
}

}  // namespace zt::kernels::cuda::detail
