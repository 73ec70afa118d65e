// llama.cpp: Llama's parameters under HF LlamaForCausalLM names ([out, in] weights, no
// biases); RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, optional tied head.
// q/k/v and gate/up are added back to back so each trio/pair is one contiguous
// [out, in] matrix that a single GEMM multiplies.
#include <string>

#include "models/layout.h"

namespace zt {

ModelSlots llama_layout(const ModelConfig& c, ParamTable& t) {
  const int64_t C = c.n_embd, F = c.ffn, HS = c.head_size;
  ModelSlots s;
  s.shape = {c.n_embd, c.n_head, c.n_kv_head, c.head_size, c.ffn, nn::NormKind::rmsnorm, nn::MlpKind::swiglu, true};
  s.wte = t.add("model.embed_tokens.weight", {c.vocab_size, C}, ParamInit::normal);
  auto norm = [&](const std::string& name) {
    NormSlot n;
    n.w = t.add(name, {C}, ParamInit::ones);
    return n;
  };
  auto linear = [&](int64_t w, int64_t in, int64_t out) {
    LinearSlot l;
    l.w = w;
    l.in = int(in);
    l.out = int(out);
    return l;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    std::string p = "model.layers." + std::to_string(l);
    BlockSlots b;
    b.ln1 = norm(p + ".input_layernorm.weight");
    int64_t q = t.add(p + ".self_attn.q_proj.weight", {c.n_head * HS, C}, ParamInit::normal);
    t.add(p + ".self_attn.k_proj.weight", {c.n_kv_head * HS, C}, ParamInit::normal);
    t.add(p + ".self_attn.v_proj.weight", {c.n_kv_head * HS, C}, ParamInit::normal);
    b.qkv = linear(q, C, c.qkv_dim());
    b.proj =
        linear(t.add(p + ".self_attn.o_proj.weight", {C, c.n_head * HS}, ParamInit::residual_normal), c.n_head * HS, C);
    b.ln2 = norm(p + ".post_attention_layernorm.weight");
    int64_t g = t.add(p + ".mlp.gate_proj.weight", {F, C}, ParamInit::normal);
    t.add(p + ".mlp.up_proj.weight", {F, C}, ParamInit::normal);
    b.fc_in = linear(g, C, 2 * F);
    b.fc_out = linear(t.add(p + ".mlp.down_proj.weight", {C, F}, ParamInit::residual_normal), F, C);
    s.blocks.push_back(b);
  }
  s.lnf = norm("model.norm.weight");
  if (!c.tie_word_embeddings) s.lm_head = t.add("lm_head.weight", {c.vocab_size, C}, ParamInit::normal);
  return s;
}

}  // namespace zt
