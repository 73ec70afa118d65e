// transformer.cpp: see transformer.h.
#include "models/transformer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/rng.h"
#include "kernels/cross_entropy.h"
#include "kernels/ops.h"

namespace zt {

struct Transformer::Views {
  std::vector<float*> res;
  std::vector<nn::BlockActs> acts;
  nn::BlockScratch scratch{};
  float *lnf_out, *lnf_mean, *lnf_rstd, *dres, *dlnf, *logits, *rope_cos, *rope_sin;
  int64_t lm_chunk;
};

namespace {
ModelSlots make_layout(const ModelConfig& c, ParamTable& t) {
  return c.arch == Arch::gpt2 ? gpt2_layout(c, t) : llama_layout(c, t);
}

int64_t lm_chunk_rows(const ModelConfig& c, int64_t N) {
  // About 16M logits (64 MiB) per chunk: big enough for efficient GEMMs, far below N*V.
  return std::clamp<int64_t>((int64_t(1) << 24) / c.vocab_size, 32, std::max<int64_t>(N, 1));
}
}  // namespace

Transformer::Transformer(const ModelConfig& cfg) : cfg_(cfg) {
  slots_ = make_layout(cfg_, table_);
  // Units are contiguous: both layouts add the embeddings, then block after block (each
  // starting with its first norm), then the final norm and an untied LM head.
  units_.push_back({0, slots_.blocks.empty() ? slots_.lnf.w : slots_.blocks[0].ln1.w});
  for (size_t l = 0; l < slots_.blocks.size(); ++l)
    units_.push_back(
        {slots_.blocks[l].ln1.w, l + 1 < slots_.blocks.size() ? slots_.blocks[l + 1].ln1.w : slots_.lnf.w});
  units_.push_back({slots_.lnf.w, table_.total()});
  flat_.set_units(units_);
  params_ = Buffer(size_t(table_.total()) * sizeof(float), MemCategory::parameters);
  bind_layers();
}

namespace {
// Layers bound to a unit's buffers: P / G hold the unit starting at flat offset `base`.
struct UnitBinder {
  float *P, *G;
  int64_t base;
  const ModelSlots& slots;
  const ModelConfig& cfg;
  float* p(int64_t off) const { return off < 0 ? nullptr : P + (off - base); }
  float* g(int64_t off) const { return off < 0 || !G ? nullptr : G + (off - base); }
  nn::Linear lin(const LinearSlot& s) const {
    nn::Linear l;
    l.in = s.in;
    l.out = s.out;
    l.w_in_out = s.w_in_out;
    l.w = p(s.w);
    l.b = p(s.b);
    l.dw = g(s.w);
    l.db = g(s.b);
    return l;
  }
  nn::Norm norm(const NormSlot& s) const {
    nn::Norm n;
    n.kind = slots.shape.norm;
    n.C = cfg.n_embd;
    n.eps = cfg.norm_eps;
    n.w = p(s.w);
    n.b = p(s.b);
    n.dw = g(s.w);
    n.db = g(s.b);
    return n;
  }
};
}  // namespace

void Transformer::bind_block(int l, float* params, float* grads) {
  UnitBinder u{params, grads, units_[l + 1].begin, slots_, cfg_};
  const BlockSlots& bs = slots_.blocks[l];
  nn::Block& b = blocks_[l];
  b.shape = slots_.shape;
  b.ln1 = u.norm(bs.ln1);
  b.ln2 = u.norm(bs.ln2);
  b.qkv = u.lin(bs.qkv);
  b.proj = u.lin(bs.proj);
  b.fc_in = u.lin(bs.fc_in);
  b.fc_out = u.lin(bs.fc_out);
}

void Transformer::bind_head(float* params, float* grads) {
  UnitBinder u{params, grads, units_.back().begin, slots_, cfg_};
  lnf_ = u.norm(slots_.lnf);
}

void Transformer::bind_layers() {
  float* P = params_.as<float>();
  float* G = grads_.as<float>();
  flat_.set_buffers(P, G);
  blocks_.resize(slots_.blocks.size());
  for (size_t l = 0; l < slots_.blocks.size(); ++l)
    bind_block(int(l), P ? P + units_[l + 1].begin : nullptr, G ? G + units_[l + 1].begin : nullptr);
  bind_head(P ? P + units_.back().begin : nullptr, G ? G + units_.back().begin : nullptr);
}

void Transformer::drop_flat_state() {
  params_.reset();
  grads_.reset();
  external_state_ = true;
  bind_layers();
}

void Transformer::restore_flat_params() {
  if (!params_.data()) params_ = Buffer(size_t(table_.total()) * sizeof(float), MemCategory::parameters);
  bind_layers();
}

void Transformer::ensure_grads() {
  if (grads_.data()) return;
  grads_ = Buffer(size_t(table_.total()) * sizeof(float), MemCategory::gradients);
  bind_layers();
}

void Transformer::init_random(uint64_t seed) {
  const auto& list = table_.list();
  float* P = params_.as<float>();
  const double std_normal = 0.02, std_resid = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
  // Chunks of 64K values, each with its own stream, so the result does not depend on
  // the thread count and large tensors fill in parallel.
  struct Job {
    size_t param;
    int64_t begin, end;
  };
  std::vector<Job> jobs;
  for (size_t i = 0; i < list.size(); ++i)
    for (int64_t b = 0; b < list[i].numel; b += 65536) jobs.push_back({i, b, std::min(b + 65536, list[i].numel)});
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t j = 0; j < jobs.size(); ++j) {
    const ParamInfo& p = list[jobs[j].param];
    float* dst = P + p.offset;
    Rng rng(seed, (uint64_t(jobs[j].param) << 32) ^ uint64_t(jobs[j].begin / 65536));
    double sd = p.init == ParamInit::residual_normal ? std_resid : std_normal;
    if (p.init == ParamInit::zeros || p.init == ParamInit::ones) {
      std::fill(dst + jobs[j].begin, dst + jobs[j].end, p.init == ParamInit::ones ? 1.f : 0.f);
      continue;
    }
    for (int64_t k = jobs[j].begin; k < jobs[j].end; k += 2) {
      double z[2];
      rng.normal_pair(z);
      dst[k] = float(z[0] * sd);
      if (k + 1 < jobs[j].end) dst[k + 1] = float(z[1] * sd);
    }
  }
}

