// context_parallel.cpp: zigzag sharding and ring attention (context_parallel.h).
//
// Rank r of P holds chunks a = r and b = 2P - 1 - r (c = T / 2P tokens each), in that order,
// as its T / P local rows. Against its own K / V the local rows are plain causal attention
// (chunk a precedes chunk b, so causal over the local order is causal over the positions):
// attention.h's kernel. Against rank j's K / V (chunks j and 2P - 1 - j):
//   j < r: j < r < 2P-1-r < 2P-1-j: all local rows see chunk j whole, none sees 2P-1-j;
//   j > r: r < j < 2P-1-j < 2P-1-r: chunk b sees both of j's chunks whole, chunk a neither;
// either way a (2c x c) or (c x 2c) unmasked block (attention_block.h): the same work on
// every rank at every ring step, the causal load balance.
#include "parallel/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/attention_block.h"

namespace zt::parallel {
namespace {
constexpr int kTagFwdKv = 1, kTagBwdKv = 2, kTagBwdAcc = 3;

// Copies the k and v columns of every local row of qkv into kv (rows of 2 KVH HS).
void pack_kv(float* kv, const float* qkv, const kernels::AttnDims& d) {
  const int64_t rows = int64_t(d.B) * d.T, rs = d.row_stride(), kvs = int64_t(2) * d.KVH * d.HS;
  const int64_t off = int64_t(d.NH) * d.HS;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) std::memcpy(kv + i * kvs, qkv + i * rs + off, size_t(kvs) * sizeof(float));
}

// Merges a block's partial output (ob, lb) into the running (out, lse) for local rows
// [q0, q0 + nq): both are softmax-normalised over their own keys, so the merged row is their
// mix weighted by each part's share exp(lse_part - lse_merged) of the total.
void merge(float* out, float* lse, const float* ob, const float* lb, const kernels::AttnDims& d, int q0, int nq) {
  const int64_t os = int64_t(d.NH) * d.HS, tasks = int64_t(d.B) * d.NH;
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / d.NH, h = task % d.NH;
    for (int t = q0; t < q0 + nq; ++t) {
      const int64_t li = (b * d.NH + h) * d.T + t;
      const double l1 = lse[li], l2 = lb[li], mx = std::max(l1, l2);
      const double merged = mx + std::log(std::exp(l1 - mx) + std::exp(l2 - mx));
      const float w1 = float(std::exp(l1 - merged)), w2 = float(std::exp(l2 - merged));
      float* o = out + (b * d.T + t) * os + h * d.HS;
      const float* p = ob + (b * d.T + t) * os + h * d.HS;
#pragma omp simd
      for (int e = 0; e < d.HS; ++e) o[e] = w1 * o[e] + w2 * p[e];
      lse[li] = float(merged);
    }
  }
}

// The unmasked block of local rows against the K / V of `owner` (see the file comment).
struct BlockRange {
  int q0, nq, nk;
};
BlockRange block_range(int owner, int rank, int Tl) {
  const int c = Tl / 2;
  return owner < rank ? BlockRange{0, Tl, c} : BlockRange{c, c, Tl};
}

// The global position of local row t of cp rank r of P (chunks of c tokens): chunk r, then
// chunk 2P - 1 - r.
int zigzag_position(int P, int c, int r, int t) { return t < c ? r * c + t : (2 * P - 1 - r) * c + (t - c); }

// The first of n rows (global positions pos(k), ascending in k) at or after position lo; n if none.
template <class Pos>
int first_at_or_after(int n, int lo, Pos pos) {
  int a = 0, b = n;
  while (a < b) {
    const int m = (a + b) / 2;
    if (pos(m) < lo)
      a = m + 1;
    else
      b = m;
  }
  return a;
}

