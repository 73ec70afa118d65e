// transformer.cpp: construction, initialisation, the device move and the FLOP count (the
// runtime binds the layers, plans the arena and runs the pass: model_runtime*.cpp). See
// transformer.h.
#include "models/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/rng.h"
#include "core/profile.h"
#include "kernels/dispatch.h"

namespace zt {

Transformer::Transformer(const ModelConfig& cfg, const LayerCut& cut, bool hold_params)
    : cfg_(cfg), layout_(model_layout(cfg, cut)), rope_(rope_freqs(cfg)) {
  if (cfg.rope_local_theta > 0.f) {  // Gemma 3's sliding layers: their own base, no scaling (as HF)
    ModelConfig local = cfg;
    local.rope = RopeScaling{};
    local.rope_theta = cfg.rope_local_theta;
    rope_local_ = rope_freqs(local);
  }
  runtime_ = std::make_unique<ModelRuntime>(*this);
  // Every rank holds the whole frozen base (it has no optimizer state to shard). A quantized one
  // (QLoRA) is streamed into its NF4 / int8 form by quantize_base_from and never held whole in fp32;
  // init_base allocates it for the fp32 path (quantize_base).
  if (layout_.frozen_base && !cfg_.lora.quantized())
    frozen_ = Buffer(size_t(layout_.base_table.total()) * sizeof(float), MemCategory::parameters);
  if (hold_params)
    params_ = Buffer(size_t(num_params()) * sizeof(float), MemCategory::parameters);
  else
    runtime_->external_state_ = true;  // a ZeRO engine will hold them (drop_flat_state's state from the start)
  runtime_->bind_layers();
}

Transformer::~Transformer() = default;

void Transformer::plan(int B, int T, bool training, int slots) { runtime_->plan(B, T, training, slots); }

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale, int64_t* count,
                                     const int32_t* positions) {
  return runtime_->forward_backward(inputs, targets, grad_scale, count, positions);
}

double Transformer::forward_loss(const int32_t* inputs, const int32_t* targets, int64_t* count,
                                 const int32_t* positions) {
  return runtime_->forward_loss(inputs, targets, count, positions);
}

float Transformer::embed_multiplier() const {
  // HF: hidden_size ** 0.5 (a Python float) as a float32 tensor.
  return cfg_.embed_scale ? float(std::sqrt(double(cfg_.n_embd))) : 1.0f;
}

TensorView Transformer::token_embedding() const {
  return base_flat().sub(layout_.offsets.wte, {layout_.vocab_rows, cfg_.n_embd});
}

TensorView Transformer::position_embedding() const {
  if (layout_.offsets.wpe < 0) return {};
  return base_flat().sub(layout_.offsets.wpe, {cfg_.max_position, cfg_.n_embd});
}

TensorView Transformer::lm_head() const {
  const ModelOffsets& s = layout_.offsets;
  return base_flat().sub(s.lm_head >= 0 ? s.lm_head : s.wte, {layout_.vocab_rows, cfg_.n_embd});
}

namespace {
constexpr int64_t kInitChunk = 65536;  // values per random stream of a tensor

// The initial values of elements [begin, end) of parameter `param` (global element numbering,
// within one chunk of kInitChunk) into dst: each chunk of each whole tensor has its own stream,
// so a value depends on neither the thread count nor which rank (or slice, or shard) asks.
void init_chunk(uint64_t seed, const ParamInfo& p, double std_normal, double std_resid, int64_t begin, int64_t end,
                float* dst) {
  if (p.init == ParamInit::zeros || p.init == ParamInit::ones || p.init == ParamInit::dora_magnitude) {
    std::fill(dst, dst + (end - begin), p.init == ParamInit::ones ? 1.f : 0.f);
    return;
  }
  const int64_t c0 = begin / kInitChunk * kInitChunk;  // the stream starts at its chunk's start
  Rng rng(seed, (uint64_t(p.stream) << 32) ^ uint64_t(begin / kInitChunk));
  if (p.init == ParamInit::lora_a) {  // U(-1/sqrt(in), 1/sqrt(in)): PEFT's kaiming_uniform_(a = sqrt(5))
    const double bound = 1.0 / std::sqrt(double(p.global_shape.back()));
    for (int64_t k = c0; k < end; ++k) {
      const double u = rng.uniform();
      if (k >= begin) dst[k - begin] = float((2.0 * u - 1.0) * bound);
    }
    return;
  }
  const double sd = p.init == ParamInit::residual_normal ? std_resid : std_normal;
  for (int64_t k = c0; k < end; k += 2) {
    double z[2];
    rng.normal_pair(z);
    if (k >= begin) dst[k - begin] = float(z[0] * sd);
    if (k + 1 < end && k + 1 >= begin) dst[k + 1 - begin] = float(z[1] * sd);
  }
}
}  // namespace

