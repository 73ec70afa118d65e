// attention.h: causal scaled-dot-product attention with grouped-query heads.
// Layout: qkv rows (B*T) of (NH + 2*KVH)*HS floats: [q heads | k heads | v heads];
// query head h reads key/value head h / (NH/KVH). out is (B*T, NH*HS); lse (B, NH, T)
// keeps each query row's log-sum-exp so the backward pass can rebuild probabilities.
// The flash version tiles keys with an online softmax and never holds a T x T matrix;
// ref::attention_* in kernels/reference.h materialise it and are the reference.
// Document packing: with doc_start set, query t of row b sees only keys s with
// doc_start[b*T + t] <= s <= t, so packed documents never attend across a boundary.
#pragma once
#include <cmath>
#include <cstdint>

namespace zt::kernels {

struct AttnDims {
  int B, T, NH, KVH, HS;
  // (B, T) first key each query may see (packed documents), non-decreasing along a row
  // with doc_start[t] <= t; null = plain causal (every query sees keys 0..t).
  const int32_t* doc_start = nullptr;
  // The scores' scale; 0: 1 / sqrt(HS). Gemma sets query_pre_attn_scalar^-1/2. The CPU and GPU
  // kernels and context parallelism's ring honour it.
  float scale = 0.f;
  // Gemma 2's attn_logit_softcapping c: scores become c tanh(s / c) before the softmax; 0: none.
  // The fp32 CPU kernels (forward, backward, decode) apply it; the bf16 entry points run them then.
  // The GPU's CUDA-core kernels apply it (dispatch.h sends capped attention there in fp32, too).
  float softcap = 0.f;
  // The layer's sliding window W (query at position p sees keys p-W+1..p; 0: none). The kernels
  // here do not read it: the model folds a window into doc_start (attention_window_start). Context
  // parallelism's ring does (parallel/context_parallel.h), which masks by global positions.
  int window = 0;
  float softmax_scale() const { return scale > 0.f ? scale : 1.0f / std::sqrt(static_cast<float>(HS)); }
  int64_t row_stride() const { return int64_t(NH + 2 * KVH) * HS; }
};

// doc_start (B, T) from position ids (B, T) that restart at 0 where a document starts
// (Hugging Face's position_ids for packed rows): doc_start[t] = max(0, t - positions[t]);
// a row that begins mid-document (positions[0] > 0) sees its whole first part.
void attention_doc_start(int32_t* doc_start, const int32_t* positions, int B, int T);
// Sliding-window attention (Mistral's sliding_window W): query t sees at most W keys, t-W+1..t
// (transformers: kv_idx > q_idx - W). Raises each doc_start (B, T) to that bound, in place, so
// a window combines with packed documents; the bound is non-decreasing like doc_start's.
void attention_window_start(int32_t* doc_start, int B, int T, int W);

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d);
// dqkv (=) for all of q, k, v; dout is (B*T, NH*HS); out/lse from the forward pass.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d);

// The same with the tile products in bf16 (--bf16; attention_bf16.cpp): Q, K, V, dO and the
// probability tiles P, dS are rounded to bf16 for AVX512-BF16 dot products with fp32
// accumulation; softmax, lse and the outputs stay fp32. attention_bf16_native(HS) says
// whether that kernel runs (built with AVX512-BF16 and HS a multiple of 64 up to 512);
// otherwise these run the fp32 kernels above.
bool attention_bf16_native(int HS);
void attention_forward_bf16(float* out, float* lse, const float* qkv, const AttnDims& d);
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             const AttnDims& d);

// One query row per head against a cache of n keys/values (KV-cache decoding):
// q (NH*HS), k/v caches (n rows of KVH*HS), out (NH*HS). Not causal-masked: the cache
// holds exactly the visible positions.
// scale, softcap: as AttnDims's (0: 1 / sqrt(HS), none).
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, int n, int NH, int KVH,
                      int HS, float scale = 0.f, float softcap = 0.f);

}  // namespace zt::kernels