// D = rowsum(dO * O) of the merged output, per (b, h, row) (B, NH, T), as the kernels compute it.
void row_dots(float* D, const float* out, const float* dout, const kernels::AttnDims& d) {
  const int Tl = d.T, NH = d.NH, HS = d.HS;
  const int64_t os = int64_t(NH) * HS, tasks = int64_t(d.B) * NH;
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / NH, h = task % NH;
    for (int t = 0; t < Tl; ++t) {
      const float* o = out + (b * Tl + t) * os + h * HS;
      const float* g = dout + (b * Tl + t) * os + h * HS;
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int e = 0; e < HS; ++e) s += o[e] * g[e];
      D[(b * NH + h) * Tl + t] = s;
    }
  }
}

}  // namespace

void check_cp_seq_len(int T, int cp) {
  ZT_CHECK(T % (2 * cp) == 0, "--context-parallel-size ", cp, " splits each sequence of ", T, " tokens into 2 x ", cp,
           " = ", 2 * cp, " equal chunks (zigzag: 2 per rank); ", T, " is not divisible by ", 2 * cp,
           ": set --model_max_length to a multiple of ", 2 * cp);
}

void check_cp_composes(int T, int cp, bool packing, bool validation, int pp) {
  check_cp_seq_len(T, cp);
  ZT_CHECK(!packing, "--context-parallel-size ", cp,
           " does not support --packing yet (document masks across the ring); train without it");
  ZT_CHECK(!validation || pp == 1, "--context-parallel-size ", cp,
           " with pipeline stages: evaluation (--validation_file) does not run there yet; evaluate the saved model "
           "with one process");
}

ContextParallel::ContextParallel(dist::Communicator& cp, int T) : comm_(cp), T_(T) { check_cp_seq_len(T, cp.size()); }

int ContextParallel::global_position(int t) const { return zigzag_position(size(), T_ / (2 * size()), rank(), t); }

const int32_t* ContextParallel::diag_bounds(int W, int B) {
  const int Tl = local_T(), c = Tl / 2, P = size(), r = rank();
  if (diag_W_ == W && diag_B_ == B) return diag_.data();
  diag_.resize(size_t(B) * Tl);
  for (int t = 0; t < Tl; ++t)
    diag_[t] = first_at_or_after(t, global_position(t) - W + 1, [&](int k) { return zigzag_position(P, c, r, k); });
  for (int b = 1; b < B; ++b) std::copy_n(diag_.data(), Tl, diag_.data() + size_t(b) * Tl);
  diag_W_ = W;
  diag_B_ = B;
  return diag_.data();
}

const int32_t* ContextParallel::block_bounds(int W, int owner, int q0, int nq, int nk, bool* hidden) {
  const int c = local_T() / 2, P = size();
  first_.resize(size_t(nq));
  bool any = false, all = true;
  for (int i = 0; i < nq; ++i) {
    // The owner's block is its local rows [0, nk): ascending global positions.
    const int f =
        first_at_or_after(nk, global_position(q0 + i) - W + 1, [&](int k) { return zigzag_position(P, c, owner, k); });
    first_[i] = f;
    any |= f > 0;
    all &= f >= nk;
  }
  *hidden = all;
  return any ? first_.data() : nullptr;
}

ContextParallel::Shard ContextParallel::shard(const int32_t* inputs, const int32_t* targets, int B, int slot) {
  const int Tl = local_T();
  if (int(rows_.size()) <= slot) rows_.resize(size_t(slot) + 1);
  std::vector<int32_t>&in_ = rows_[slot].in, &tg_ = rows_[slot].tg, &pos_ = rows_[slot].pos;
  in_.resize(size_t(B) * Tl);
  tg_.resize(size_t(B) * Tl);
  pos_.resize(size_t(B) * Tl);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tl; ++t) {
      const int g = global_position(t);
      const size_t i = size_t(b) * Tl + t, src = size_t(b) * T_ + g;
      in_[i] = inputs[src];
      tg_[i] = targets ? targets[src] : 0;
      pos_[i] = g;
    }
  return {in_.data(), targets ? tg_.data() : nullptr, pos_.data()};
}

double ContextParallel::ring_bytes_per_layer(int B, int T, int P, int KVH, int HS) {
  return 3.0 * (P - 1) * double(B) * (T / P) * 2 * KVH * HS * sizeof(float);
}

