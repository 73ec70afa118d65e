// gpu_engine.cpp: the training engine of a model on one GPU (Transformer::set_device(cuda)):
// DataParallel's interface at world size 1, with the gradients, the parameters and AdamW's
// state in GPU memory and every step's arithmetic there (kernels/cuda/ops_cuda.h: the norm,
// clipping and the update in one launch each). Checkpoints keep their format: the optimizer's
// and the parameters' host buffers are mirrors, filled from the GPU when a checkpoint is saved
// and copied to it when one is loaded, so a run saved on a GPU resumes on the CPU and back.
// With offload_optimizer cpu (ZeRO-Offload) the masters and the state live in host memory
// instead and the CPU optimizer updates them, pipelined with the copies (OffloadEngine).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/memory.h"
#include "kernels/cuda/ops_cuda.h"
#include "parallel/gpu_engine.h"

namespace zt::parallel {

namespace {

// AdamW with the state on the GPU; the base class's host slots are the checkpoint mirror.
class GpuAdamW final : public optim::Optimizer {
 public:
  GpuAdamW(const std::string& name, const optim::OptimizerConfig& cfg, int64_t numel)
      : Optimizer(name, cfg, numel, {"exp_avg", "exp_avg_sq"}),
        m_(size_t(numel) * sizeof(float), MemCategory::optimizer_state, DeviceKind::cuda),
        v_(size_t(numel) * sizeof(float), MemCategory::optimizer_state, DeviceKind::cuda) {}

  void step(std::span<const optim::StepPiece> pieces, double lr) override {
    ++t_;
    std::vector<kernels::cuda::AdamWPiece> p;
    p.reserve(pieces.size());
    for (const optim::StepPiece& s : pieces) p.push_back({s.params, s.grads, s.state_offset, s.numel, s.decay});
    const optim::OptimizerConfig& c = config();
    kernels::cuda::adamw_step(p.data(), int(p.size()), m_.as<float>(), v_.as<float>(),
                              {lr, c.beta1, c.beta2, c.eps, c.weight_decay, t_});
  }
  void save_state(StateWriter& w) const override {
    copy_to_host(slot(0), m_.data(), m_.bytes());
    copy_to_host(slot(1), v_.data(), v_.bytes());
    Optimizer::save_state(w);
  }
  void load_state(StateReader& r) override {
    Optimizer::load_state(r);
    copy_to_device(m_.data(), slot(0), m_.bytes());
    copy_to_device(v_.data(), slot(1), v_.bytes());
  }

 private:
  Buffer m_, v_;
};

// The parameters as checkpoint pieces of a host mirror of the GPU's flat buffer.
class GpuParamState final : public Stateful {
 public:
  explicit GpuParamState(Transformer& model)
      : model_(model), host_(size_t(model.num_params()) * sizeof(float), MemCategory::temporary) {
    for (const ParamInfo& p : model.params().list())
      pieces_.pieces.push_back({p.name, p.shape, "params", {0, p.numel}, host_.as<float>() + p.offset});
  }
  void save_state(StateWriter& w) const override {
    copy_to_host(host_.data(), model_.flat_params().data, host_.bytes());
    pieces_.save_state(w);
  }
  void load_state(StateReader& r) override {
    pieces_.load_state(r);
    copy_to_device(model_.flat_params().data, host_.data(), host_.bytes());
  }

 private:
  Transformer& model_;
  Buffer host_;
  PieceState pieces_;
};

// What every one-GPU engine shares: the gradients on the GPU, their norm and clipping there, no
// communication.
class OneGpuEngine : public DataParallel {
 public:
  explicit OneGpuEngine(Transformer& model) : model_(model) { model.runtime().ensure_grads(); }

  void begin_step() override { model_.zero_grad(); }
  void set_last_micro(bool) override {}
  void end_backward() override {}
  double grad_norm() override {
    return std::sqrt(kernels::cuda::sum_squares(model_.flat_grads().as<const float>(), model_.num_params()));
  }
  double grad_sq(const std::vector<double>&) override {
    throw Error("tensor parallelism does not run on the GPU yet (docs/gpu.md)");
  }
  void for_each_grad_piece(const std::function<void(int, float*, int64_t)>&) override {
    throw Error("tensor parallelism does not run on the GPU yet (docs/gpu.md)");
  }
  // optim::clip_grads's arithmetic: the same coefficient, the same roundings.
  void clip(double norm, double max_norm, double unscale) override {
    const double coef = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
    if (coef >= 1.0 && unscale == 1.0) return;
    float* g = model_.flat_grads().as<float>();
    const int64_t n = model_.num_params();
    if (unscale != 1.0 && coef < 1.0)
      kernels::cuda::scale(g, n, float(unscale), float(coef));
    else
      kernels::cuda::scale(g, n, unscale != 1.0 ? float(unscale) : float(coef));
  }
  void export_params() override {}
  StateShard checkpoint_shard() const override { return {0, 1}; }
  std::vector<const dist::Communicator*> comms() const override { return {}; }
  double planned_bus_bytes(int) const override { return 0; }
  double paper_bus_bytes(int) const override { return 0; }
  int64_t held_params() const override { return model_.num_params(); }

