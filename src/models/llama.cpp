// llama.cpp: the Llama-shaped families' parameters under HF names (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM share them; [out, in] weights);
// RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, optional tied head, and the families'
// options: q/k/v biases (Qwen2, Llama attention_bias), o_proj bias (attention_bias), MLP
// biases (mlp_bias), per-head q/k RMSNorm (Qwen3).
// q/k/v and gate/up (weights, and biases) are added back to back so each trio/pair is one
// contiguous [out, in] matrix (and one bias vector) that a single GEMM (bias add) handles.
#include <string>

#include "models/layout.h"

namespace zt {

ModelSlots llama_layout(const ModelConfig& c, ParamTable& t) {
  const int64_t C = c.n_embd, F = c.ffn, HS = c.head_size;
  ModelSlots s;
  s.shape = {c.n_embd, c.n_head, c.n_kv_head, c.head_size, c.ffn, nn::NormKind::rmsnorm, nn::MlpKind::swiglu, true};
  s.shape.qk_norm = c.qk_norm;
  s.shape.window = c.sliding_window;
  s.wte = t.add("model.embed_tokens.weight", {c.vocab_size, C}, ParamInit::normal);
  auto norm = [&](const std::string& name) {
    NormSlot n;
    n.w = t.add(name, {C}, ParamInit::ones);
    return n;
  };
  auto linear = [&](int64_t w, int64_t in, int64_t out, int64_t b = -1) {
    LinearSlot l;
    l.w = w;
    l.b = b;
    l.in = int(in);
    l.out = int(out);
    return l;
  };
  // Biases of a fused group, back to back like its weights; -1 when the family has none.
  auto biases = [&](bool on, std::initializer_list<std::pair<std::string, int64_t>> parts) {
    int64_t first = -1;
    for (const auto& [name, n] : parts) {
      const int64_t off = on ? t.add(name, {n}, ParamInit::zeros) : -1;
      if (first < 0) first = off;
    }
    return first;
  };
  auto head_norm = [&](const std::string& name) {
    NormSlot n;
    n.w = t.add(name, {HS}, ParamInit::ones);
    return n;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    std::string p = "model.layers." + std::to_string(l);
    BlockSlots b;
    b.ln1 = norm(p + ".input_layernorm.weight");
    const std::string a = p + ".self_attn.", m = p + ".mlp.";
    int64_t q = t.add(a + "q_proj.weight", {c.n_head * HS, C}, ParamInit::normal);
    t.add(a + "k_proj.weight", {c.n_kv_head * HS, C}, ParamInit::normal);
    t.add(a + "v_proj.weight", {c.n_kv_head * HS, C}, ParamInit::normal);
    const int64_t qb = biases(c.qkv_bias, {{a + "q_proj.bias", c.n_head * HS},
                                           {a + "k_proj.bias", c.n_kv_head * HS},
                                           {a + "v_proj.bias", c.n_kv_head * HS}});
    b.qkv = linear(q, C, c.qkv_dim(), qb);
    if (c.qk_norm) {
      b.q_norm = head_norm(a + "q_norm.weight");
      b.k_norm = head_norm(a + "k_norm.weight");
    }
    const int64_t o = t.add(a + "o_proj.weight", {C, c.n_head * HS}, ParamInit::residual_normal);
    b.proj = linear(o, c.n_head * HS, C, biases(c.o_bias, {{a + "o_proj.bias", C}}));
    b.ln2 = norm(p + ".post_attention_layernorm.weight");
    int64_t g = t.add(m + "gate_proj.weight", {F, C}, ParamInit::normal);
    t.add(m + "up_proj.weight", {F, C}, ParamInit::normal);
    b.fc_in = linear(g, C, 2 * F, biases(c.mlp_bias, {{m + "gate_proj.bias", F}, {m + "up_proj.bias", F}}));
    const int64_t d = t.add(m + "down_proj.weight", {C, F}, ParamInit::residual_normal);
    b.fc_out = linear(d, F, C, biases(c.mlp_bias, {{m + "down_proj.bias", C}}));
    s.blocks.push_back(b);
  }
  s.lnf = norm("model.norm.weight");
  if (!c.tie_word_embeddings) s.lm_head = t.add("lm_head.weight", {c.vocab_size, C}, ParamInit::normal);
  return s;
}

}  // namespace zt
