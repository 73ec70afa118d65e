// gpu_engine.cpp: the training engine of a model on one GPU (Transformer::set_device(cuda)):
// DataParallel's interface at world size 1, with the gradients, the parameters and AdamW's
// state in GPU memory and every step's arithmetic there (kernels/cuda/ops_cuda.h: the norm,
// clipping and the update in one launch each). Checkpoints keep their format: the optimizer's
// and the parameters' host buffers are mirrors, filled from the GPU when a checkpoint is saved
// and copied to it when one is loaded, so a run saved on a GPU resumes on the CPU and back.
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

class GpuEngine final : public DataParallel {
 public:
  GpuEngine(Transformer& model, const DataParallelOptions& o) : model_(model), params_state_(model) {
    model.ensure_grads();
    const float* g = model.flat_grads().as<const float>();
    float* p = model.flat_params().as<float>();
    std::vector<optim::StateSpan> spans;
    const auto& list = model.params().list();
    for (const ParamInfo& q : list) spans.push_back({q.name, q.shape, 0, q.numel, q.offset});
    // Decay runs of the flat buffer, neighbours merged (as DDP cuts them).
    for (const ParamInfo& q : list) {
      if (!pieces_.empty() && pieces_.back().decay == q.decay() &&
          pieces_.back().state_offset + pieces_.back().numel == q.offset)
        pieces_.back().numel += q.numel;
      else
        pieces_.push_back({p + q.offset, g + q.offset, q.offset, q.numel, q.decay()});
    }
    opt_ = std::make_unique<GpuAdamW>(o.optim, o.optim_config, model.num_params());
    opt_->set_state_spans(std::move(spans));
  }

  void begin_step() override { model_.zero_grad(); }
  void set_last_micro(bool) override {}
  void end_backward() override {}
  double grad_norm() override {
    return std::sqrt(kernels::cuda::sum_squares(model_.flat_grads().as<const float>(), model_.num_params()));
  }
  double grad_sq_weighted(const std::vector<double>&) override {
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
  void step(double lr) override { opt_->step(pieces_, lr); }
  void export_params() override {}
  optim::Optimizer& optimizer() override { return *opt_; }
  Stateful& param_state() override { return params_state_; }
  StateShard checkpoint_shard() const override { return {0, 1}; }
  std::vector<const dist::Communicator*> comms() const override { return {}; }
  double planned_bus_bytes(int) const override { return 0; }
  double paper_bus_bytes(int) const override { return 0; }
  int64_t held_params() const override { return model_.num_params(); }
  nlohmann::json describe() const override { return {{"stage", 0}, {"ranks", 1}, {"device", "cuda"}}; }

 private:
  Transformer& model_;
  GpuParamState params_state_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::vector<optim::StepPiece> pieces_;
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
  ZT_CHECK(!o.pipeline.active(), "pipeline parallelism does not run on the GPU yet (docs/gpu.md)");
  optim::optimizer_state_bytes_per_param(o.optim);  // an unknown --optim fails as on the CPU
  return std::make_unique<GpuEngine>(model, o);
}

}  // namespace zt::parallel
