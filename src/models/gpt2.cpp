// gpt2.cpp: GPT-2's parameters under HF GPT2LMHeadModel names and layouts (Conv1D
// weights stored [in, out]); learned positions, LayerNorm with bias, tanh-GELU MLP,
// LM head tied to wte.
#include <string>

#include "models/layout.h"

namespace zt {

ModelSlots gpt2_layout(const ModelConfig& c, ParamTable& t) {
  const int64_t C = c.n_embd, F = c.ffn;
  ModelSlots s;
  s.shape = {c.n_embd, c.n_head, c.n_kv_head, c.head_size, c.ffn, nn::NormKind::layernorm, nn::MlpKind::gelu, false};
  s.wte = t.add("transformer.wte.weight", {c.vocab_size, C}, ParamInit::normal);
  s.wpe = t.add("transformer.wpe.weight", {c.max_position, C}, ParamInit::normal);
  auto conv = [&](const std::string& p, int64_t in, int64_t out, ParamInit init) {
    LinearSlot l;
    l.in = int(in);
    l.out = int(out);
    l.w_in_out = true;
    l.w = t.add(p + ".weight", {in, out}, init);
    l.b = t.add(p + ".bias", {out}, ParamInit::zeros);
    return l;
  };
  auto norm = [&](const std::string& p) {
    NormSlot n;
    n.w = t.add(p + ".weight", {C}, ParamInit::ones);
    n.b = t.add(p + ".bias", {C}, ParamInit::zeros);
    return n;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    std::string p = "transformer.h." + std::to_string(l);
    BlockSlots b;
    b.ln1 = norm(p + ".ln_1");
    b.qkv = conv(p + ".attn.c_attn", C, 3 * C, ParamInit::normal);
    b.proj = conv(p + ".attn.c_proj", C, C, ParamInit::residual_normal);
    b.ln2 = norm(p + ".ln_2");
    b.fc_in = conv(p + ".mlp.c_fc", C, F, ParamInit::normal);
    b.fc_out = conv(p + ".mlp.c_proj", F, C, ParamInit::residual_normal);
    s.blocks.push_back(b);
  }
  s.lnf = norm("transformer.ln_f");
  return s;
}

}  // namespace zt