void Transformer::init_base(uint64_t seed) {
  if (!layout_.frozen_base) return;
  if (!frozen_.data()) frozen_ = Buffer(size_t(layout_.base_table.total()) * sizeof(float), MemCategory::parameters);
  // The base's values are those of the same model without adapters (the same table, seed, streams).
  init_table_values(layout_.base_table, seed, 0, layout_.base_table.total(), frozen_.as<float>());
  base_changed();
}

void Transformer::init_random(uint64_t seed) {
  ZT_ASSERT(params_.data(), "init_random on a model that does not hold its parameters");
  init_base(seed);
  if (dev_ == DeviceKind::cpu) return init_values(seed, 0, num_params(), params_.as<float>());
  std::vector<float> host(static_cast<size_t>(num_params()));
  init_values(seed, 0, num_params(), host.data());
  kernels::copy_in(dev_, params_.data(), host.data(), params_.bytes());
}

void Transformer::set_device(DeviceKind dev) {
  if (dev == dev_) return;
  const ModelRuntime& rt = *runtime_;
  ZT_CHECK(dev == DeviceKind::cpu || !layout_.frozen_base,
           "LoRA adapters (--use_peft) run on the CPU for now: the GPU backend has no adapter kernels yet");
  ZT_CHECK(
      dev == DeviceKind::cpu || (!rt.layers_swapped() && layout_.cut.whole && !rt.provider_ && !rt.external_state_),
      "the GPU runs one model on one device for now: no tensor or context parallelism, pipeline or ZeRO "
      "engine (docs/gpu.md)");
  Buffer moved;
  if (params_.data()) {
    moved = Buffer(params_.bytes(), MemCategory::parameters, dev);
    if (dev == DeviceKind::cuda)
      copy_to_device(moved.data(), params_.data(), params_.bytes());
    else
      copy_to_host(moved.data(), params_.data(), params_.bytes());
  }
  params_ = std::move(moved);
  grads_.reset();
  dev_ = dev;
  runtime_->reset_for_device();
}

void Transformer::init_values(uint64_t seed, int64_t begin, int64_t n, float* dst) const {
  init_table_values(params(), seed, begin, n, dst);
  if (cfg_.lora.dora)
    dora_magnitudes(layout_, frozen_params().as<const float>(), begin, n, dst,
                    row_slice_sum_ ? &row_slice_sum_ : nullptr, nf4_views_.empty() ? nullptr : &nf4_views_);
}