void Transformer::load_safetensors(const std::string& path) {
  SafetensorsFile f(path);
  float* P = params_.as<float>();
  for (const ParamInfo& p : table_.list()) {
    const StEntry* e = f.find(p.name);
    // GPT2Model checkpoints (e.g. the original "gpt2" upload) omit the "transformer." prefix.
    if (!e && p.name.rfind("transformer.", 0) == 0) e = f.find(p.name.substr(12));
    ZT_CHECK(e, path, ": tensor \"", p.name, "\" is missing; the weights do not match config.json (", cfg_.arch_name(),
             ", ", cfg_.n_layer, " layers)");
    ZT_CHECK(e->shape == p.shape, path, ": tensor \"", p.name, "\" has shape ", nlohmann::json(e->shape).dump(),
             " but config.json implies ", nlohmann::json(p.shape).dump());
    f.read_f32(*e, P + p.offset);
  }
}

void Transformer::save_hf(const std::string& folder, const std::string& dtype) const {
  ::mkdir(folder.c_str(), 0755);
  std::vector<StTensorOut> out;
  for (const ParamInfo& p : table_.list()) out.push_back({p.name, p.shape, params_.as<float>() + p.offset});
  safetensors_write(folder + "/model.safetensors", out, dtype, {{"format", "pt"}});
  nlohmann::json cj = config_to_json(cfg_, dtype == "F32" ? "float32" : "bfloat16");
  write_file_atomic(folder + "/config.json", cj.dump(2) + "\n");
}

void Transformer::carve(Carver& ac, Carver& sc, const ModelConfig& cfg, const nn::BlockShape& shape, int B, int T,
                        Views* v) {
  const int64_t N = int64_t(B) * T, C = cfg.n_embd;
  v->res.clear();
  v->acts.clear();
  for (int l = 0; l <= cfg.n_layer; ++l) v->res.push_back(ac.take(N * C));
  for (int l = 0; l < cfg.n_layer; ++l) v->acts.push_back(nn::Block::carve_acts(ac, shape, B, T));
  v->lnf_out = ac.take(N * C);
  v->lnf_mean = ac.take(N);
  v->lnf_rstd = ac.take(N);
  v->scratch = nn::Block::carve_scratch(sc, shape, B, T);
  v->dres = sc.take(N * C);
  v->dlnf = sc.take(N * C);
  v->lm_chunk = lm_chunk_rows(cfg, N);
  v->logits = sc.take(v->lm_chunk * cfg.vocab_size);
  v->rope_cos = sc.take(shape.rope ? int64_t(T) * cfg.head_size / 2 : 0);
  v->rope_sin = sc.take(shape.rope ? int64_t(T) * cfg.head_size / 2 : 0);
}

