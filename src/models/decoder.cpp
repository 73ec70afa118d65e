// decoder.cpp: see decoder.h.
#include "models/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"

namespace zt {

int64_t KvDecoder::cache_bytes(const ModelConfig& c, int max_len) {
  // (L, K|V, max_len, KVH * HS) fp32
  return int64_t(2) * c.n_layer * max_len * c.n_kv_head * c.head_size * int64_t(sizeof(float));
}

KvDecoder::KvDecoder(const Transformer& model, int max_len) : model_(model), max_len_(max_len) {
  const ModelConfig& c = model_.config();
  ZT_CHECK(max_len <= c.max_position, "generation length ", max_len, " exceeds the model's context of ", c.max_position,
           " positions; lower --max_new_tokens or shorten the prompt");
  const int64_t kvw = int64_t(c.n_kv_head) * c.head_size;
  kv_ = Buffer(size_t(cache_bytes(c, max_len)), MemCategory::activations);
  for (int l = 0; l < c.n_layer; ++l) {
    k_cache_.push_back(kv_.as<float>() + (2 * int64_t(l)) * max_len * kvw);
    v_cache_.push_back(kv_.as<float>() + (2 * int64_t(l) + 1) * max_len * kvw);
  }
  const auto& shape = model_.blocks_.front().shape;
  Carver cv;
  auto carve = [&](Carver& w) {
    x_ = w.take(c.n_embd);
    h_ = w.take(c.n_embd);
    qkv_ = w.take(c.qkv_dim());
    att_ = w.take(int64_t(c.n_head) * c.head_size);
    fc_ = w.take(shape.fc_dim());
    act_ = w.take(c.ffn);
    logits_ = w.take(c.vocab_size);
    cos_ = w.take(int64_t(max_len) * c.head_size / 2);
    sin_ = w.take(int64_t(max_len) * c.head_size / 2);
    const int64_t local = c.rope_local_theta > 0.f ? int64_t(max_len) * c.head_size / 2 : 0;  // Gemma 3
    cos_local_ = w.take(local);
    sin_local_ = w.take(local);
    moe_out_ = w.take(shape.moe.on() ? c.n_embd : 0);
    moe_acts_ = nn::Moe::carve_acts(w, shape.moe, 1);
  };
  carve(cv);
  work_ = Buffer(cv.used(), MemCategory::temporary);
  Carver real(work_.data());
  carve(real);
  if (shape.rope) rope_fill(model_.rope_, cos_, sin_, max_len);
  for (int l = 0; l < c.n_layer && c.rope_local_theta > 0.f; ++l)
    if (&model_.rope_for_layer(l) != &model_.rope_) {  // the sliding layers' table, once
      rope_fill(model_.rope_for_layer(l), cos_local_, sin_local_, max_len);
      break;
    }
  qk_rstd_.resize(size_t(c.n_head + c.n_kv_head));
}

TensorView KvDecoder::step(int32_t token) {
  const ModelConfig& c = model_.config();
  ZT_CHECK(pos_ < max_len_, "KV cache is full (", max_len_, " positions)");
  ZT_CHECK(token >= 0 && token < c.vocab_size, "token id ", token, " is outside the vocabulary of ", c.vocab_size);
  const int C = c.n_embd, half = c.head_size / 2;
  const int64_t kvw = int64_t(c.n_kv_head) * c.head_size, qw = int64_t(c.n_head) * c.head_size;
  const float* wpe = model_.position_embedding().as<const float>();
  const float* wte = model_.token_embedding().as<const float>();
  const float scale = model_.embed_multiplier();  // Gemma: sqrt(hidden_size)
  for (int i = 0; i < C; ++i) x_[i] = wte[int64_t(token) * C + i] * scale + (wpe ? wpe[int64_t(pos_) * C + i] : 0.f);
  // One row: every activation below is a (1, width) view.
  auto row = [](float* p, int64_t w) { return TensorView::of(p, {1, w}); };
  const TensorView x = row(x_, C), h = row(h_, C), one_mean = row(&mean_, 1), one_rstd = row(&rstd_, 1);
  for (size_t l = 0; l < model_.blocks_.size(); ++l) {
    const nn::Block& b = model_.blocks_[l];
    b.ln1.forward(h, one_mean, one_rstd, x);
    b.qkv.forward(row(qkv_, c.qkv_dim()), h);
    if (b.shape.qk_norm) {  // in place: RMSNorm reads a row before writing it
      // Rows of one head each, or (OLMo-2) one row of all of them.
      const int qr = b.shape.qk_norm_full ? 1 : c.n_head, kr = b.shape.qk_norm_full ? 1 : c.n_kv_head;
      const TensorView q = TensorView::of(qkv_, {qr, b.q_norm.C});
      b.q_norm.forward(q, {}, TensorView::of(qk_rstd_.data(), {qr}), q);
      const TensorView k = TensorView::of(qkv_ + qw, {kr, b.k_norm.C});
      b.k_norm.forward(k, {}, TensorView::of(qk_rstd_.data() + c.n_head, {kr}), k);
    }
    const bool local = &model_.rope_for_layer(int(l)) != &model_.rope_;  // Gemma 3's sliding layers
    const float *cs = local ? cos_local_ : cos_, *sn = local ? sin_local_ : sin_;
    if (b.shape.rope)  // position pos_: the table row at pos_ is "t = 0" of a 1-row call
      kernels::rope_forward(qkv_, cs + int64_t(pos_) * half, sn + int64_t(pos_) * half, 1, 1, c.n_head, c.n_kv_head,
                            c.head_size, c.qkv_dim());
    std::memcpy(k_cache_[l] + pos_ * kvw, qkv_ + qw, kvw * sizeof(float));
    std::memcpy(v_cache_[l] + pos_ * kvw, qkv_ + qw + kvw, kvw * sizeof(float));
    // A sliding window (Mistral) sees the last W cached positions, this one included.
    const int first = b.shape.window > 0 ? std::max(0, pos_ + 1 - b.shape.window) : 0;
    kernels::attention_decode(att_, qkv_, k_cache_[l] + first * kvw, v_cache_[l] + first * kvw, pos_ + 1 - first,
                              c.n_head, c.n_kv_head, c.head_size, b.shape.attn_scale, b.shape.attn_softcap);
    // Residual adds as the training pass does them (block.cpp): GEMM, then x += out.
    b.proj.forward(h, row(att_, qw));
    if (b.shape.post_norm) b.post1.forward(h, {}, one_rstd, h);  // OLMo-2, Gemma: the output normalized
    kernels::add(x_, x_, h_, C);
    b.ln2.forward(h, one_mean, one_rstd, x);
    if (b.shape.moe.on()) {  // the layer's own forward on the one row (its output may not alias its input)
      b.moe.forward(row(moe_out_, C), h, moe_acts_);
      std::memcpy(h_, moe_out_, size_t(C) * sizeof(float));
    } else {
      b.fc_in.forward(row(fc_, b.shape.fc_dim()), h);
      if (b.shape.mlp == nn::MlpKind::gelu)
        kernels::gelu_forward(act_, fc_, c.ffn);
      else if (b.shape.mlp == nn::MlpKind::swiglu)
        kernels::swiglu_forward(act_, fc_, 1, c.ffn);
      else
        kernels::geglu_forward(act_, fc_, 1, c.ffn);
      b.fc_out.forward(h, row(act_, c.ffn));
    }
    if (b.shape.post_norm) b.post2.forward(h, {}, one_rstd, h);
    kernels::add(x_, x_, h_, C);
  }
  model_.lnf_.forward(h, one_mean, one_rstd, x);
  kernels::gemm(false, true, 1, c.vocab_size, C, 1.0f, h_, C, model_.lm_head().as<const float>(), C, 0.0f, logits_,
                c.vocab_size);
  if (c.final_softcap > 0.f)  // Gemma 2: the logits soft-capped, as training's head does
    for (int v = 0; v < c.vocab_size; ++v) logits_[v] = c.final_softcap * std::tanh(logits_[v] / c.final_softcap);
  ++pos_;
  return TensorView::of(logits_, {c.vocab_size});
}

}  // namespace zt
