// gpt2.cpp: GPT-2's parameters under HF GPT2LMHeadModel names and layouts (Conv1D
// weights stored [in, out]); learned positions, LayerNorm with bias, tanh-GELU MLP,
// LM head tied to wte. A cut (models/layout.h) holds part of each layer: c_attn and c_fc
// some of their outputs (c_attn's part of q, k and v each, not of the fused matrix in one
// piece), both c_proj the matching inputs, wte some rows of the vocabulary.

#include <string>

#include "models/layout.h"

namespace zt {

ModelOffsets gpt2_layout(const ModelConfig& c, ParamTable& t, const LayerCut& given) {
  const LayerCut cut = resolve_cut(c, given);
  const int64_t C = c.n_embd, F = c.ffn, HS = c.head_size;
  ModelOffsets s;
  s.shape = {c.n_embd,          cut.heads, cut.kv_heads, c.head_size, cut.ffn, nn::NormKind::layernorm,
             nn::MlpKind::gelu, false};
  s.shape.sp = cut.rows_split;
  s.wte = t.add_split("transformer.wte.weight", {cut.vocab_rows, C}, {c.vocab_size, C}, Split::vocab, 0,
                      cut.vocab_begin, ParamInit::normal);
  s.wpe = t.add("transformer.wpe.weight", {c.max_position, C}, ParamInit::normal);
  // A Conv1D [in, out]: a column layer holds `held` outputs of each of its `parts` from `begin`,
  // a row layer `held` inputs from `begin`; a row layer's bias is whole.
  auto conv = [&](const std::string& p, int64_t in, int64_t out, nn::LinearKind kind, int parts, int64_t held,
                  int64_t begin, ParamInit init) {
    const bool col = kind == nn::LinearKind::column;
    const int64_t li = col ? in : held, lo = col ? held * parts : out;
    LinearOffsets l;
    l.in = int(li);
    l.out = int(lo);
    l.w_in_out = true;
    l.kind = kind;
    l.w = t.add_split(p + ".weight", {li, lo}, {in, out}, col ? Split::column : Split::row, col ? 1 : 0, begin, init,
                      col ? parts : 1);
    l.b = col ? t.add_split(p + ".bias", {lo}, {out}, Split::column, 0, begin, ParamInit::zeros, parts)
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
    const int64_t heads = int64_t(cut.heads) * HS, heads_begin = int64_t(cut.heads_begin) * HS;
    b.qkv = conv(p + ".attn.c_attn", C, 3 * C, K::column, 3, heads, heads_begin, ParamInit::normal);
    b.proj = conv(p + ".attn.c_proj", C, C, K::row, 1, heads, heads_begin, ParamInit::residual_normal);
    b.ln2 = norm(p + ".ln_2");
    b.fc_in = conv(p + ".mlp.c_fc", C, F, K::column, 1, cut.ffn, cut.ffn_begin, ParamInit::normal);
    b.fc_out = conv(p + ".mlp.c_proj", F, C, K::row, 1, cut.ffn, cut.ffn_begin, ParamInit::residual_normal);
    s.blocks.push_back(b);
  }
  s.lnf = norm("transformer.ln_f");
  return s;
}

}  // namespace zt