void Transformer::planned_bytes(const ModelConfig& cfg, int B, int T, size_t* activations, size_t* temporary) {
  ParamTable t;
  ModelSlots s = make_layout(cfg, t);
  Carver a, sc;
  Views v;
  carve(a, sc, cfg, s.shape, B, T, &v);
  *activations = a.used();
  *temporary = sc.used();
}

void Transformer::plan(int B, int T, bool training) {
  ZT_CHECK(T <= cfg_.max_position, "sequence length ", T, " exceeds the model's context of ", cfg_.max_position,
           " positions; lower --model_max_length");
  if (training && !external_state_) ensure_grads();
  training_ = training;
  if (B == B_ && T == T_ && acts_.data()) return;
  B_ = B;
  T_ = T;
  acts_.reset();
  scratch_.reset();
  Carver a, s;
  Views v;
  carve(a, s, cfg_, slots_.shape, B, T, &v);
  acts_ = Buffer(a.used(), MemCategory::activations);
  scratch_ = Buffer(s.used(), MemCategory::temporary);
  Carver a2(acts_.data()), s2(scratch_.data());
  carve(a2, s2, cfg_, slots_.shape, B, T, &v);
  res_ = v.res;
  block_acts_ = v.acts;
  block_scratch_ = v.scratch;
  lnf_out_ = v.lnf_out;
  lnf_mean_ = v.lnf_mean;
  lnf_rstd_ = v.lnf_rstd;
  dres_ = v.dres;
  dlnf_ = v.dlnf;
  logits_ = v.logits;
  lm_chunk_ = v.lm_chunk;
  rope_cos_ = v.rope_cos;
  rope_sin_ = v.rope_sin;
  if (slots_.shape.rope) kernels::rope_table(rope_cos_, rope_sin_, T, cfg_.head_size, cfg_.rope_theta);
}

const float* Transformer::lm_head_weight() const {
  return params_.as<float>() + (slots_.lm_head >= 0 ? slots_.lm_head : slots_.wte);
}

float* Transformer::lm_head_grad() const {
  return grads_.as<float>() + (slots_.lm_head >= 0 ? slots_.lm_head : slots_.wte);
}

void Transformer::zero_grad() {
  if (grads_.data()) std::memset(grads_.data(), 0, grads_.bytes());
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale, int64_t* count,
                                     const int32_t* positions) {
  ZT_ASSERT(training_ && (grads_.data() || provider_), "plan(B, T, training=true) must come first");
  return run(inputs, targets, grad_scale, count, true, positions);
}

double Transformer::forward_loss(const int32_t* inputs, const int32_t* targets, int64_t* count,
                                 const int32_t* positions) {
  return run(inputs, targets, 0.f, count, false, positions);
}

// Checks position ids (O(B*T), next to nothing beside a step) and turns them into what
// the layers use. Ids equal to 0..T-1 in every row take the unpacked path, so they give
// results bit-identical to positions = null; a row without a restart needs no mask.
nn::Packing Transformer::prepare_packing(const int32_t* positions, nn::RopeTable* rope) {
  if (!positions) return {};
  const int B = B_, T = T_;
  bool identity = true, restarts = false;
  int32_t max_pos = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int32_t p = positions[int64_t(b) * T + t];
      ZT_CHECK(p >= 0 && p < cfg_.max_position, "position ids: row ", b, ", column ", t, " is ", p,
               "; ids must lie in [0, ", cfg_.max_position, "), the model's context");
      if (t > 0) {
        const int32_t prev = positions[int64_t(b) * T + t - 1];
        ZT_CHECK(p == prev + 1 || p == 0, "position ids: row ", b, ", column ", t, " is ", p, " after ", prev,
                 "; each id must be the previous one plus 1, or 0 where a new document starts");
        restarts |= p == 0;
      }
      identity &= p == t;
      max_pos = std::max(max_pos, p);
    }
  if (identity) return {};
  nn::Packing pack;
  pack.positions = positions;
  if (restarts) {
    doc_start_.resize(size_t(B) * T);
    kernels::attention_doc_start(doc_start_.data(), positions, B, T);
    pack.doc_start = doc_start_.data();
  }
  if (slots_.shape.rope && max_pos >= T) {
    const int64_t half = cfg_.head_size / 2;
    if (max_pos >= rope_ext_rows_) {
      // Row t of a table depends only on t, so the longer table agrees with the planned one.
      const int rows = std::min(cfg_.max_position, std::max({max_pos + 1, 2 * rope_ext_rows_, 2 * T}));
      rope_ext_ = Buffer(size_t(2 * rows * half) * sizeof(float), MemCategory::temporary);
      kernels::rope_table(rope_ext_.as<float>(), rope_ext_.as<float>() + rows * half, rows, cfg_.head_size,
                          cfg_.rope_theta);
      rope_ext_rows_ = rows;
    }
    rope->cos = rope_ext_.as<float>();
    rope->sin = rope_ext_.as<float>() + rope_ext_rows_ * half;
  }
  return pack;
}