void Transformer::init_table_values(const ParamTable& table, uint64_t seed, int64_t begin, int64_t n,
                                    float* dst) const {
  const auto& list = table.list();
  const double std_normal = 0.02, std_resid = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
  const int64_t end = begin + n;
  // The pieces of global random-stream chunks this range needs: per tensor overlapping
  // [begin, end), its local elements [lo, hi) as runs of the global tensor (one run unless the
  // tensor is split: a tensor-parallel slice, whose vocabulary padding stays zero), cut at chunk
  // boundaries. A job is one chunk of one tensor and the pieces it feeds; jobs run in parallel.
  struct Piece {
    int64_t g, count;  // global elements [g, g + count), within one chunk
    float* out;
  };
  struct Job {
    size_t param;
    int64_t chunk;
    size_t first, last;  // its pieces
  };
  std::vector<Piece> pieces;
  std::vector<Job> jobs;
  for (size_t i = 0; i < list.size(); ++i) {
    const ParamInfo& p = list[i];
    const int64_t lo = std::max(begin, p.offset) - p.offset, hi = std::min(end, p.offset + p.numel) - p.offset;
    if (lo >= hi) continue;
    float* out = dst + (p.offset + lo - begin);  // local element lo
    if (p.split != Split::none) std::fill_n(out, hi - lo, 0.f);
    for_each_slice_run(p, p.split_offset, [&](int64_t g, int64_t l, int64_t cnt) {
      for (int64_t x = std::max(lo, l), e = std::min(hi, l + cnt); x < e;) {  // local x is global g + (x - l)
        const int64_t gx = g + (x - l), c = gx / kInitChunk, take = std::min(e - x, (c + 1) * kInitChunk - gx);
        if (jobs.empty() || jobs.back().param != i || jobs.back().chunk != c)
          jobs.push_back({i, c, pieces.size(), pieces.size()});
        pieces.push_back({gx, take, out + (x - lo)});
        ++jobs.back().last;
        x += take;
      }
    });
  }
#pragma omp parallel
  {
    std::vector<float> chunk;
#pragma omp for schedule(dynamic, 4)
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Job& job = jobs[j];
      const ParamInfo& p = list[job.param];
      if (job.last - job.first == 1) {  // one piece: drawn straight into place
        const Piece& q = pieces[job.first];
        init_chunk(seed, p, std_normal, std_resid, q.g, q.g + q.count, q.out);
        continue;
      }
      // Several runs of a slice in one chunk: the chunk drawn once, each run copied from it.
      const int64_t c0 = job.chunk * kInitChunk, c1 = pieces[job.last - 1].g + pieces[job.last - 1].count;
      chunk.resize(size_t(c1 - c0));
      init_chunk(seed, p, std_normal, std_resid, c0, c1, chunk.data());
      for (size_t k = job.first; k < job.last; ++k)
        std::copy_n(chunk.data() + (pieces[k].g - c0), pieces[k].count, pieces[k].out);
    }
  }
}

void Transformer::zero_grad() {
  if (grads_.data()) kernels::fill_zero(dev_, grads_.data(), grads_.bytes());
}

int64_t Transformer::matmul_params() const {
  // The whole model's (a cut's layout holds its slices): FLOPs per token and MFU count the
  // model, whatever the layout.
  const ModelOffsets whole = layout_.cut.whole ? ModelOffsets{} : model_layout(cfg_).offsets;
  int64_t n = 0;
  for (auto& b : (layout_.cut.whole ? layout_.offsets : whole).blocks)
    for (auto* l : {&b.qkv, &b.proj, &b.fc_in, &b.fc_out}) n += int64_t(l->in) * l->out;
  if (cfg_.moe.on()) {
    // A token meets the router, its top_k experts and the shared expert: the active parameters.
    const MoeConfig& m = cfg_.moe;
    const int64_t C = cfg_.n_embd;
    n += cfg_.n_layer * (int64_t(m.num_experts) * C + int64_t(m.top_k) * 3 * m.expert_ffn * C +
                         3 * int64_t(m.shared_ffn) * C + (m.shared_gate ? C : 0));
  }
  return n + int64_t(cfg_.vocab_size) * cfg_.n_embd;
}

double Transformer::flops_per_token(int T) const {
  const double attention = 12.0 * cfg_.n_layer * cfg_.n_head * cfg_.head_size * double(T);
  // LoRA: the frozen base's GEMMs run forward and input-gradient only (4 per weight), the
  // adapters all three (6 per parameter).
  if (layout_.frozen_base) return 4.0 * double(matmul_params()) + 6.0 * double(num_params()) + attention;
  return 6.0 * double(matmul_params()) + attention;
}

}  // namespace zt
