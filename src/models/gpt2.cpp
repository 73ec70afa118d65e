// gpt2.cpp: GPT-2's parameters under HF GPT2LMHeadModel names and layouts (Conv1D
// weights stored [in, out]); learned positions, LayerNorm with bias, tanh-GELU MLP,
// LM head tied to wte. Under a tensor-parallel plan each rank holds its slice: c_attn and
// c_fc cut along their outputs (c_attn's q, k and v each, not the fused matrix in one piece),
// both c_proj along their inputs, wte along the vocabulary.

#include <string>

#include "models/layout.h"

namespace zt {

ModelOffsets gpt2_layout(const ModelConfig& c, ParamTable& t, const TpPlan& tp) {
  const int64_t C = c.n_embd, F = c.ffn, P = tp.size, r = tp.rank;
  const int64_t Fl = F / P, Vl = tp.vocab_local(c.vocab_size);
  ModelOffsets s;
  s.shape = {c.n_embd, int(c.n_head / P),       int(c.n_kv_head / P), c.head_size,
             int(Fl),  nn::NormKind::layernorm, nn::MlpKind::gelu,    false};
  s.shape.sp = tp.sp ? tp.size : 1;
  s.wte = t.add_split("transformer.wte.weight", {Vl, C}, {c.vocab_size, C}, Split::vocab, 0,
                      tp.vocab_begin(c.vocab_size), ParamInit::normal);
  s.wpe = t.add("transformer.wpe.weight", {c.max_position, C}, ParamInit::normal);
  // A Conv1D [in, out] cut along out (column) or in (row); a row-parallel bias is whole.
  auto conv = [&](const std::string& p, int64_t in, int64_t out, nn::LinearKind kind, int parts, ParamInit init) {
    const bool col = kind == nn::LinearKind::column;
    const int64_t li = col ? in : in / P, lo = col ? out / P : out;
    LinearOffsets l;
    l.in = int(li);
    l.out = int(lo);
    l.w_in_out = true;
    l.kind = kind;
    l.w = t.add_split(p + ".weight", {li, lo}, {in, out}, col ? Split::column : Split::row, col ? 1 : 0,
                      r * (col ? out / parts / P : in / P), init, col ? parts : 1);
    l.b = col ? t.add_split(p + ".bias", {lo}, {out}, Split::column, 0, r * (out / parts / P), ParamInit::zeros, parts)
              : t.add(p + ".bias", {out}, ParamInit::zeros);
    return l;
  };
  auto norm = [&](const std::string& p) {
    NormOffsets n;
    n.w = t.add(p + ".weight", {C}, ParamInit::ones);
    n.b = t.add(p + ".bias", {C}, ParamInit::zeros);
    return n;
  };
  using K = nn::LinearKind;
  for (int l = 0; l < c.n_layer; ++l) {
    std::string p = "transformer.h." + std::to_string(l);
    BlockOffsets b;
    b.ln1 = norm(p + ".ln_1");
    b.qkv = conv(p + ".attn.c_attn", C, 3 * C, K::column, 3, ParamInit::normal);
    b.proj = conv(p + ".attn.c_proj", C, C, K::row, 1, ParamInit::residual_normal);
    b.ln2 = norm(p + ".ln_2");
    b.fc_in = conv(p + ".mlp.c_fc", C, F, K::column, 1, ParamInit::normal);
    b.fc_out = conv(p + ".mlp.c_proj", F, C, K::row, 1, ParamInit::residual_normal);
    s.blocks.push_back(b);
  }
  s.lnf = norm("transformer.ln_f");
  return s;
}

}  // namespace zt
