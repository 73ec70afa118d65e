// data_parallel.cpp: the factory, option checks and DDP (stage 0). ZeRO lives in zero.cpp.
#include "parallel/data_parallel.h"

#include "core/error.h"
#include "kernels/convert.h"
#include "optim/clip.h"
#include "parallel/buckets.h"
#include "parallel/zero_engine.h"

namespace zt::parallel {

void check_data_parallel_options(const DataParallelOptions& o, int n) {
  ZT_CHECK(o.stage >= 0 && o.stage <= 3, "--zero_stage ", o.stage, " is out of range; use 0 (DDP), 1, 2 or 3");
  ZT_CHECK(o.reduce_bucket_size >= 0, "--reduce_bucket_size must be positive (elements) or 0 (the default), got ",
           o.reduce_bucket_size);
  ZT_CHECK(o.hpz_partition_size >= 1 && n % o.hpz_partition_size == 0, "--zero_hpz_partition_size ",
           o.hpz_partition_size, " must divide the number of ranks (", n, ")");
  ZT_CHECK(!o.local_sgd || (o.stage == 0 && o.hpz_partition_size == 1),
           "--local_sgd_steps runs on DDP (each group all-reduces, groups meet every H steps); drop --zero_stage "
           "and --zero_hpz_partition_size");
  ZT_CHECK(o.hpz_partition_size == 1 || o.stage >= 1,
           "--zero_hpz_partition_size needs --zero_stage 1, 2 or 3 (DDP replicates everything)");
  ZT_CHECK(!o.quantized_weights || o.stage == 3,
           "--zero_quantized_weights (qwZ) quantizes ZeRO-3's parameter all-gather; it needs --zero_stage 3");
  ZT_CHECK(!o.quantized_gradients || o.stage >= 1,
           "--zero_quantized_gradients (qgZ) quantizes the gradient reduce-scatter; it needs --zero_stage 1, 2 or 3");
  ZT_CHECK(!o.quantized_gradients || o.comm_dtype == DType::f32,
           "--zero_quantized_gradients (qgZ) sends int8 "
           "gradients; it cannot also reduce them in ",
           dtype_name(o.comm_dtype),
           " (communication_data_type, which defaults to the training dtype): set communication_data_type to "
           "\"fp32\" or drop qgZ");
  ZT_CHECK(o.comm_dtype == DType::f32 || o.comm_dtype == DType::bf16 || o.comm_dtype == DType::f16,
           "gradients are reduced in fp32, bf16 or fp16, not ", dtype_name(o.comm_dtype));
  optim::optimizer_state_bytes_per_param(o.optim);  // an unknown --optim fails here, before any work
}

namespace {

constexpr size_t kF32 = dtype_size(DType::f32);  // fp32 gradients and masters

std::vector<optim::ParamRange> flat_ranges(const ParamTable& t) {
  std::vector<optim::ParamRange> r;
  for (auto& p : t.list()) {
    if (!r.empty() && r.back().decay == p.decay() && r.back().offset + r.back().numel == p.offset)
      r.back().numel += p.numel;  // merge neighbours: fewer, longer vector loops
    else
      r.push_back({p.offset, p.numel, p.decay()});
  }
  return r;
}

// DDP: every rank holds everything; gradients are all-reduced in buckets (plan_buckets,
// cut in backward order) on the last micro-batch only, each bucket started as soon as
// backward reports its last parameter's unit done. Without overlap_comm the buckets are
// all-reduced after backward, in the same order.
class DdpEngine final : public DataParallel, public FlatParamProvider {
 public:
  DdpEngine(Transformer& model, const dist::ProcessGrid& grid, const DataParallelOptions& o)
      : model_(model),
        overlap_(o.overlap_comm),
        comm_dtype_(o.comm_dtype),
        opt_(optim::make_optimizer(o.optim, o.optim_config, model.num_params())) {
    model.ensure_grads();
    set_units(&model.units());
    set_buffers(model.flat_params(), model.flat_grads());
    // DDP replicates everything: its reduction group is the grid's dp_shard, which holds every
    // data-parallel rank (hybrid groups need a ZeRO stage), and carries only this engine's
    // traffic (the trainer's scalar reductions run on grid.dp()).
    ZT_ASSERT(grid.dp_replicate().size() == 1 || o.local_sgd, "DDP takes no replicate groups (but local SGD's)");
    dp_ = &grid.dp_shard();
    if (comm_dtype_ != DType::f32 && dp_->size() > 1)
      comm16_ = Buffer(size_t(model.num_params()) * dtype_size(comm_dtype_), MemCategory::temporary);
    BucketOptions bo;
    bo.bucket_bytes = o.reduce_bucket_size * int64_t(kF32);
    cap_ = o.reduce_bucket_size;
    plan_ = plan_buckets(model.params(), bo);
    tracker_ = std::make_unique<BucketTracker>(plan_);
    // Parameters of each unit, last first (the order backward finishes them).
    for (const Unit& u : model.units()) unit_params_.emplace_back(u.params.rbegin(), u.params.rend());
    set_state_pieces();
    // The buffers never move: the update's pieces (decay runs of the flat buffers) are made once.
    pieces_ = optim::flat_pieces(P_.as<float>(), G_.as<const float>(), flat_ranges(model.params()));
    model.set_provider(this);
  }
  ~DdpEngine() override { model_.set_provider(nullptr); }