double Transformer::run(const int32_t* inputs, const int32_t* targets, float grad_scale, int64_t* count, bool backward,
                        const int32_t* positions) {
  ZT_ASSERT(acts_.data(), "plan(B, T) must come first");
  const int B = B_, T = T_, C = cfg_.n_embd, L = cfg_.n_layer;
  const int64_t N = int64_t(B) * T;
  ParamProvider& pp = provider_ ? *provider_ : flat_;
  const int head = L + 1;
  const int64_t wte = slots_.wte - units_[0].begin, wpe = slots_.wpe - units_[0].begin;
  nn::RopeTable rope{rope_cos_, rope_sin_};
  const nn::Packing pack = prepare_packing(positions, &rope);
  // The call sequence below is part of the ParamProvider contract (providers prefetch
  // by it): forward units 0, 1..L, head (+ 0 again when the LM head is tied), then
  // backward blocks L..1.
  pp.begin_pass(backward);
  {
    const float* E = pp.acquire(0, false);
    kernels::embedding_forward(res_[0], inputs, E + wte, slots_.wpe >= 0 ? E + wpe : nullptr, N, T, C, pack.positions);
    pp.release(0);
  }
  for (int l = 0; l < L; ++l) {
    bind_block(l, pp.acquire(l + 1, false), nullptr);
    blocks_[l].forward(res_[l + 1], res_[l], block_acts_[l], block_scratch_, B, T, rope, pack);
    pp.release(l + 1);
  }
  float* H = pp.acquire(head, false);
  float* HG = backward ? pp.grads(head) : nullptr;
  bind_head(H, HG);
  const float* lm_w;
  float* lm_g = nullptr;
  const bool tied = slots_.lm_head < 0;
  if (!tied) {
    lm_w = H + (slots_.lm_head - units_[head].begin);
    if (backward) lm_g = HG + (slots_.lm_head - units_[head].begin);
  } else {
    lm_w = pp.acquire(0, false) + wte;
    if (backward) lm_g = pp.grads(0) + wte;
  }
  lnf_.forward(lnf_out_, lnf_mean_, lnf_rstd_, res_[L], N);
  kernels::LmHeadDims hd{N, C, cfg_.vocab_size, lm_chunk_};
  double loss;
  {
    ZT_PROFILE("lmhead_ce");
    loss =
        kernels::lmhead_ce(backward ? dlnf_ : nullptr, lm_g, lnf_out_, lm_w, targets, hd, grad_scale, logits_, count);
  }
  if (tied) pp.release(0);
  if (!backward) {
    pp.release(head);
    return loss;
  }
  std::memset(dres_, 0, sizeof(float) * N * C);  // the final norm's backward adds into it
  lnf_.backward(dres_, dlnf_, res_[L], lnf_mean_, lnf_rstd_, N);
  pp.release(head);
  pp.grads_done(head);
  for (int l = L - 1; l >= 0; --l) {
    bind_block(l, pp.acquire(l + 1, true), pp.grads(l + 1));
    blocks_[l].backward(dres_, res_[l], block_acts_[l], block_scratch_, B, T, rope, pack);
    pp.release(l + 1);
    pp.grads_done(l + 1);
  }
  float* G = pp.grads(0);
  {
    ZT_PROFILE("embedding_bwd");
    kernels::embedding_backward(G + wte, slots_.wpe >= 0 ? G + wpe : nullptr, dres_, inputs, N, T, C, pack.positions);
  }
  pp.grads_done(0);
  return loss;
}

int64_t Transformer::matmul_params() const {
  int64_t n = 0;
  for (auto& b : slots_.blocks)
    for (auto* l : {&b.qkv, &b.proj, &b.fc_in, &b.fc_out}) n += int64_t(l->in) * l->out;
  return n + int64_t(cfg_.vocab_size) * cfg_.n_embd;
}

double Transformer::flops_per_token(int T) const {
  return 6.0 * double(matmul_params()) + 12.0 * cfg_.n_layer * cfg_.n_head * cfg_.head_size * double(T);
}

}  // namespace zt