 protected:
  // Decay runs of the flat buffer, neighbours merged (as DDP cuts them), over params / grads.
  std::vector<optim::StepPiece> decay_runs(float* params, const float* grads) const {
    std::vector<optim::StepPiece> runs;
    for (const ParamInfo& q : model_.params().list()) {
      if (!runs.empty() && runs.back().decay == q.decay() && runs.back().state_offset + runs.back().numel == q.offset)
        runs.back().numel += q.numel;
      else
        runs.push_back({params + q.offset, grads + q.offset, q.offset, q.numel, q.decay()});
    }
    return runs;
  }
  std::vector<optim::StateSpan> state_spans() const {
    std::vector<optim::StateSpan> spans;
    for (const ParamInfo& q : model_.params().list()) spans.push_back({q.name, q.shape, 0, q.numel, q.offset});
    return spans;
  }

  Transformer& model_;
};

class GpuEngine final : public OneGpuEngine {
 public:
  GpuEngine(Transformer& model, const DataParallelOptions& o) : OneGpuEngine(model), params_state_(model) {
    pieces_ = decay_runs(model.flat_params().as<float>(), model.flat_grads().as<const float>());
    opt_ = std::make_unique<GpuAdamW>(o.optim, o.optim_config, model.num_params());
    opt_->set_state_spans(state_spans());
  }
  void step(double lr) override { opt_->step(pieces_, lr); }
  optim::Optimizer& optimizer() override { return *opt_; }
  Stateful& param_state() override { return params_state_; }
  nlohmann::json describe() const override { return {{"stage", 0}, {"ranks", 1}, {"device", "cuda"}}; }

 private:
  GpuParamState params_state_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::vector<optim::StepPiece> pieces_;
};

// ZeRO-Offload (DeepSpeed's offload_optimizer device cpu, seed 002): the fp32 masters and the
// optimizer state live in host memory and the CPU optimizer (optim::make_optimizer, the CPU
// path's own) updates them; the GPU keeps the parameters it computes with and the gradients. A
// step cuts the flat buffer into chunks and pipelines them: every chunk's gradients are queued
// device->host at once, the CPU updates chunk c as soon as its copy lands (while later chunks
// are still in flight) and queues its parameters host->device at once (while it updates c + 1).
// The clipping coefficient needs every gradient, so the CPU starts after backward (docs/gpu.md).
class OffloadEngine final : public OneGpuEngine {
 public:
  OffloadEngine(Transformer& model, const DataParallelOptions& o)
      : OneGpuEngine(model),
        masters_(size_t(model.num_params()) * 4, "the offloaded fp32 masters"),
        grads_(size_t(model.num_params()) * 4, "the offloaded gradients"),
        opt_(optim::make_optimizer(o.optim, o.optim_config, model.num_params())) {
    const int64_t P = model.num_params();
    copy_to_host(masters_.data(), model.flat_params().data, size_t(P) * 4);
    opt_->set_state_spans(state_spans());
    for (const ParamInfo& p : model.params().list())
      params_state_.pieces.push_back({p.name, p.shape, "params", {0, p.numel}, masters_.as<float>() + p.offset});
    params_state_.after_load = [this] { copy_to_device(model_.flat_params().data, masters_.data(), masters_.bytes()); };
    const std::vector<optim::StepPiece> runs = decay_runs(masters_.as<float>(), grads_.as<const float>());
    for (int64_t c0 = 0; c0 < P; c0 += kChunk) {  // each chunk's pieces: the runs cut at its bounds
      const int64_t c1 = std::min(P, c0 + kChunk);
      Chunk& c = chunks_.emplace_back(Chunk{c0, c1 - c0, {}});
      for (const optim::StepPiece& r : runs) {
        const int64_t b = std::max(c0, r.state_offset), e = std::min(c1, r.state_offset + r.numel);
        if (b < e) c.pieces.push_back({masters_.as<float>() + b, grads_.as<const float>() + b, b, e - b, r.decay});
      }
    }
    measure_bandwidth();
  }

