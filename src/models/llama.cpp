// llama.cpp: the Llama-shaped families' parameters under HF names (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM share them; [out, in] weights);
// RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, optional tied head, and the families'
// options: q/k/v biases (Qwen2, Llama attention_bias), o_proj bias (attention_bias), MLP
// biases (mlp_bias), per-head q/k RMSNorm (Qwen3), OLMo-2's norms (none before attention and
// the MLP, RMSNorm on their outputs, q/k RMSNorm over the whole projections), Gemma 3's (both:
// input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm,
// zero-centred weights; GeGLU; its score scale; windows on some layers, which the model applies).
// q/k/v and gate/up (weights, and biases) are added back to back so each trio/pair is one
// contiguous [out, in] matrix (and one bias vector) that a single GEMM (bias add) handles.
#include <string>
#include <tuple>

#include "models/layout.h"

namespace zt {

namespace {
struct Shape2 {
  int64_t in = 0;  // a weight's input width; 0: a bias
};
}  // namespace

ModelOffsets llama_layout(const ModelConfig& c, ParamTable& t, const TpPlan& tp) {
  const int64_t C = c.n_embd, F = c.ffn, HS = c.head_size, P = tp.size, r = tp.rank;
  // This rank's heads and hidden units (all of them at tp 1).
  const int64_t NH = c.n_head / P, KVH = tp.kv_heads_local(c.n_kv_head), Fl = F / P, Vl = tp.vocab_local(c.vocab_size);
  // KV heads replicated (TP > KVH): rank r holds head r / R, the one its query heads use.
  const int R = tp.kv_replicas(c.n_kv_head);
  ModelOffsets s;
  const nn::MlpKind mlp = c.geglu ? nn::MlpKind::geglu : nn::MlpKind::swiglu;
  s.shape = {c.n_embd, int(NH), int(KVH), c.head_size, int(Fl), nn::NormKind::rmsnorm, mlp, true};
  s.shape.qk_norm = c.qk_norm;
  s.shape.qk_norm_full = c.qk_norm_full;
  s.shape.kv_replicas = R;
  s.shape.pre_norm = c.pre_norm;
  s.shape.post_norm = c.post_norm;
  s.shape.window = c.sliding_layers.empty() ? c.sliding_window : 0;  // per-layer windows: the model's packing
  s.shape.attn_scale = c.attn_scale;
  s.shape.attn_softcap = c.attn_softcap;
  // Gemma's (1 + w) norms start at w = 0, the others' at w = 1: both scale by 1.
  const ParamInit norm_init = c.norm_unit_offset ? ParamInit::zeros : ParamInit::ones;
  s.shape.sp = tp.sp ? tp.size : 1;
  // [out, in] weights: column-parallel ones cut dim 0 (outputs), row-parallel ones dim 1.
  auto col = [&](const std::string& name, int64_t out_l, int64_t out, int64_t in, ParamInit init) {
    return t.add_split(name, {out_l, in}, {out, in}, Split::column, 0, r * out_l, init);
  };
  auto col_bias = [&](const std::string& name, int64_t out_l, int64_t out) {
    return t.add_split(name, {out_l}, {out}, Split::column, 0, r * out_l, ParamInit::zeros);
  };
  // k and v: split like the others, or (R > 1) replicated over runs of R ranks.
  auto kv = [&](const std::string& name, Shape2 shape, ParamInit init) {
    const int64_t out_l = KVH * HS, out = c.n_kv_head * HS;
    std::vector<int64_t> l{out_l}, g{out};
    if (shape.in) l.push_back(shape.in), g.push_back(shape.in);
    const int64_t off = t.add_split(name, l, g, Split::column, 0, (r / R) * out_l, init);
    t.mutable_list().back().split_replicas = R;
    return off;
  };
  s.wte = t.add_split("model.embed_tokens.weight", {Vl, C}, {c.vocab_size, C}, Split::vocab, 0,
                      tp.vocab_begin(c.vocab_size), ParamInit::normal);
  auto norm = [&](const std::string& name) {
    NormOffsets n;
    n.w = t.add(name, {C}, norm_init);
    return n;
  };
  auto linear = [&](int64_t w, int64_t in, int64_t out, int64_t b = -1) {
    LinearOffsets l;
    l.w = w;
    l.b = b;
    l.in = int(in);
    l.out = int(out);
    return l;
  };
  // Biases of a fused group, back to back like its weights; -1 when the family has none.
  // (n_local, n): this rank's part of a column-parallel bias; n_local == n: a whole one.
  auto biases = [&](bool on, std::initializer_list<std::tuple<std::string, int64_t, int64_t>> parts) {
    int64_t first = -1;
    for (const auto& [name, nl, n] : parts) {
      const bool is_kv = name.find("k_proj.bias") != std::string::npos || name.find("v_proj.bias") != std::string::npos;
      const int64_t off = !on              ? -1
                          : is_kv && P > 1 ? kv(name, {0}, ParamInit::zeros)
                          : nl == n        ? t.add(name, {n}, ParamInit::zeros)
                                           : col_bias(name, nl, n);
      if (first < 0) first = off;
    }
    return first;
  };
  // q / k norms: per head (HS), or (OLMo-2) over the projection, cut like it.
  auto head_norm = [&](const std::string& name, bool is_k) {
    NormOffsets n;
    if (!c.qk_norm_full)
      n.w = t.add(name, {HS}, norm_init);
    else if (is_k)
      n.w = kv(name, {0}, ParamInit::ones);
    else
      n.w = t.add_split(name, {NH * HS}, {c.n_head * HS}, Split::column, 0, r * NH * HS, ParamInit::ones);
    return n;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    std::string p = "model.layers." + std::to_string(l);
    BlockOffsets b;
    b.begin = t.total();
    if (c.pre_norm) b.ln1 = norm(p + ".input_layernorm.weight");
    const std::string a = p + ".self_attn.", m = p + ".mlp.";
    int64_t q = col(a + "q_proj.weight", NH * HS, c.n_head * HS, C, ParamInit::normal);
    kv(a + "k_proj.weight", {C}, ParamInit::normal);
    kv(a + "v_proj.weight", {C}, ParamInit::normal);
    const int64_t qb = biases(c.qkv_bias, {{a + "q_proj.bias", NH * HS, c.n_head * HS},
                                           {a + "k_proj.bias", KVH * HS, c.n_kv_head * HS},
                                           {a + "v_proj.bias", KVH * HS, c.n_kv_head * HS}});
    b.qkv = linear(q, C, (NH + 2 * KVH) * HS, qb);
    if (c.qk_norm) {
      b.q_norm = head_norm(a + "q_norm.weight", false);
      b.k_norm = head_norm(a + "k_norm.weight", true);
    }
    const int64_t o = t.add_split(a + "o_proj.weight", {C, NH * HS}, {C, c.n_head * HS}, Split::row, 1, r * NH * HS,
                                  ParamInit::residual_normal);
    b.proj = linear(o, NH * HS, C, biases(c.o_bias, {{a + "o_proj.bias", C, C}}));
    // OLMo-2's and Gemma's post_attention_layernorm normalizes attention's output; Llama's the MLP's
    // input, which Gemma calls pre_feedforward_layernorm.
    if (c.post_norm) b.post1 = norm(p + ".post_attention_layernorm.weight");
    if (c.pre_norm)
      b.ln2 = norm(p + (c.post_norm ? ".pre_feedforward_layernorm.weight" : ".post_attention_layernorm.weight"));
    int64_t g = col(m + "gate_proj.weight", Fl, F, C, ParamInit::normal);
    col(m + "up_proj.weight", Fl, F, C, ParamInit::normal);
    b.fc_in = linear(g, C, 2 * Fl, biases(c.mlp_bias, {{m + "gate_proj.bias", Fl, F}, {m + "up_proj.bias", Fl, F}}));
    const int64_t d =
        t.add_split(m + "down_proj.weight", {C, Fl}, {C, F}, Split::row, 1, r * Fl, ParamInit::residual_normal);
    b.fc_out = linear(d, Fl, C, biases(c.mlp_bias, {{m + "down_proj.bias", C, C}}));
    if (c.post_norm) b.post2 = norm(p + ".post_feedforward_layernorm.weight");
    s.blocks.push_back(b);
  }
  s.lnf = norm("model.norm.weight");
  if (!c.tie_word_embeddings)
    s.lm_head = t.add_split("lm_head.weight", {Vl, C}, {c.vocab_size, C}, Split::vocab, 0, tp.vocab_begin(c.vocab_size),
                            ParamInit::normal);
  return s;
}

}  // namespace zt
