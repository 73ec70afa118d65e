// attention.h: causal scaled-dot-product attention with grouped-query heads.
// Layout: qkv rows (B*T) of (NH + 2*KVH)*HS floats: [q heads | k heads | v heads];
// query head h reads key/value head h / (NH/KVH). out is (B*T, NH*HS); lse (B, NH, T)
// keeps each query row's log-sum-exp so the backward pass can rebuild probabilities.
// The flash version tiles keys with an online softmax and never holds a T x T matrix;
// attention_naive_* in kernels/reference.h materialise it and are the reference.
#pragma once
#include <cstdint>

namespace zt::kernels {

struct AttnDims {
  int B, T, NH, KVH, HS;
  int64_t row_stride() const { return int64_t(NH + 2 * KVH) * HS; }
};

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d);
// dqkv (=) for all of q, k, v; dout is (B*T, NH*HS); out/lse from the forward pass.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d);

// One query row per head against a cache of n keys/values (KV-cache decoding):
// q (NH*HS), k/v caches (n rows of KVH*HS), out (NH*HS). Not causal-masked: the cache
// holds exactly the visible positions.
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, int n, int NH, int KVH,
                      int HS);

}  // namespace zt::kernels