  void step(double lr) override {
    const auto t0 = Clock::now();
    const float* g = model_.flat_grads().as<const float>();
    float* p = model_.flat_params().as<float>();
    for (size_t i = 0; i < chunks_.size(); ++i) {
      down_.to_host(grads_.as<float>() + chunks_[i].begin, g + chunks_[i].begin, size_t(chunks_[i].numel) * 4);
      down_.mark(i);
    }
    for (size_t i = 0; i < chunks_.size(); ++i) {
      const auto w = Clock::now();
      down_.wait(i);
      const auto u = Clock::now();
      wait_s_ += seconds(w, u);
      if (i == 0)
        opt_->step(chunks_[i].pieces, lr);
      else
        opt_->step_continued(chunks_[i].pieces, lr);
      optimizer_s_ += seconds(u, Clock::now());
      up_.to_device(p + chunks_[i].begin, masters_.as<float>() + chunks_[i].begin, size_t(chunks_[i].numel) * 4);
    }
    const auto w = Clock::now();
    up_.synchronize();  // the next step's forward reads them; the masters change only after this
    wait_s_ += seconds(w, Clock::now());
    step_s_ += seconds(t0, Clock::now());
    ++steps_;
  }
  optim::Optimizer& optimizer() override { return *opt_; }
  Stateful& param_state() override { return params_state_; }
  // The trainer's report: per-step means of the offloaded step and its parts, and the copies'
  // bytes over the bandwidth measured at start (the bound the step is held to, docs/gpu.md).
  nlohmann::json describe() const override {
    const double n = std::max<int64_t>(steps_, 1), bytes = double(masters_.bytes());
    return {{"stage", 0},
            {"ranks", 1},
            {"device", "cuda"},
            {"offload_optimizer", "cpu"},
            {"offload",
             {{"steps", steps_},
              {"step_s", step_s_ / n},
              {"cpu_optimizer_s", optimizer_s_ / n},
              {"copy_wait_s", wait_s_ / n},
              {"bytes_per_step", 2 * bytes},
              {"d2h_GBps", d2h_gbps_},
              {"h2d_GBps", h2d_gbps_},
              {"copy_s", bytes / (d2h_gbps_ * 1e9) + bytes / (h2d_gbps_ * 1e9)},
              {"chunks", chunks_.size()}}}};
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  static constexpr int64_t kChunk = int64_t(16) << 20;  // elements (64 MiB): enough chunks to overlap
  struct Chunk {
    int64_t begin, numel;
    std::vector<optim::StepPiece> pieces;
  };

  // The pinned host <-> device bandwidth, once, on up to one chunk of the gradient buffer (its
  // values are zeroed at the first step's begin_step), so the estimate needs no GPU scratch.
  void measure_bandwidth() {
    const size_t bytes = size_t(std::min<int64_t>(model_.num_params(), kChunk)) * 4;
    void* dev = model_.flat_grads().data;
    double best_d2h = 1e30, best_h2d = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto t = Clock::now();
      down_.to_host(grads_.data(), dev, bytes);
      down_.synchronize();
      best_d2h = std::min(best_d2h, seconds(t, Clock::now()));
      t = Clock::now();
      up_.to_device(dev, masters_.data(), bytes);
      up_.synchronize();
      best_h2d = std::min(best_h2d, seconds(t, Clock::now()));
    }
    d2h_gbps_ = double(bytes) / std::max(best_d2h, 1e-9) / 1e9;
    h2d_gbps_ = double(bytes) / std::max(best_h2d, 1e-9) / 1e9;
    fill_device_zero(dev, bytes);
  }

  PinnedBuffer masters_, grads_;
  std::unique_ptr<optim::Optimizer> opt_;
  PieceState params_state_;
  std::vector<Chunk> chunks_;
  CopyStream down_, up_;
  double d2h_gbps_ = 0, h2d_gbps_ = 0, step_s_ = 0, optimizer_s_ = 0, wait_s_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<DataParallel> make_gpu_engine(Transformer& model, const dist::ProcessGrid& grid,
                                              const DataParallelOptions& o) {
  ZT_CHECK(grid.world().size() == 1,
           "--device cuda trains on one GPU for now: launch one process (multi-GPU NCCL training is not "
           "implemented yet; docs/gpu.md)");
  ZT_CHECK(o.stage == 0, "ZeRO stage ", o.stage,
           " on the GPU is not implemented yet: on one GPU drop --zero_stage / the DeepSpeed zero_optimization "
           "section (nothing is sharded with one rank), or use --device cpu");
  {
    // The GPU updates with its own AdamW; ZeRO-Offload's CPU update takes the elementwise ones.
    const std::unique_ptr<optim::Optimizer> probe = optim::make_optimizer(o.optim, o.optim_config, 0);
    const bool offload = o.offload_optimizer == "cpu";
    ZT_CHECK(offload ? !probe->needs_layout() && probe->curvature_interval() == 0
                     : probe->name() == "adamw_torch" && o.optim_config.state_dtype == DType::f32,
             "--optim ", o.optim, o.optim_config.state_dtype == DType::bf16 ? " with bf16 state" : "",
             " does not run on the GPU yet; use adamw_torch there (with offload_optimizer cpu also lion_32bit, sgd "
             "and bf16 state), or --device cpu");
  }
  if (o.offload_optimizer == "cpu") return std::make_unique<OffloadEngine>(model, o);
  ZT_CHECK(!o.pipeline.active(), "pipeline parallelism does not run on the GPU yet (docs/gpu.md)");
  optim::optimizer_state_bytes_per_param(o.optim);  // an unknown --optim fails as on the CPU
  return std::make_unique<GpuEngine>(model, o);
}

}  // namespace zt::parallel
