// attention_block.h: attention of a block of queries against a block of keys / values that
// every one of those queries sees (no causal mask): the off-diagonal blocks of ring attention
// (parallel/context_parallel.h), whose key / value block comes from a chunk of the sequence
// that lies wholly before the queries' chunk (a sliding window may hide its first keys). The diagonal (causal) blocks
// are attention.h's. Operands are given by pointer and strides so that the ring's buffers need no copies: element (b,
// i, col) of an operand is at p[b * bs + i * rs + col]; query (and output) head h at column h HS, key / value head g at
// column g HS of their own pointers. Grouped-query heads as in attention.h: query head h reads key / value head h / (NH
// / KVH). lse and D are (B, NH, ...) arrays: row i of batch b, head h at [b * lse_b + h * lse_h + i] of the pointer
// given (the caller offsets it to the block's first query row).
#pragma once
#include <cmath>
#include <cstdint>

namespace zt::kernels {

template <class T>
struct Strided {
  T* p = nullptr;
  int64_t bs = 0, rs = 0;
  T* at(int64_t b, int64_t i) const { return p + b * bs + i * rs; }
};

struct BlockDims {
  int B, NH, KVH, HS;
  int nq, nk;            // query rows and key / value rows per batch row
  int64_t lse_b, lse_h;  // strides of lse and D
  // The scores' scale (0: 1 / sqrt(HS)) and soft-cap (Gemma 2: c tanh(s / c); 0: none), as
  // AttnDims's.
  float scale = 0.f, softcap = 0.f;
  // A sliding window's bound: query row i (of the nq, the same for every batch row and head)
  // sees keys first[i] .. nk - 1 only (first[i] >= nk: none); null: every key.
  const int32_t* first = nullptr;
  float softmax_scale() const { return scale > 0.f ? scale : 1.0f / std::sqrt(static_cast<float>(HS)); }
};

// out = softmax(q k^T * scale) v for every query row against its visible keys (all nk without
// `first`), and lse each row's log-sum-exp of its scaled (capped) scores (the online-softmax
// merge of ring attention needs it). A row that sees no key gets out 0 and lse -inf (a zero
// weight in the merge).
void attention_block_forward(Strided<float> out, float* lse, Strided<const float> q, Strided<const float> k,
                             Strided<const float> v, const BlockDims& d);
// The block's share of the gradients, added (+=) into dq, dk, dv. lse is the log-sum-exp of
// each query row over ALL the keys it sees (the merged one), D the row dot(dout, out) of the
// final (merged) output: with those, P = exp(S - lse) is this block's part of the row's
// softmax and the usual flash-attention backward applies block by block.
void attention_block_backward(Strided<float> dq, Strided<float> dk, Strided<float> dv, Strided<const float> dout,
                              const float* lse, const float* D, Strided<const float> q, Strided<const float> k,
                              Strided<const float> v, const BlockDims& d);

}  // namespace zt::kernels