void ContextParallel::ensure(size_t kv_elems, size_t out_elems, size_t lse_elems, bool backward) {
  for (auto* v : {&kv_[0], &kv_[1]})
    if (v->size() < kv_elems) v->resize(kv_elems);
  if (backward) {
    for (auto* v : {&acc_[0], &acc_[1]})
      if (v->size() < kv_elems) v->resize(kv_elems);
    if (D_.size() < lse_elems) D_.resize(lse_elems);
  } else {
    if (out_blk_.size() < out_elems) out_blk_.resize(out_elems);
    if (lse_blk_.size() < lse_elems) lse_blk_.resize(lse_elems);
  }
}

void ContextParallel::attention_forward(float* out, float* lse, const float* qkv, const kernels::AttnDims& d) {
  ZT_ASSERT(!d.doc_start && d.T == local_T(), "context parallel attention: unexpected packing or length");
  const int P = size(), r = rank();
  if (P == 1 && d.window == 0) return kernels::attention_forward(out, lse, qkv, d);
  // The diagonal block: causal over the local rows, a window bounding each row's first key.
  kernels::AttnDims dd = d;
  if (d.window > 0) dd.doc_start = diag_bounds(d.window, d.B);
  if (P == 1) return kernels::attention_forward(out, lse, qkv, dd);
  const int Tl = d.T, HS = d.HS;
  const int64_t rs = d.row_stride(), os = int64_t(d.NH) * HS, kvs = int64_t(2) * d.KVH * HS;
  const size_t kv_elems = size_t(d.B) * Tl * kvs, kv_bytes = kv_elems * sizeof(float);
  ensure(kv_elems, size_t(d.B) * Tl * os, size_t(d.B) * d.NH * Tl, false);
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  pack_kv(kv_[0].data(), qkv, d);
  int cur = 0;
  dist::Request sent = comm_.isend(kv_[cur].data(), kv_bytes, next, kTagFwdKv);
  dist::Request got = comm_.irecv(kv_[1 - cur].data(), kv_bytes, prev, kTagFwdKv);
  // The diagonal block while the first K / V block travels: this rank's own K / V, causal over
  // its rows.
  kernels::attention_forward(out, lse, qkv, dd);
  ZT_PROFILE("cp_ring_fwd");
  for (int s = 1; s < P; ++s) {
    sent.wait();
    got.wait();
    cur = 1 - cur;    // kv_[cur]: the K / V of rank r - s
    if (s + 1 < P) {  // pass it on while computing with it
      sent = comm_.isend(kv_[cur].data(), kv_bytes, next, kTagFwdKv);
      got = comm_.irecv(kv_[1 - cur].data(), kv_bytes, prev, kTagFwdKv);
    }
    const int owner = (r - s + P) % P;
    const BlockRange br = block_range(owner, r, Tl);
    const float* kv = kv_[cur].data();
    bool hidden = false;
    const int32_t* first = d.window > 0 ? block_bounds(d.window, owner, br.q0, br.nq, br.nk, &hidden) : nullptr;
    if (hidden) continue;  // the window sees none of these keys: nothing to merge
    kernels::BlockDims bd{d.B, d.NH, d.KVH, HS, br.nq, br.nk, int64_t(d.NH) * Tl, Tl, d.scale, d.softcap, first};
    kernels::attention_block_forward({out_blk_.data() + br.q0 * os, Tl * os, os}, lse_blk_.data() + br.q0,
                                     {qkv + br.q0 * rs, Tl * rs, rs}, {kv, Tl * kvs, kvs},
                                     {kv + int64_t(d.KVH) * HS, Tl * kvs, kvs}, bd);
    merge(out, lse, out_blk_.data(), lse_blk_.data(), d, br.q0, br.nq);
  }
}

