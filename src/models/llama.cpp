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

// Adds one model's tensors to the table in the order the flat layout keeps them (the HF names'
// order within each block), the part of each that the cut holds (models/layout.h).
class LlamaLayout {
 public:
  LlamaLayout(const ModelConfig& c, ParamTable& t, const LayerCut& cut)
      : c_(c),
        t_(t),
        cut_(cut),
        C(c.n_embd),
        HS(c.head_size),
        NH(cut.heads),
        KVH(cut.kv_heads),
        Fl(cut.ffn),
        R(cut.kv_holders),
        q_begin(int64_t(cut.heads_begin) * HS),
        kv_begin(int64_t(cut.kv_heads_begin) * HS),
        ffn_begin(cut.ffn_begin),
        // Gemma's (1 + w) norms start at w = 0, the others' at w = 1: both scale by 1.
        norm_init_(c.norm_unit_offset ? ParamInit::zeros : ParamInit::ones) {}

  ModelOffsets build() {
    ModelOffsets s;
    s.shape = block_shape();
    const int64_t Vl = cut_.vocab_rows;
    s.wte = t_.add_split("model.embed_tokens.weight", {Vl, C}, {c_.vocab_size, C}, Split::vocab, 0, cut_.vocab_begin,
                         ParamInit::normal);
    for (int l = 0; l < c_.n_layer; ++l) s.blocks.push_back(block(l));
    s.lnf = norm("model.norm.weight");
    if (!c_.tie_word_embeddings)
      s.lm_head = t_.add_split("lm_head.weight", {Vl, C}, {c_.vocab_size, C}, Split::vocab, 0, cut_.vocab_begin,
                               ParamInit::normal);
    return s;
  }

