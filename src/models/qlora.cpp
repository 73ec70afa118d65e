// qlora.cpp: QLoRA's frozen base (Transformer::quantize_base): every block's linear weights (and a
// mixture-of-experts block's routed experts) quantized to NF4 as bitsandbytes' Linear4bit stores
// them (kernels/nf4.h), and the fp32 base buffer compacted to what stays in fp32 (embeddings, norms,
// biases, the LM head, an MoE layer's router and shared expert).
#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"
#include "models/transformer.h"

namespace zt {

// A frozen (out, in) weight as --load_in_4bit (NF4, blocks of 64) or --load_in_8bit (Int8Params) stores it.
kernels::Nf4Tensor Transformer::quantize_weight(const float* w, int64_t rows, int64_t cols) const {
  if (cfg_.lora.int8) return kernels::int8_quantize_weight(w, rows, cols);
  return kernels::nf4_quantize_weight(w, rows, cols, 64, cfg_.lora.nf4_double_quant);
}

void Transformer::quantize_base() {
  ZT_ASSERT(frozen_.data(), "quantize_base: the fp32 base is loaded first (init_base)");
  const float* F = frozen_.as<float>();
  quantize_base_from([F](int64_t begin, int64_t n, float* dst) { std::copy_n(F + begin, n, dst); });
}

void Transformer::quantize_base_from(const BaseFill& fill) {
  ZT_ASSERT(layout_.frozen_base && cfg_.lora.quantized() && nf4_.empty(), "quantize_base: a QLoRA model, once");
  ModelOffsets& s = layout_.offsets;
  std::vector<std::pair<int64_t, int64_t>> dropped;  // the quantized weights' element ranges
  nf4_.reserve(s.blocks.size() * 4);
  std::vector<float> w, transposed;  // one weight at a time
  for (BlockOffsets& b : s.blocks)
    for (LinearOffsets* lo : {&b.qkv, &b.proj, &b.fc_in, &b.fc_out}) {
      if (lo->w < 0) {  // a mixture-of-experts block has no dense MLP: an empty slot keeps the indexing
        nf4_.emplace_back();
        continue;
      }
      const int64_t n = int64_t(lo->in) * lo->out;
      w.resize(size_t(n));
      fill(lo->w, n, w.data());
      const float* q = w.data();
      if (lo->w_in_out) {  // GPT-2's Conv1D (in, out): quantized as the (out, in) matrix bitsandbytes holds
        transposed.resize(size_t(n));
        for (int64_t i = 0; i < lo->in; ++i)
          for (int64_t o = 0; o < lo->out; ++o) transposed[size_t(o * lo->in + i)] = w[size_t(i * lo->out + o)];
        q = transposed.data();
      }
      // A fused Linear (Llama's q/k/v, gate/up) is quantized as one tensor: the same blocks of 64
      // as per module wherever a module's size is a multiple of 64; the double quantization's
      // groups of 256 scales and their mean span the modules.
      nf4_.push_back(quantize_weight(q, lo->out, lo->in));
      dropped.push_back({lo->w, lo->w + n});
      lo->w = -1;
    }
  if (cfg_.moe.on()) quantize_experts(fill, dropped);
  // What stays fp32, compacted, and every remaining offset moved to it.
  ParamTable kept;
  std::map<int64_t, int64_t> moved;
  auto quantized = [&](const ParamInfo& p) {
    for (auto [a, e] : dropped)
      if (p.offset >= a && p.offset + p.numel <= e) return true;
    return false;
  };
  for (const ParamInfo& p : layout_.base_table.list())
    if (!quantized(p)) moved[p.offset] = kept.add(p.name, p.shape, p.init);
  Buffer compact(size_t(kept.total()) * sizeof(float), MemCategory::parameters);
  for (const ParamInfo& p : layout_.base_table.list())
    if (!quantized(p)) fill(p.offset, p.numel, compact.as<float>() + moved.at(p.offset));
  auto re = [&](int64_t& off) {
    if (off >= 0) off = moved.at(off);
  };
  auto norm = [&](NormOffsets& n) { re(n.w), re(n.b); };
  re(s.wte), re(s.wpe), re(s.lm_head), norm(s.lnf);
  for (BlockOffsets& b : s.blocks) {
    for (NormOffsets* n : {&b.ln1, &b.ln2, &b.q_norm, &b.k_norm, &b.post1, &b.post2}) norm(*n);
    for (LinearOffsets* lo : {&b.qkv, &b.proj, &b.fc_in, &b.fc_out}) re(lo->b);
    // The router and the shared expert stay fp32 (the layer reads them as fp32 Linears).
    for (LinearOffsets* lo : {&b.moe.router, &b.moe.shared_in, &b.moe.shared_out, &b.moe.shared_gate})
      re(lo->w), re(lo->b);
    b.begin = -1;  // units are the adapters'; the base has none
  }
  layout_.base_table = std::move(kept);
  frozen_ = std::move(compact);  // (quantize_base: frees the whole fp32 base the values came from)
  for (const kernels::Nf4Tensor& t : nf4_) nf4_views_.push_back(t.view());
  for (const kernels::Nf4Tensor& t : nf4_experts_) nf4_expert_views_.push_back(t.view());
  nf4_charge_ = MemCharge(nf4_bytes(), MemCategory::parameters);
  base_changed();
  runtime_->bind_layers();
}

// Each held expert's [W_gate; W_up] (2F, C) and W_out (C, F) as two NF4 tensors (bitsandbytes
// quantizes transformers' w1, w3, w2 Linears; w1 and w3 back to back give the same blocks of 64
// wherever F C is a multiple of 64), the experts' fp32 range dropped.
void Transformer::quantize_experts(const BaseFill& fill, std::vector<std::pair<int64_t, int64_t>>& dropped) {
  const int64_t C = cfg_.n_embd, Fe = cfg_.moe.expert_ffn, held = layout_.cut.experts, stride = 3 * Fe * C;
  std::vector<float> w(static_cast<size_t>(stride));  // one expert at a time
  for (BlockOffsets& b : layout_.offsets.blocks) {
    for (int64_t e = 0; e < held; ++e) {
      fill(b.moe.experts + e * stride, stride, w.data());
      nf4_experts_.push_back(quantize_weight(w.data(), 2 * Fe, C));
      nf4_experts_.push_back(quantize_weight(w.data() + 2 * Fe * C, C, Fe));
    }
    dropped.push_back({b.moe.experts, b.moe.experts + held * stride});
    b.moe.experts = -1;
  }
}

size_t Transformer::nf4_bytes(int64_t* params) const {
  size_t bytes = 0;
  int64_t n = 0;
  for (const kernels::Nf4Tensor& t : nf4_experts_) bytes += t.bytes(), n += t.numel();
  for (const kernels::Nf4Tensor& t : nf4_) bytes += t.bytes(), n += t.numel();
  if (params) *params = n;
  return bytes;
}

}  // namespace zt