  void grads_done(int u) override {
    if (!last_ || dp_->size() == 1 || !overlap_) return;
    for (int p : unit_params_[u])
      if (int b = tracker_->mark(p); b >= 0) start(b);
  }
  void begin_step() override {
    model_.zero_grad();
    tracker_->reset();
  }
  void set_last_micro(bool last) override { last_ = last; }
  void end_backward() override {
    if (dp_->size() == 1) return;
    if (!overlap_)
      for (size_t b = 0; b < plan_.buckets.size(); ++b) start(int(b));
    for (auto& r : inflight_) r.wait();
    inflight_.clear();
    tracker_->reset();
    // 16-bit reductions land in comm16_ (every bucket was started): widen them back.
    if (comm16_.data())
      kernels::from_lowp(comm_dtype_, G_.as<float>(), comm16_.as<const uint16_t>(), model_.num_params());
  }
  // Every rank holds the same reduced gradient, so the norm needs no communication.
  double grad_norm() override { return optim::grad_norm(G_.as<const float>(), model_.num_params()); }
  double grad_sq_weighted(const std::vector<double>& w) override {
    double s = 0;
    for (const ParamInfo& p : model_.params().list()) {
      const double n = optim::grad_norm(G_.as<const float>() + p.offset, p.numel);
      s += w[size_t(&p - model_.params().list().data())] * n * n;
    }
    return s;  // every dp rank holds the same reduced gradient
  }
  void for_each_grad_piece(const std::function<void(int, float*, int64_t)>& f) override {
    const auto& list = model_.params().list();
    for (size_t i = 0; i < list.size(); ++i) f(int(i), G_.as<float>() + list[i].offset, list[i].numel);
  }
  void clip(double norm, double max_norm, double unscale) override {
    optim::clip_grads(G_.as<float>(), model_.num_params(), norm, max_norm, unscale);
  }
  void step(double lr) override { opt_->step(pieces_, lr); }
  void export_params() override {}
  optim::Optimizer& optimizer() override { return *opt_; }
  Stateful& param_state() override { return params_state_; }
  // Every rank holds the same state: rank 0 writes it.
  StateShard checkpoint_shard() const override { return {dp_->rank() == 0 ? 0 : -1, 1}; }
  std::vector<const dist::Communicator*> comms() const override { return {dp_}; }
  double planned_bus_bytes(int) const override {
    double s = 0;
    // b.bytes() is the bucket's fp32 size; 16-bit reductions move half of it.
    const double scale = double(dtype_size(comm_dtype_)) / double(kF32);
    for (auto& b : plan_.buckets)
      s += dist::bus_bytes(dist::Collective::all_reduce, double(b.bytes()) * scale, dp_->size());
    return s;
  }
  double paper_bus_bytes(int) const override {
    const int n = dp_->size();
    return 2.0 * (n - 1) / n * double(kF32) * double(model_.num_params());
  }
  nlohmann::json describe() const override {
    return {{"stage", 0}, {"ranks", dp_->size()}, {"buckets", plan_.buckets.size()}, {"overlap_comm", overlap_}};
  }

 private:
  // A bucket larger than the cap (one big tensor: GPT-2's 154 MiB embedding) goes out in
  // cap-sized all-reduces: OpenMPI's all-reduce slows sharply beyond about 28 MiB here
  // (bench-comm) and its scratch grows with the message.
  void start(int b) {
    const Range r = plan_.buckets[b].range;
    for (int64_t c = r.begin; c < r.end; c += cap_) {
      const int64_t n = std::min(cap_, r.end - c);
      if (comm16_.data()) {
        uint16_t* h = comm16_.as<uint16_t>() + c;
        kernels::to_lowp(comm_dtype_, h, G_.as<const float>() + c, n);
        inflight_.push_back(dp_->iall_reduce(h, size_t(n), comm_dtype_));
      } else {
        inflight_.push_back(dp_->iall_reduce(G_.as<float>() + c, size_t(n)));
      }
    }
  }

  // Checkpoints: every tensor whole, parameters and optimizer state at its flat offset.
  void set_state_pieces() {
    std::vector<optim::StateSpan> spans;
    for (const ParamInfo& p : model_.params().list()) {
      params_state_.pieces.push_back({p.name, p.shape, "params", {0, p.numel}, P_.as<float>() + p.offset});
      spans.push_back({p.name, p.shape, 0, p.numel, p.offset});
    }
    opt_->set_state_spans(std::move(spans));
  }

  Transformer& model_;
  bool overlap_;
  DType comm_dtype_;
  Buffer comm16_;  // 16-bit reductions: the gradients converted, bucket by bucket
  bool last_ = true;
  std::unique_ptr<optim::Optimizer> opt_;
  std::vector<optim::StepPiece> pieces_;  // decay runs of the flat buffers
  PieceState params_state_;
  dist::Communicator* dp_ = nullptr;  // the grid's dp_shard
  BucketPlan plan_;
  std::unique_ptr<BucketTracker> tracker_;
  std::vector<std::vector<int>> unit_params_;
  std::vector<dist::Request> inflight_;
  int64_t cap_ = 0;  // elements per all-reduce call
};

}  // namespace

std::unique_ptr<DataParallel> DataParallel::create(Transformer& model, const dist::ProcessGrid& grid,
                                                   const DataParallelOptions& opt) {
  check_data_parallel_options(opt, grid.dp().size());
  DataParallelOptions o = opt;
  o.reduce_bucket_size = reduce_bucket_elements(opt.reduce_bucket_size, opt.stage);  // 0: the stage's default
  if (o.stage == 0) return std::make_unique<DdpEngine>(model, grid, o);
  return make_zero_engine(model, grid, o);
}

}  // namespace zt::parallel