 private:
  nn::BlockShape block_shape() const {
    const nn::MlpKind mlp = c_.geglu ? nn::MlpKind::geglu : nn::MlpKind::swiglu;
    nn::BlockShape b{c_.n_embd, int(NH), int(KVH), c_.head_size, int(Fl), nn::NormKind::rmsnorm, mlp, true};
    b.qk_norm = c_.qk_norm;
    b.qk_norm_full = c_.qk_norm_full;
    b.kv_replicas = R;
    b.pre_norm = c_.pre_norm;
    b.post_norm = c_.post_norm;
    b.window = c_.sliding_layers.empty() ? c_.sliding_window : 0;  // per-layer windows: the model's packing
    b.attn_scale = c_.attn_scale;
    b.attn_softcap = c_.attn_softcap;
    b.sp = cut_.rows_split;
    if (c_.moe.on()) {
      const MoeConfig& m = c_.moe;
      b.F = 0;  // no dense MLP
      b.moe = {int(C),       m.num_experts, m.top_k,     m.expert_ffn,
               m.shared_ffn, m.shared_gate, m.norm_topk, m.capacity_factor};
      b.moe.held = cut_.experts;
      b.moe.held_begin = cut_.experts_begin;
      if (cut_.shared_ffn > 0) b.moe.Fs = cut_.shared_ffn;
    }
    return b;
  }
  // [out, in] weights: column layers hold outputs [begin, + out_l) (dim 0), row layers inputs (dim 1).
  int64_t col(const std::string& name, int64_t out_l, int64_t out, int64_t in, int64_t begin, ParamInit init) {
    return t_.add_split(name, {out_l, in}, {out, in}, Split::column, 0, begin, init);
  }
  int64_t col_bias(const std::string& name, int64_t out_l, int64_t out, int64_t begin) {
    return t_.add_split(name, {out_l}, {out}, Split::column, 0, begin, ParamInit::zeros);
  }
  // k and v: held like the others, or (R > 1) the same heads held by runs of R parts.
  int64_t kv(const std::string& name, Shape2 shape, ParamInit init) {
    const int64_t out_l = KVH * HS, out = c_.n_kv_head * HS;
    std::vector<int64_t> l{out_l}, g{out};
    if (shape.in) l.push_back(shape.in), g.push_back(shape.in);
    const int64_t off = t_.add_split(name, l, g, Split::column, 0, kv_begin, init);
    t_.mutable_list().back().split_replicas = R;
    return off;
  }
  NormOffsets norm(const std::string& name) {
    NormOffsets n;
    n.w = t_.add(name, {C}, norm_init_);
    return n;
  }
  static LinearOffsets linear(int64_t w, int64_t in, int64_t out, int64_t b = -1) {
    LinearOffsets l;
    l.w = w;
    l.b = b;
    l.in = int(in);
    l.out = int(out);
    return l;
  }
  // Biases of a fused group, back to back like its weights; -1 when the family has none.
  // (n_local, n, begin): the held part of a column layer's bias; n_local == n: a whole one.
  int64_t biases(bool on, std::initializer_list<std::tuple<std::string, int64_t, int64_t, int64_t>> parts) {
    int64_t first = -1;
    for (const auto& [name, nl, n, begin] : parts) {
      const bool is_kv = name.find("k_proj.bias") != std::string::npos || name.find("v_proj.bias") != std::string::npos;
      const int64_t off = !on                    ? -1
                          : is_kv && !cut_.whole ? kv(name, {0}, ParamInit::zeros)
                          : nl == n              ? t_.add(name, {n}, ParamInit::zeros)
                                                 : col_bias(name, nl, n, begin);
      if (first < 0) first = off;
    }
    return first;
  }
  // q / k norms: per head (HS), or (OLMo-2) over the projection, cut like it.
  NormOffsets head_norm(const std::string& name, bool is_k) {
    NormOffsets n;
    if (!c_.qk_norm_full)
      n.w = t_.add(name, {HS}, norm_init_);
    else if (is_k)
      n.w = kv(name, {0}, ParamInit::ones);
    else
      n.w = t_.add_split(name, {NH * HS}, {c_.n_head * HS}, Split::column, 0, q_begin, ParamInit::ones);
    return n;
  }
  BlockOffsets block(int l) {
    const std::string p = "model.layers." + std::to_string(l);
    BlockOffsets b;
    b.begin = t_.total();
    if (c_.pre_norm) b.ln1 = norm(p + ".input_layernorm.weight");
    attention(p + ".self_attn.", b);
    // OLMo-2's and Gemma's post_attention_layernorm normalizes attention's output; Llama's the MLP's
    // input, which Gemma calls pre_feedforward_layernorm.
    if (c_.post_norm) b.post1 = norm(p + ".post_attention_layernorm.weight");
    if (c_.pre_norm)
      b.ln2 = norm(p + (c_.post_norm ? ".pre_feedforward_layernorm.weight" : ".post_attention_layernorm.weight"));
    if (c_.moe.on())
      moe_mlp(p, b);
    else
      mlp(p + ".mlp.", b);
    if (c_.post_norm) b.post2 = norm(p + ".post_feedforward_layernorm.weight");
    return b;
  }
  void attention(const std::string& a, BlockOffsets& b) {
    const int64_t q = col(a + "q_proj.weight", NH * HS, c_.n_head * HS, C, q_begin, ParamInit::normal);
    kv(a + "k_proj.weight", {C}, ParamInit::normal);
    kv(a + "v_proj.weight", {C}, ParamInit::normal);
    const int64_t qb = biases(c_.qkv_bias, {{a + "q_proj.bias", NH * HS, c_.n_head * HS, q_begin},
                                            {a + "k_proj.bias", KVH * HS, c_.n_kv_head * HS, kv_begin},
                                            {a + "v_proj.bias", KVH * HS, c_.n_kv_head * HS, kv_begin}});
    b.qkv = linear(q, C, (NH + 2 * KVH) * HS, qb);
    if (c_.qk_norm) {
      b.q_norm = head_norm(a + "q_norm.weight", false);
      b.k_norm = head_norm(a + "k_norm.weight", true);
    }
    const int64_t o = t_.add_split(a + "o_proj.weight", {C, NH * HS}, {C, c_.n_head * HS}, Split::row, 1, q_begin,
                                   ParamInit::residual_normal);
    b.proj = linear(o, NH * HS, C, biases(c_.o_bias, {{a + "o_proj.bias", C, C, 0}}));
  }
  void mlp(const std::string& m, BlockOffsets& b) {
    const int64_t F = c_.ffn;
    const int64_t g = col(m + "gate_proj.weight", Fl, F, C, ffn_begin, ParamInit::normal);
    col(m + "up_proj.weight", Fl, F, C, ffn_begin, ParamInit::normal);
    b.fc_in =
        linear(g, C, 2 * Fl,
               biases(c_.mlp_bias, {{m + "gate_proj.bias", Fl, F, ffn_begin}, {m + "up_proj.bias", Fl, F, ffn_begin}}));
    const int64_t d =
        t_.add_split(m + "down_proj.weight", {C, Fl}, {C, F}, Split::row, 1, ffn_begin, ParamInit::residual_normal);
    b.fc_out = linear(d, Fl, C, biases(c_.mlp_bias, {{m + "down_proj.bias", C, C, 0}}));
  }

