// model_runtime.cpp: binding the layers to each unit's views, the compute copies, and
// planning the activation arena (the pass itself is in model_runtime_pass.cpp). See
// model_runtime.h.
#include "models/model_runtime.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/dispatch.h"
#include "models/transformer.h"

namespace zt {

namespace {
int64_t lm_chunk_rows(int V, int64_t N, nn::Precision p) {
  // About 16M logits (64 MiB) per chunk: big enough for efficient GEMMs, far below N*V. bf16
  // GEMMs need more rows to reach their speed (the head's weight gradient sums over the chunk's
  // rows), so bf16 allows 64M logits. The rows are then split evenly over the chunks: GPT-2 at
  // N = 2048 runs two chunks of 1024 rows, and its head (three GEMMs + softmax, bf16, 2 threads)
  // took 0.74 s against 0.80 s for three chunks of 683 (a ragged last chunk costs the same).
  const int64_t logits = p == nn::Precision::bf16 ? int64_t(1) << 26 : int64_t(1) << 24;
  const int64_t rows = std::max<int64_t>(N, 1), most = std::max<int64_t>(logits / V, 32);
  const int64_t chunks = (rows + most - 1) / most;
  return (rows + chunks - 1) / chunks;
}

// Layers bound to one unit's views: P / G are 1-D views of the unit, which starts at flat
// offset `base`; a slot's offset and shape become a typed sub-view.
struct UnitBinder {
  TensorView P, G;
  int64_t base;
  const ModelConfig& cfg;
  nn::NormKind norm_kind;
  bool adds_row_biases = true;  // a cut's row layers' biases are whole: one part adds them (LayerCut)
  DeviceKind dev = DeviceKind::cpu;
  TensorView p(int64_t off, Shape s) const { return off < 0 || !P ? TensorView() : P.sub(off - base, s); }
  TensorView g(int64_t off, Shape s) const { return off < 0 || !G ? TensorView() : G.sub(off - base, s); }
  nn::Linear lin(const LinearOffsets& s) const {
    nn::Linear l;
    l.kind = s.kind;
    l.in = s.in;
    l.out = s.out;
    l.w_in_out = s.w_in_out;
    const Shape ws = s.w_in_out ? Shape{s.in, s.out} : Shape{s.out, s.in};
    l.w = p(s.w, ws);
    if (s.kind != nn::LinearKind::row || adds_row_biases) l.b = p(s.b, {s.out});
    l.dw = g(s.w, ws);
    l.db = g(s.b, {s.out});
    l.wc = l.w;
    l.dev = dev;
    return l;
  }
  // A mixture-of-experts MLP: the router, the held experts' weights as one view, the shared expert.
  nn::Moe moe(const MoeOffsets& o, const nn::MoeShape& sh) const {
    nn::Moe m;
    m.shape = sh;
    m.dev = dev;
    m.adds_loss_grads = adds_row_biases;  // one rank of a tensor-parallel group
    m.router = lin(o.router);
    const int64_t n = int64_t(sh.experts_held()) * 3 * sh.F * sh.C;
    m.experts = p(o.experts, {n});
    m.dexperts = g(o.experts, {n});
    if (sh.Fs > 0) {
      m.sh_in = lin(o.shared_in);
      m.sh_out = lin(o.shared_out);
      if (sh.shared_gate) m.sh_gate_lin = lin(o.shared_gate);
    }
    return m;
  }
  // A norm over the model width, or (C = head size) over each q / k head (Qwen3).
  nn::Norm norm(const NormOffsets& s, int C = 0) const {
    nn::Norm n;
    n.kind = norm_kind;
    n.C = C ? C : cfg.n_embd;
    n.eps = cfg.norm_eps;
    n.unit_offset = cfg.norm_unit_offset;
    n.w = p(s.w, {n.C});
    n.b = p(s.b, {n.C});
    n.dw = g(s.w, {n.C});
    n.db = g(s.b, {n.C});
    n.dev = dev;
    return n;
  }
};
}  // namespace

ModelRuntime::ModelRuntime(Transformer& model)
    : model_(model), cfg_(model.cfg_), layout_(model.layout_), blocks_(model.blocks_), lnf_(model.lnf_) {
  flat_.set_units(&layout_.units);
}

DeviceKind ModelRuntime::dev() const { return model_.dev_; }

const nn::Packing& ModelRuntime::pack_of(const SlotInput& in, int l) const {
  return model_.local_layer(l) ? in.pack_local : in.pack;
}

const nn::RopeTable& ModelRuntime::rope_of(const SlotInput& in, int l) const {
  return model_.local_rope(l) ? in.rope_local : in.rope;
}

void ModelRuntime::reset_for_device() {
  compute_params_.reset();
  acts_.reset();
  scratch_.reset();
  rope_ext_.reset();
  rope_local_ext_.reset();
  rope_ext_rows_ = 0;
  targets_.reset();
  inputs_.clear();
  B_ = T_ = 0;
  bind_layers();
}

void ModelRuntime::bind_block(int l, TensorView params, TensorView grads, TensorView compute) {
  if (layout_.frozen_base) {
    // LoRA: the base's layers read the frozen weights (no gradients); the unit holds the adapters.
    bind_base_block(l, model_.frozen_params(), {}, compute ? frozen_compute() : TensorView(), 0);
    nn::Block& b = blocks_[size_t(l)];
    if (model_.nf4_weight(l, 0)) {  // QLoRA: the weights are NF4; the GEMMs read x in the compute dtype
      int k = 0;
      for (nn::Linear* lin : {&b.qkv, &b.proj, &b.fc_in, &b.fc_out}) {
        lin->nf4 = model_.nf4_weight(l, k++);
        lin->w = lin->wc = TensorView(nullptr, nn::compute_dtype(b.precision), {0});
      }
    }
    if (const kernels::Nf4View* experts = model_.nf4_experts(l)) {  // QLoRA on a mixture of experts
      b.moe.experts_nf4 = experts;
      b.moe.nf4_scratch = moe_nf4_scratch(b.precision == nn::Precision::bf16 ? DType::bf16 : DType::f32);
    }
    bind_adapters(l, params, grads, compute);
    return;
  }
  bind_base_block(l, params, grads, compute, layout_.units[layout_.block_units[l]].begin);
}

void ModelRuntime::bind_base_block(int l, TensorView params, TensorView grads, TensorView compute, int64_t base) {
  const ModelOffsets& s = layout_.offsets;
  UnitBinder u{params, grads, base, cfg_, s.shape.norm, layout_.cut.adds_row_biases, dev()};
  const BlockOffsets& bs = s.blocks[l];
  nn::Block& b = blocks_[l];
  b.dev = dev();
  b.shape = s.shape;
  if (!cfg_.sliding_layers.empty()) b.shape.window = cfg_.layer_slides(l) ? cfg_.sliding_window : 0;  // Gemma 3
  b.precision = compute ? act_plan_.precision : nn::Precision::fp32;
  b.ln1 = u.norm(bs.ln1);
  b.ln2 = u.norm(bs.ln2);
  if (!s.shape.pre_norm) b.ln1.kind = b.ln2.kind = nn::NormKind::none;  // OLMo-2: no norm before the sub-layers
  if (s.shape.post_norm) {
    b.post1 = u.norm(bs.post1);
    b.post2 = u.norm(bs.post2);
    b.post1.kind = b.post2.kind = nn::NormKind::rmsnorm;
  }
  b.qkv = u.lin(bs.qkv);
  b.proj = u.lin(bs.proj);
  b.fc_in = u.lin(bs.fc_in);
  b.fc_out = u.lin(bs.fc_out);
  if (s.shape.moe.on()) b.moe = u.moe(bs.moe, s.shape.moe);
  if (s.shape.qk_norm) {
    const nn::BlockShape& sh = s.shape;  // per head, or this rank's whole q / k width (OLMo-2)
    b.q_norm = u.norm(bs.q_norm, sh.qk_norm_full ? sh.NH * sh.HS : sh.HS);
    b.k_norm = u.norm(bs.k_norm, sh.qk_norm_full ? sh.KVH * sh.HS : sh.HS);
  }
  if (compute && compute.data != params.data) {
    // The GEMMs read the compute copy; the same offsets in the compute dtype.
    for (auto [lin, slot] :
         {std::pair{&b.qkv, &bs.qkv}, {&b.proj, &bs.proj}, {&b.fc_in, &bs.fc_in}, {&b.fc_out, &bs.fc_out}})
      if (slot->w >= 0) lin->wc = compute.sub(slot->w - base, lin->w.shape);  // QLoRA's NF4 weights have none
    // bf16: the experts' GEMMs read their compute copy too (fp16's fp32 copy is not used by them).
    if (s.shape.moe.on() && compute.dtype == DType::bf16 && bs.moe.experts >= 0)  // (QLoRA's are NF4)
      b.moe.experts_c = compute.sub(bs.moe.experts - base, b.moe.experts.shape);
  }
}

void ModelRuntime::set_sequence_length(int tokens) {
  sequence_length_ = tokens;
  rope_ext_rows_ = 0;  // longrope's choice follows the whole sequence now (fill_rope)
}

bool ModelRuntime::layers_swapped() const {
  for (const nn::Block& b : blocks_)
    if (b.has_regions()) return true;
  return embedding_ || lm_head_ || sequence_length_ > 0;
}

void ModelRuntime::set_act_plan(const nn::ActPlan& p) {
  ZT_ASSERT(p.recompute_layers >= 0 && p.recompute_layers <= cfg_.n_layer);
  if (p.precision != act_plan_.precision) {
    compute_params_.reset();
    frozen_compute_.reset();
  }
  act_plan_ = p;
  B_ = T_ = 0;  // the arena's layout changes: plan() carves it again
  acts_.reset();
  scratch_.reset();
}

TensorView ModelRuntime::compute_view(int u, TensorView P) {
  if (act_plan_.precision == nn::Precision::fp32 || !P) return P;
  const Unit& k = layout_.units[u];
  const DType ct = nn::compute_dtype(act_plan_.precision);
  if (!compute_params_.data()) {
    compute_params_ = Buffer(size_t(model_.num_params()) * dtype_size(ct), MemCategory::parameters, dev());
    converted_in_pass_.assign(layout_.units.size(), 0);
  }
  const TensorView C = TensorView(compute_params_.data(), ct, {model_.num_params()}).sub(k.begin, {k.size()});
  // Once per unit and pass: parameters change only between passes (the optimizer step),
  // and a unit acquired again in the same pass (backward, the tied LM head) is unchanged.
  if (converted_in_pass_[u] != pass_) {
    ZT_PROFILE("convert");
    if (ct == DType::bf16)
      kernels::to_lowp(dev(), ct, C.as<uint16_t>(), P.as<const float>(), k.size());
    else
      kernels::round_to_f16(dev(), C.as<float>(), P.as<const float>(), k.size());
    converted_in_pass_[u] = pass_;
  }
  return C;
}

TensorView ModelRuntime::moe_nf4_scratch(DType t) {
  const int64_t n = 3 * int64_t(cfg_.moe.expert_ffn) * cfg_.n_embd;
  if (moe_nf4_scratch_.bytes() != size_t(n) * dtype_size(t))
    moe_nf4_scratch_ = Buffer(size_t(n) * dtype_size(t), MemCategory::temporary, dev());
  return TensorView(moe_nf4_scratch_.data(), t, {n});
}

TensorView ModelRuntime::frozen_compute() {
  const TensorView F = model_.frozen_params();
  if (act_plan_.precision == nn::Precision::fp32 || !F) return F;  // (QLoRA before its base is streamed in: none)
  const DType ct = nn::compute_dtype(act_plan_.precision);
  const size_t bytes = size_t(F.numel()) * dtype_size(ct);
  const TensorView C(frozen_compute_.data(), ct, {F.numel()});
  // Once per change of the base (a load): it never changes while it trains.
  if (frozen_compute_.data() && frozen_compute_.bytes() == bytes && frozen_converted_ == model_.frozen_version_)
    return C;
  if (frozen_compute_.bytes() != bytes)  // QLoRA's compacted base is smaller than the loaded one
    frozen_compute_ = Buffer(bytes, MemCategory::parameters, dev());
  const TensorView D(frozen_compute_.data(), ct, {F.numel()});
  ZT_PROFILE("convert");
  if (ct == DType::bf16)
    kernels::to_lowp(dev(), ct, D.as<uint16_t>(), F.as<const float>(), F.numel());
  else
    kernels::round_to_f16(dev(), D.as<float>(), F.as<const float>(), F.numel());
  frozen_converted_ = model_.frozen_version_;
  return D;
}

void ModelRuntime::bind_adapters(int l, TensorView P, TensorView G, TensorView C) {
  const int64_t base = layout_.units[layout_.block_units[l]].begin;
  auto view = [&](TensorView v, int64_t off, Shape shape) { return v ? v.sub(off - base, shape) : TensorView(); };
  const BlockAdapters& ba = layout_.adapters[size_t(l)];
  nn::Block& b = blocks_[size_t(l)];
  const LoraSpec& spec = cfg_.lora;
  const std::array<nn::Linear*, kLinears> lins{&b.qkv,        &b.proj,      &b.fc_in,      &b.fc_out,
                                               &b.moe.router, &b.moe.sh_in, &b.moe.sh_out, &b.moe.sh_gate_lin};
  const auto lists = ba.linears();
  // Dropout in training passes only; its mask is fixed for a pass, a layer and a Linear (so a
  // recomputed forward and the backward see the forward's).
  const float dropout = backward_ ? float(spec.dropout) : 0.f;
  auto seed = [&](int which) {
    return dropout_seed_ ^ (dropout_passes_ * 0x9E3779B97F4A7C15ull) ^ (uint64_t(l) << 40) ^ (uint64_t(which) << 56);
  };
  for (int k = 0; k < kLinears; ++k) {
    nn::Linear* lin = lins[size_t(k)];
    const std::vector<AdapterPart>* parts = lists[size_t(k)];
    nn::LinearLora& a = lin->lora;
    a = {};
    if (lin->kind == nn::LinearKind::row) a.row_group = b.row_slices();  // DoRA sums its rows' norms over it
    if (parts->empty()) continue;
    // The mixture of experts' Linears compute in fp32 (nn/moe.h), their adapters too.
    const bool moe = k >= kLinRouter;
    a.precision = moe ? nn::Precision::fp32 : b.precision;
    a.scratch = &scratch_views_.lora;
    if (spec.ia3()) {  // fp32 vectors, used as they are (no compute copy)
      for (const AdapterPart& p : *parts) {
        if (p.feedforward) {
          a.ia3_in = view(P, p.a, {lin->in});
          a.ia3_din = view(G, p.a, {lin->in});
        } else {
          a.ia3_out.push_back({p.out_begin, p.out_size, view(P, p.a, {p.out_size}), view(G, p.a, {p.out_size})});
        }
      }
      continue;
    }
    a.r = spec.r;
    a.scale = spec.scale();
    a.dora = spec.dora;
    a.in_whole = parts->front().in_whole;
    a.in_begin = parts->front().in_begin;
    a.dropout = dropout;
    a.seed = seed(k + 1);
    const int64_t R = int64_t(parts->size()) * spec.r;
    const bool copy = C && C.data != P.data && !moe;  // the GEMMs read the compute copy
    a.a = view(P, parts->front().a, {R, lin->in});
    a.da = view(G, parts->front().a, {R, lin->in});
    a.ac = copy ? view(C, parts->front().a, {R, lin->in}) : a.a;
    for (const AdapterPart& p : *parts) {
      nn::LoraPart q;
      q.out_begin = p.out_begin;
      q.out_size = p.out_size;
      q.b = view(P, p.b, {p.out_size, spec.r});
      q.db = view(G, p.b, {p.out_size, spec.r});
      q.bc = copy ? view(C, p.b, {p.out_size, spec.r}) : q.b;
      if (spec.dora) {
        q.m = view(P, p.m, {p.out_size});
        q.dm = view(G, p.m, {p.out_size});
      }
      a.parts.push_back(q);
    }
  }
  const int64_t held = ba.experts.on() ? int64_t(b.moe.shape.experts_held()) * ba.experts.stride : 0;
  bind_expert_adapters(b, ba.experts, held ? view(P, ba.experts.first, {held}) : TensorView(),
                       held ? view(G, ba.experts.first, {held}) : TensorView(), dropout, seed(kLinears + 1));
}

void ModelRuntime::bind_expert_adapters(nn::Block& b, const ExpertAdapters& ex, TensorView P, TensorView G,
                                        float dropout, uint64_t seed) {
  nn::MoeExpertLora& L = b.moe.lora;
  L = {};
  if (!ex.on()) return;
  L.r = cfg_.lora.r;
  L.scale = cfg_.lora.scale();
  L.gate = ex.gate, L.up = ex.up, L.down = ex.down;
  L.dropout = dropout;
  L.seed = seed;
  ZT_ASSERT(ex.stride == L.stride(b.moe.shape.C, b.moe.shape.F), "the experts' adapter layout and the layer disagree");
  L.p = P;
  L.g = G;
  L.scratch = &moe_lora_scratch_;
}

void ModelRuntime::bind_head(TensorView params, TensorView grads) {
  const bool frozen = layout_.frozen_base;
  UnitBinder u{frozen ? model_.frozen_params() : params,
               frozen ? TensorView() : grads,
               frozen ? 0 : layout_.units[layout_.head_unit].begin,
               cfg_,
               layout_.offsets.shape.norm,
               layout_.cut.adds_row_biases,
               dev()};
  lnf_ = u.norm(layout_.offsets.lnf);
}

void ModelRuntime::bind_layers() {
  flat_.set_buffers(model_.flat_params(), model_.flat_grads());
  blocks_.resize(layout_.offsets.blocks.size());
  for (size_t l = 0; l < blocks_.size(); ++l)
    bind_block(int(l), flat_.acquire(layout_.block_units[l], false), flat_.grads(layout_.block_units[l]));
  bind_head(flat_.acquire(layout_.head_unit, false), flat_.grads(layout_.head_unit));
}

void ModelRuntime::drop_flat_state() {
  model_.params_.reset();
  model_.grads_.reset();
  external_state_ = true;
  bind_layers();
}

void ModelRuntime::restore_flat_params() {
  if (!model_.params_.data())
    model_.params_ = Buffer(size_t(model_.num_params()) * sizeof(float), MemCategory::parameters, dev());
  bind_layers();
}

void ModelRuntime::drop_flat_grads() {
  model_.grads_.reset();
  external_grads_ = true;
  bind_layers();
}

void ModelRuntime::ensure_grads() {
  if (model_.grads_.data()) return;
  model_.grads_ = Buffer(size_t(model_.num_params()) * sizeof(float), MemCategory::gradients, dev());
  bind_layers();
}

// The LM-head weight (V, C) inside a view of the unit that holds it.
TensorView ModelRuntime::lm_head_slice(TensorView unit_view, int unit) const {
  if (!unit_view) return {};
  const ModelOffsets& s = layout_.offsets;
  const int64_t off = (s.lm_head >= 0 ? s.lm_head : s.wte) - (layout_.frozen_base ? 0 : layout_.units[unit].begin);
  return unit_view.sub(off, {layout_.vocab_rows, cfg_.n_embd});
}

void ModelRuntime::fill_rope(const RopeFreqs& f, float* cos, float* sin, int rows) {
  // longrope chooses its factors by the sequence's length: the whole row's under context
  // parallelism (a rank plans T / P of its rows: set_sequence_length).
  const int seq_len = sequence_length_ > 0 ? sequence_length_ : T_;
  if (dev() == DeviceKind::cpu) return rope_fill(f, cos, sin, rows, seq_len);
  const size_t half = size_t(cfg_.head_size / 2), n = size_t(rows) * half;
  std::vector<float> host(2 * n);
  rope_fill(f, host.data(), host.data() + n, rows, seq_len);
  kernels::copy_in(dev(), cos, host.data(), n * sizeof(float));
  kernels::copy_in(dev(), sin, host.data() + n, n * sizeof(float));
}

void ModelRuntime::carve(Carver& ac, Carver& sc, const ModelConfig& cfg, const nn::BlockShape& shape, int V, int B,
                         int T, int slots, const nn::ActPlan& plan, std::vector<SlotActs>* sa, Scratch* s,
                         const std::vector<char>* held) {
  // n: the residual stream's rows on this rank (N / sp under sequence parallelism).
  const int64_t N = int64_t(B) * T, C = cfg.n_embd, n = shape.rows_local(N);
  const nn::Precision p = plan.precision;
  const DType ct = nn::compute_dtype(p);
  const bool recompute = plan.recompute != nn::Recompute::none && plan.recompute_layers > 0;
  s->block = nn::Block::carve_scratch(sc, shape, B, T, p, recompute && plan.recompute == nn::Recompute::full);
  s->shared = {};
  if (recompute) {
    // One set for all recomputed blocks (backward refills it block by block). In fp32 the
    // activation's landing buffer is the activation itself, so it needs no second copy.
    s->shared = nn::Block::carve_shared(sc, shape, B, T, p, plan.recompute);
    if (ct == DType::f32) s->shared.act = s->block.act;
  }
  sa->assign(size_t(slots), {});
  // A pipeline stage (held): only its blocks' activations and the residual streams around them.
  auto has = [&](int l) { return !held || (l >= 0 && l < cfg.n_layer && (*held)[l]); };
  for (SlotActs& a : *sa) {
    for (int l = 0; l <= cfg.n_layer; ++l)
      a.res.push_back(has(l) || has(l - 1) ? ac.take(DType::f32, {n, C}) : TensorView());
    for (int l = 0; l < cfg.n_layer; ++l)
      a.blocks.push_back(has(l) ? nn::Block::carve_acts(ac, shape, B, T, p, plan.of(l), &s->shared) : nn::BlockActs{});
    a.lnf_out = ac.take(ct, {N, C});
    a.lnf_mean = ac.take(DType::f32, {n});
    a.lnf_rstd = ac.take(DType::f32, {n});
  }
  s->dres = sc.take(DType::f32, {n, C});
  s->dlnf = sc.take(DType::f32, {N, C});
  s->lm_chunk = lm_chunk_rows(V, N, plan.precision);
  s->logits = sc.take(DType::f32, {s->lm_chunk, V});
  s->dlogits_c = sc.take(ct, {ct == DType::f32 ? 0 : s->lm_chunk, V});
  const int64_t rope = shape.rope ? int64_t(T) * cfg.head_size / 2 : 0;
  s->rope_cos = sc.take(DType::f32, {rope});
  s->rope_sin = sc.take(DType::f32, {rope});
  const int64_t local = cfg.rope_local_theta > 0.f ? rope : 0;
  s->rope_local_cos = sc.take(DType::f32, {local});
  s->rope_local_sin = sc.take(DType::f32, {local});
  s->lora = {};
  // The widest Linear's input and output (Llama's fused gate/up: 2 F outputs).
  const int64_t lin_in = std::max<int64_t>({C, cfg.ffn, int64_t(cfg.n_head) * cfg.head_size}),
                lin_out = std::max<int64_t>(
                    {2 * int64_t(cfg.ffn), int64_t(cfg.n_head + 2 * cfg.n_kv_head) * cfg.head_size, 3 * int64_t(C)});
  if (cfg.lora.ia3() || cfg.lora.dora) {
    s->lora.ia3_x = sc.take(ct, {cfg.lora.ia3() ? N * lin_in : 0});
    s->lora.ia3_dy = sc.take(ct, {N * lin_out});
    s->lora.ia3_f32 = sc.take(DType::f32, {N * std::max(lin_in, lin_out)});
  }
  if (cfg.lora.dora) {
    s->lora.dora_w = sc.take(DType::f32, {nn::kDoraRows * lin_in});
    for (TensorView* v : {&s->lora.dora_n, &s->lora.dora_c, &s->lora.dora_shift}) *v = sc.take(DType::f32, {lin_out});
  }
  if (cfg.lora.enabled() && !cfg.lora.ia3()) {
    // The widest adapter: Llama's q, k and v parts (3 r) on a Linear as wide as the MLP's input.
    // A mixture of experts' shared expert down_proj reads Fs inputs.
    const int64_t R = 3 * int64_t(cfg.lora.r),
                  in = std::max<int64_t>({C, cfg.ffn, int64_t(cfg.n_head) * cfg.head_size, cfg.moe.shared_ffn});
    const int64_t dropped = cfg.lora.dropout > 0.f ? N * in : 0;
    s->lora.h = sc.take(DType::f32, {N * R});
    s->lora.g = sc.take(DType::f32, {N * R});
    s->lora.h_c = sc.take(ct, {ct == DType::f32 ? 0 : N * R});
    s->lora.g_c = sc.take(ct, {ct == DType::f32 ? 0 : N * R});
    // The dropped input in the GEMMs' dtype, or fp32 for a mixture of experts' Linears (fp32 layers).
    s->lora.xd = sc.take(cfg.moe.on() ? DType::f32 : ct, {dropped});
    s->lora.dxd = sc.take(DType::f32, {dropped});
  }
}

namespace {
// The routed experts' adapters' temporaries (nn::MoeLoraScratch, outside the arena), for a call over
// the N K grouped rows of N tokens (under expert parallelism the rows that arrive vary about that).
size_t expert_adapter_scratch_bytes(const ModelConfig& cfg, const ModelLayout& layout, int64_t N) {
  if (layout.adapters.empty() || !layout.adapters[0].experts.on()) return 0;
  const ExpertAdapters& ex = layout.adapters[0].experts;
  const int64_t rows = N * cfg.moe.top_k, R = std::max(int(ex.gate) + int(ex.up), 1) * int64_t(cfg.lora.r);
  const int64_t dropped = cfg.lora.dropout > 0 ? 2 * std::max<int64_t>(cfg.n_embd, cfg.moe.expert_ffn) : 0;
  return size_t(rows * (2 * R + dropped)) * sizeof(float);
}
}  // namespace

void ModelRuntime::planned_bytes(const ModelConfig& cfg, int B, int T, size_t* activations, size_t* temporary,
                                 int slots, const nn::ActPlan& plan, size_t* compute_copy, const LayerCut& cut,
                                 const std::vector<char>* held) {
  const ModelLayout layout = model_layout(cfg, cut);
  Carver a, sc;
  std::vector<SlotActs> sa;
  Scratch scratch;
  carve(a, sc, cfg, layout.offsets.shape, layout.vocab_rows, B, T, slots, plan, &sa, &scratch, held);
  *activations = a.used();
  *temporary = sc.used() + expert_adapter_scratch_bytes(cfg, layout, int64_t(B) * T);
  if (compute_copy)
    *compute_copy = plan.precision == nn::Precision::fp32
                        ? 0
                        : size_t(layout.table.total()) * dtype_size(nn::compute_dtype(plan.precision));
}

void ModelRuntime::plan(int B, int T, bool training, int slots) {
  ZT_CHECK(T <= cfg_.max_position, "sequence length ", T, " exceeds the model's context of ", cfg_.max_position,
           " positions; lower --model_max_length");
  ZT_ASSERT(slots >= 1);
  if (training && !external_state_ && !external_grads_) ensure_grads();
  training_ = training;
  if (B == B_ && T == T_ && acts_.data() && int(slots_.size()) == slots) return;
  B_ = B;
  T_ = T;
  acts_.reset();
  scratch_.reset();
  rope_ext_.reset();  // longrope's factors follow T
  rope_local_ext_.reset();
  rope_ext_rows_ = 0;
  Carver a, s;
  const int rows_split = layout_.cut.rows_split;
  if (rows_split > 1)
    ZT_CHECK(int64_t(B) * T % rows_split == 0, "--sequence-parallel splits the ", int64_t(B) * T,
             " tokens of a micro-batch (B ", B, " x T ", T, ") across ", rows_split, " ranks; they must divide evenly");
  const std::vector<char>* held = held_layers_.empty() ? nullptr : &held_layers_;
  carve(a, s, cfg_, layout_.offsets.shape, layout_.vocab_rows, B, T, slots, act_plan_, &slots_, &scratch_views_, held);
  acts_ = Buffer(a.used(), MemCategory::activations, dev());
  scratch_ = Buffer(s.used(), MemCategory::temporary, dev());
  Carver a2(acts_.data()), s2(scratch_.data());
  carve(a2, s2, cfg_, layout_.offsets.shape, layout_.vocab_rows, B, T, slots, act_plan_, &slots_, &scratch_views_,
        held);
  if (cfg_.moe.on() && slots > 1) {  // a pipeline's micro-batches in flight each keep their expert side
    ep_sides_.clear();
    for (SlotActs& sa : slots_)
      for (nn::BlockActs& ba : sa.blocks) {
        ep_sides_.push_back(std::make_unique<nn::MoeExpertSide>());
        ba.ep_side = ep_sides_.back().get();
      }
  }
  inputs_.clear();
  inputs_.resize(size_t(slots));
  if (dev() == DeviceKind::cuda) {
    // Tokens, positions, doc_start, and the sliding layers' doc_start with per-layer windows.
    const int rows = cfg_.sliding_layers.empty() ? 3 : 4;
    for (SlotInput& in : inputs_) in.ids = Buffer(size_t(rows * B * T) * sizeof(int32_t), MemCategory::data, dev());
    targets_ = Buffer(size_t(B * T) * sizeof(int32_t), MemCategory::data, dev());
  }
  if (layout_.offsets.shape.rope)
    fill_rope(model_.rope_, scratch_views_.rope_cos.as<float>(), scratch_views_.rope_sin.as<float>(), T);
  if (scratch_views_.rope_local_cos.numel() > 0)
    fill_rope(model_.rope_local_, scratch_views_.rope_local_cos.as<float>(), scratch_views_.rope_local_sin.as<float>(),
              T);
}

void ModelRuntime::set_held_layers(std::vector<char> held) {
  ZT_ASSERT(held.empty() || int(held.size()) == cfg_.n_layer);
  held_layers_ = std::move(held);
  B_ = T_ = 0;  // plan() carves the arena again
}

}  // namespace zt