void ContextParallel::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                         const float* lse, const kernels::AttnDims& d) {
  ZT_ASSERT(!d.doc_start && d.T == local_T(), "context parallel attention: unexpected packing or length");
  const int P = size(), r = rank();
  kernels::AttnDims dd = d;
  if (d.window > 0) dd.doc_start = diag_bounds(d.window, d.B);
  if (P == 1) return kernels::attention_backward(dqkv, dout, qkv, out, lse, dd);
  const int Tl = d.T, NH = d.NH, HS = d.HS;
  const int64_t rs = d.row_stride(), os = int64_t(NH) * HS, kvs = int64_t(2) * d.KVH * HS;
  const size_t kv_elems = size_t(d.B) * Tl * kvs, kv_bytes = kv_elems * sizeof(float);
  ensure(kv_elems, size_t(d.B) * Tl * os, size_t(d.B) * NH * Tl, true);
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  pack_kv(kv_[0].data(), qkv, d);
  int cur = 0, ac = 0;  // kv_[cur]: the K / V in hand; acc_[ac]: their dK / dV so far
  dist::Request kv_sent = comm_.isend(kv_[cur].data(), kv_bytes, next, kTagBwdKv);
  dist::Request kv_got = comm_.irecv(kv_[1 - cur].data(), kv_bytes, prev, kTagBwdKv);
  // The diagonal block while the first K / V block travels: dQ of every local row (=), and this
  // rank's dK / dV from its own rows; with the merged out and lse its P is the block's part of
  // each row's softmax.
  kernels::attention_backward(dqkv, dout, qkv, out, lse, dd);
  ZT_PROFILE("cp_ring_bwd");
  row_dots(D_.data(), out, dout, d);
  dist::Request acc_sent, acc_got;
  for (int s = 1; s < P; ++s) {
    kv_sent.wait();
    kv_got.wait();
    cur = 1 - cur;  // the K / V of owner r - s
    if (s + 1 < P) {
      kv_sent = comm_.isend(kv_[cur].data(), kv_bytes, next, kTagBwdKv);
      kv_got = comm_.irecv(kv_[1 - cur].data(), kv_bytes, prev, kTagBwdKv);
    }
    // The owner's dK / dV accumulated by the ranks before this one (none at the first step).
    if (s == 1) {
      std::fill_n(acc_[ac].data(), kv_elems, 0.f);
    } else {
      acc_got.wait();
    }
    const int owner = (r - s + P) % P;
    const BlockRange br = block_range(owner, r, Tl);
    const float* kv = kv_[cur].data();
    float* acc = acc_[ac].data();
    bool hidden = false;
    const int32_t* first = d.window > 0 ? block_bounds(d.window, owner, br.q0, br.nq, br.nk, &hidden) : nullptr;
    kernels::BlockDims bd{d.B, NH, d.KVH, HS, br.nq, br.nk, int64_t(NH) * Tl, Tl, d.scale, d.softcap, first};
    if (!hidden)  // a block the window hides adds nothing; its accumulator passes on unchanged
      kernels::attention_block_backward({dqkv + br.q0 * rs, Tl * rs, rs}, {acc, Tl * kvs, kvs},
                                        {acc + int64_t(d.KVH) * HS, Tl * kvs, kvs}, {dout + br.q0 * os, Tl * os, os},
                                        lse + br.q0, D_.data() + br.q0, {qkv + br.q0 * rs, Tl * rs, rs},
                                        {kv, Tl * kvs, kvs}, {kv + int64_t(d.KVH) * HS, Tl * kvs, kvs}, bd);
    // On to the next rank (at the last step that is the owner, r + 1); the next accumulator
    // (at the last step: this rank's own, from its other ranks) arrives in the other buffer.
    acc_sent.wait();
    acc_sent = comm_.isend(acc, kv_bytes, next, kTagBwdAcc);
    acc_got = comm_.irecv(acc_[1 - ac].data(), kv_bytes, prev, kTagBwdAcc);
    ac = 1 - ac;
  }
  acc_got.wait();
  acc_sent.wait();
  // This rank's dK / dV from the other ranks' queries, added to its own.
  const float* acc = acc_[ac].data();
  const int64_t rows = int64_t(d.B) * Tl, koff = int64_t(NH) * HS;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    float* dst = dqkv + i * rs + koff;
    const float* src = acc + i * kvs;
#pragma omp simd
    for (int64_t e = 0; e < kvs; ++e) dst[e] += src[e];
  }
}

}  // namespace zt::parallel