  // Mixtral: block_sparse_moe.{gate, experts.e.{w1, w3, w2}}; Qwen-MoE: mlp.{gate, experts.e.{gate_proj,
  // up_proj, down_proj}} (+ Qwen2-MoE's shared_expert.* and shared_expert_gate). Each expert's gate
  // and up weights are added back to back (one (2F, C) matrix), then its down weight.
  void moe_mlp(const std::string& p, BlockOffsets& b) {
    const MoeConfig& m = c_.moe;
    const bool mixtral = c_.model_type == "mixtral";
    const std::string pre = p + (mixtral ? ".block_sparse_moe." : ".mlp.");
    const int64_t E = m.num_experts, F = m.expert_ffn;
    b.moe.router = linear(t_.add(pre + "gate.weight", {E, C}, ParamInit::normal), C, E);
    // Expert parallelism: the held experts [e0, e1) only, each under its global name; the others'
    // tensors are skipped so every tensor keeps the whole model's random stream.
    const int64_t e0 = cut_.experts_begin, e1 = e0 + cut_.experts;
    t_.skip(int(3 * e0));
    for (int64_t e = e0; e < e1; ++e) {
      const std::string x = pre + "experts." + std::to_string(e) + ".";
      const int64_t g = t_.add(x + (mixtral ? "w1.weight" : "gate_proj.weight"), {F, C}, ParamInit::normal);
      t_.add(x + (mixtral ? "w3.weight" : "up_proj.weight"), {F, C}, ParamInit::normal);
      t_.add(x + (mixtral ? "w2.weight" : "down_proj.weight"), {C, F}, ParamInit::residual_normal);
      for (int k = 1; k <= 3; ++k) t_.mutable_list().end()[-k].expert = true;
      if (e == e0) b.moe.experts = g;
    }
    t_.skip(int(3 * (E - e1)));
    if (m.shared_ffn > 0) {
      // Under tensor parallelism cut as a dense MLP: gate / up hold rows, down the matching columns.
      const int64_t Fs = m.shared_ffn, Fl = cut_.shared_ffn > 0 ? cut_.shared_ffn : Fs, f0 = cut_.shared_ffn_begin;
      const std::string x = pre + "shared_expert.";
      const int64_t g = col(x + "gate_proj.weight", Fl, Fs, C, f0, ParamInit::normal);
      col(x + "up_proj.weight", Fl, Fs, C, f0, ParamInit::normal);
      b.moe.shared_in = linear(g, C, 2 * Fl);
      b.moe.shared_out = linear(
          t_.add_split(x + "down_proj.weight", {C, Fl}, {C, Fs}, Split::row, 1, f0, ParamInit::residual_normal), Fl, C);
      if (m.shared_gate)
        b.moe.shared_gate = linear(t_.add(pre + "shared_expert_gate.weight", {1, C}, ParamInit::normal), C, 1);
    }
  }

  const ModelConfig& c_;
  ParamTable& t_;
  const LayerCut& cut_;
  // The model's width and head size; the heads, KV heads and hidden units held (all of them when
  // whole); R: parts holding the same KV heads; where the held q, k / v and hidden units begin.
  const int64_t C, HS, NH, KVH, Fl;
  const int R;
  const int64_t q_begin, kv_begin, ffn_begin;
  const ParamInit norm_init_;
};
}  // namespace

ModelOffsets llama_layout(const ModelConfig& c, ParamTable& t, const LayerCut& given) {
  const LayerCut cut = resolve_cut(c, given);
  return LlamaLayout(c, t, cut).build();
}

}  // namespace zt
