// data_parallel.cpp: the factory, option checks and DDP (stage 0). ZeRO lives in zero.cpp.
#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/convert.h"
#include "optim/clip.h"
#include "parallel/buckets.h"
#include "parallel/offload_engine.h"
#include "parallel/optimizer_layout.h"
#include "parallel/zero_engine.h"
#ifdef ZT_HAVE_CUDA
#include "parallel/gpu_engine.h"
#endif

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
  const DiskOffload& d = o.disk_offload;
  if (!d.on()) return;
  ZT_CHECK(n == 1 && !o.pipeline.active(),
           "offload to disk (nvme) runs in one process for now: each rank would stream its own files, which is not "
           "implemented; run without mpirun (or offload_optimizer/offload_param device none)");
  ZT_CHECK(d.optimizer,
           "offload_param nvme needs offload_optimizer nvme too: a unit's parameters and its optimizer "
           "state share the offload file's records");
  ZT_CHECK(!d.params || o.stage == 3,
           "offload_param (parameters on disk) is ZeRO-3's: set zero_optimization.stage "
           "(--zero_stage) to 3, or offload only the optimizer");
  ZT_CHECK(!d.nvme_path.empty(),
           "offload to nvme needs a folder: --nvme_path DIR (DeepSpeed: offload_optimizer.nvme_path)");
  ZT_CHECK(d.buffer_count >= 2, "offload_optimizer.buffer_count ", d.buffer_count,
           " must be >= 2 (one window updated while the next is read; 3 or more also overlap the write-back)");
  ZT_CHECK(d.param_buffer_count >= 3, "offload_param.buffer_count ", d.param_buffer_count,
           " must be >= 3 (the unit computing, the next one read ahead, and the tied LM head's embedding)");
  ZT_CHECK(d.param_buffer_size > 0 && d.max_in_cpu > 0, "offload_param.buffer_size and max_in_cpu must be > 0");
  check_aio_options(d.aio);
  ZT_CHECK(!o.local_sgd && !o.quantized_weights && !o.quantized_gradients && o.hpz_partition_size == 1,
           "offload to disk does not combine with local SGD, qwZ, qgZ or hybrid sharding (they are multi-rank)");
}

namespace {

constexpr size_t kF32 = dtype_size(DType::f32);  // fp32 gradients and masters

// The decay runs of the parameters kept (all when keep is null), neighbours merged: fewer,
// longer vector loops.
std::vector<optim::ParamRange> flat_ranges(const ParamTable& t, const std::vector<char>* keep = nullptr) {
  std::vector<optim::ParamRange> r;
  const auto& list = t.list();
  for (size_t i = 0; i < list.size(); ++i) {
    const ParamInfo& p = list[i];
    if (keep && !(*keep)[i]) continue;
    if (!r.empty() && r.back().decay == p.decay() && r.back().offset + r.back().numel == p.offset)
      r.back().numel += p.numel;
    else
      r.push_back({p.offset, p.numel, p.decay()});
  }
  return r;
}

// Per parameter: whether its unit is held by this stage (and, for `without_copy`, not the
// tied copy). Empty when the pipeline is off.
std::vector<char> held_param_mask(const Transformer& model, const StageUnits& su, bool without_copy) {
  if (!su.active()) return {};
  std::vector<char> keep(model.params().list().size(), 0);
  for (size_t u = 0; u < model.layout().units.size(); ++u)
    if (su.held[u] && !(without_copy && su.tied_copy && int(u) == su.tied_unit))
      for (int p : model.layout().units[u].params) keep[p] = 1;
  return keep;
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
        stage_units_(o.pipeline),
        keep_(held_param_mask(model, o.pipeline, false)),
        own_(held_param_mask(model, o.pipeline, true)) {
    set_units(&model.layout().units);
    // The parameters this rank holds (a pipeline stage: its units') as decay runs; their
    // gradients and optimizer state are packed one run after the other (without a pipeline
    // that is the flat layout itself).
    const std::vector<char>* keep = keep_.empty() ? nullptr : &keep_;
    int64_t state = 0;
    for (const optim::ParamRange& r : flat_ranges(model.params(), keep)) {
      state_of_.push_back({r.offset, state});
      state += r.numel;
    }
    held_numel_ = state;
    if (stage_units_.active()) {
      // A pipeline stage: gradients for its own units only, in this engine's packed buffer.
      model.runtime().drop_flat_grads();
      own_grads_ = Buffer(size_t(state) * kF32, MemCategory::gradients);
      std::memset(own_grads_.data(), 0, own_grads_.bytes());
      grads_ = own_grads_.as<float>();
    } else {
      model.runtime().ensure_grads();
      grads_ = model.flat_grads().as<float>();
    }
    set_buffers(model.flat_params(), TensorView());
    opt_ = optim::make_optimizer(o.optim, o.optim_config, state);
    check_optimizer_fits(*opt_, model);
    if (opt_->needs_layout()) {  // one piece per tensor, which the optimizer's statistics follow
      const auto& list = model.params().list();
      for (size_t i = 0; i < list.size(); ++i)
        if (!keep || (*keep)[i])
          pieces_.push_back({flat_params_.as<float>() + list[i].offset, grads_ + at(list[i].offset), at(list[i].offset),
                             list[i].numel, list[i].decay(), int(i), 0});
    } else {
      for (const optim::ParamRange& r : flat_ranges(model.params(), keep))
        pieces_.push_back({flat_params_.as<float>() + r.offset, grads_ + at(r.offset), at(r.offset), r.numel, r.decay});
    }
    // Every rank holds whole tensors: nothing to sum across ranks.
    opt_->set_layout({optimizer_tensors(model), pieces_, nullptr});
    for (const optim::ParamRange& r : flat_ranges(model.params(), own_.empty() ? nullptr : &own_))
      norm_ranges_.push_back({at(r.offset), r.numel});
    // DDP replicates everything: its reduction group is the grid's dp_shard (x cp: context-
    // parallel ranks are extra data-parallel ranks for the gradients), which holds every
    // data-parallel rank (hybrid groups need a ZeRO stage), and carries only this engine's
    // traffic (the trainer's scalar reductions run on grid.dp_cp()).
    ZT_ASSERT(grid.dp_replicate().size() == 1 || o.local_sgd, "DDP takes no replicate groups (but local SGD's)");
    dp_ = engine_groups(grid, o.expert_sharded).shard;
    if (comm_dtype_ != DType::f32 && dp_->size() > 1)
      comm16_ = Buffer(size_t(held_numel_) * dtype_size(comm_dtype_), MemCategory::temporary);
    BucketOptions bo;
    bo.bucket_bytes = o.reduce_bucket_size * int64_t(kF32);
    bo.keep = keep;
    cap_ = o.reduce_bucket_size;
    plan_ = plan_buckets(model.params(), bo);
    tracker_ = std::make_unique<BucketTracker>(plan_);
    // Parameters of each unit, last first (the order backward finishes them).
    for (const Unit& u : model.layout().units) unit_params_.emplace_back(u.params.rbegin(), u.params.rend());
    set_state_pieces();
    model.runtime().set_provider(this);
  }
  ~DdpEngine() override { model_.runtime().set_provider(nullptr); }

  // Unit u's gradients: in the flat layout, or (pipeline) at their packed offset.
  TensorView grads(int u) override {
    const Unit& k = model_.layout().units[u];
    return TensorView::of(grads_ + at(k.begin), Shape{k.size()});
  }
  void grads_done(int u) override {
    if (!last_ || dp_->size() == 1 || !overlap_ || (stage_units_.active() && !stage_units_.held[u])) return;
    for (int p : unit_params_[u])
      if (int b = tracker_->mark(p); b >= 0) start(b);
  }
  void begin_step() override {
    if (own_grads_.data())
      std::memset(own_grads_.data(), 0, own_grads_.bytes());
    else
      model_.zero_grad();
    tracker_->reset();
  }
  void set_last_micro(bool last) override { last_ = last; }
  void end_backward() override {
    if (dp_->size() == 1) return tied_sum();
    if (!overlap_)
      for (size_t b = 0; b < plan_.buckets.size(); ++b) start(int(b));
    for (auto& r : inflight_) r.wait();
    inflight_.clear();
    tracker_->reset();
    tied_sum();
    // 16-bit reductions land in comm16_ (every bucket was started): widen them back.
    if (comm16_.data()) kernels::from_lowp(comm_dtype_, grads_, comm16_.as<const uint16_t>(), held_numel_);
  }
  // Every rank of the data-parallel group holds the same reduced gradient, so the norm needs
  // no communication there; pipeline stages add their squares (the tied copy counted once).
  double grad_norm() override {
    if (!stage_units_.active()) return optim::grad_norm(grads_, model_.num_params());
    double s = 0;
    for (auto [off, n] : norm_ranges_) {
      const double x = optim::grad_norm(grads_ + off, n);
      s += x * x;
    }
    stage_units_.stages->all_reduce(&s, 1);
    return std::sqrt(s);
  }
  // Weighted squares per parameter (a pipeline stage: its own units', the tied copy counted by
  // the first stage only, summed over the stages), and each gradient piece held (a pipeline
  // stage: its units', packed).
  double grad_sq(const std::vector<double>& w) override {
    double s = 0;
    const auto& list = model_.params().list();
    for (size_t i = 0; i < list.size(); ++i) {
      if (!own_.empty() && !own_[i]) continue;
      const double n = optim::grad_norm(grads_ + at(list[i].offset), list[i].numel);
      s += w[i] * n * n;
    }
    if (stage_units_.active()) stage_units_.stages->all_reduce(&s, 1);
    return s;  // every dp rank holds the same reduced gradient
  }
  void for_each_grad_piece(const std::function<void(int, float*, int64_t)>& f) override {
    const auto& list = model_.params().list();
    for (size_t i = 0; i < list.size(); ++i)
      if (keep_.empty() || keep_[i]) f(int(i), grads_ + at(list[i].offset), list[i].numel);
  }
  void clip(double norm, double max_norm, double unscale) override {
    for (const optim::StepPiece& p : pieces_)
      optim::clip_grads(const_cast<float*>(p.grads), p.numel, norm, max_norm, unscale);
  }
  void step(double lr) override { opt_->step(pieces_, lr); }
  void update_curvature() override { opt_->update_curvature(pieces_); }
  // Pipeline: every unit from the stage that owns it (a collective over the stages).
  void export_params() override {
    if (!stage_units_.active()) return;
    for (size_t u = 0; u < model_.layout().units.size(); ++u) {
      const Unit& k = model_.layout().units[u];
      stage_units_.stages->broadcast(flat_params_.as<float>() + k.begin, size_t(k.size()) * kF32,
                                     stage_units_.owner[u]);
    }
  }
  void sync_after_load() override {
    if (!stage_units_.tied) return;
    // The tied embedding: the first stage's parameters and optimizer state to the last's copy.
    const Unit& k = model_.layout().units[stage_units_.tied_unit];
    stage_units_.tied->broadcast(flat_params_.as<float>() + k.begin, size_t(k.size()) * kF32, 0);
    const auto& list = model_.params().list();
    for (int p : k.params)
      opt_->for_each_state(at(list[size_t(p)].offset), list[size_t(p)].numel, p,
                           [&](void* d, size_t bytes) { stage_units_.tied->broadcast(d, bytes, 0); });
  }
  optim::Optimizer& optimizer() override { return *opt_; }
  Stateful& param_state() override { return params_state_; }
  // Every rank holds the same state: rank 0 writes it (per pipeline stage: its units).
  StateShard checkpoint_shard() const override {
    const int pp = stage_units_.active() ? stage_units_.stages->rank() : 0,
              stages = stage_units_.active() ? stage_units_.stages->size() : 1;
    return {dp_->rank() == 0 ? pp : -1, stages};
  }
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
    return 2.0 * (n - 1) / n * double(kF32) * double(held_numel_);
  }
  int64_t held_params() const override { return held_numel_; }
  nlohmann::json describe() const override {
    return {{"stage", 0}, {"ranks", dp_->size()}, {"buckets", plan_.buckets.size()}, {"overlap_comm", overlap_}};
  }

 private:
  // A bucket larger than the cap (one big tensor: GPT-2's 154 MiB embedding) goes out in
  // cap-sized all-reduces: OpenMPI's all-reduce slows sharply beyond about 28 MiB here
  // (bench-comm) and its scratch grows with the message.
  void start(int b) {
    // A bucket's parameters are contiguous and held, so its gradients are contiguous in the
    // packed layout too.
    const Range r = plan_.buckets[b].range;
    const int64_t base = at(r.begin);
    for (int64_t c = 0; c < r.size(); c += cap_) {
      const int64_t n = std::min(cap_, r.size() - c);
      if (comm16_.data()) {
        uint16_t* h = comm16_.as<uint16_t>() + base + c;
        kernels::to_lowp(comm_dtype_, h, grads_ + base + c, n);
        inflight_.push_back(dp_->iall_reduce(h, size_t(n), comm_dtype_));
      } else {
        inflight_.push_back(dp_->iall_reduce(grads_ + base + c, size_t(n)));
      }
    }
  }

  // The tied embedding's gradient: the first stage's (embedding) plus the last stage's (LM head).
  void tied_sum() {
    if (!stage_units_.tied) return;
    const Unit& k = model_.layout().units[stage_units_.tied_unit];
    stage_units_.tied->all_reduce(grads_ + at(k.begin), size_t(k.size()));
  }
  // Checkpoints: every tensor whole, parameters and optimizer state at its offset (a pipeline
  // stage: its own units'; the tied copy is the first stage's to write).
  void set_state_pieces() {
    std::vector<optim::StateSpan> spans;
    const auto& list = model_.params().list();
    for (size_t i = 0; i < list.size(); ++i) {
      const ParamInfo& p = list[i];
      if (!own_.empty() && !own_[i]) continue;
      params_state_.pieces.push_back({p.name, p.shape, "params", {0, p.numel}, flat_params_.as<float>() + p.offset});
      spans.push_back({p.name, p.shape, 0, p.numel, at(p.offset)});
    }
    opt_->set_state_spans(std::move(spans));
  }

  Transformer& model_;
  bool overlap_;
  DType comm_dtype_;
  StageUnits stage_units_;
  std::vector<char> keep_, own_;                       // per parameter: held / held and not the tied copy
  std::vector<std::pair<int64_t, int64_t>> state_of_;  // (flat offset, packed offset) of each held run
  int64_t held_numel_ = 0;                             // elements held (all without a pipeline)
  Buffer own_grads_;                                   // pipeline: the stage's gradients, packed
  float* grads_ = nullptr;                             // the gradients: the model's flat buffer, or own_grads_
  // The packed offset of a held flat offset (the identity without a pipeline).
  int64_t at(int64_t flat) const {
    auto it = std::upper_bound(state_of_.begin(), state_of_.end(), std::pair{flat, INT64_MAX});
    ZT_ASSERT(it != state_of_.begin(), "flat offset ", flat, " is not held by this rank");
    --it;
    return it->second + (flat - it->first);
  }
  std::vector<std::pair<int64_t, int64_t>> norm_ranges_;  // (offset, numel) counted in the norm
  Buffer comm16_;  // 16-bit reductions: the gradients converted, bucket by bucket
  bool last_ = true;
  std::unique_ptr<optim::Optimizer> opt_;
  std::vector<optim::StepPiece> pieces_;  // decay runs of the flat buffers
  PieceState params_state_;
  dist::Communicator* dp_ = nullptr;  // the grid's dp_shard_cp (edp_shard_cp: engine_groups)
  BucketPlan plan_;
  std::unique_ptr<BucketTracker> tracker_;
  std::vector<std::vector<int>> unit_params_;
  std::vector<dist::Request> inflight_;
  int64_t cap_ = 0;  // elements per all-reduce call
};

}  // namespace

EngineGroups engine_groups(const dist::ProcessGrid& grid, bool expert_sharded) {
  if (expert_sharded) return {&grid.edp_cp(), &grid.edp_shard_cp(), &grid.dp_replicate()};
  return {&grid.dp_cp(), &grid.dp_shard_cp(), &grid.dp_replicate()};
}

std::unique_ptr<DataParallel> DataParallel::create(Transformer& model, const dist::ProcessGrid& grid,
                                                   const DataParallelOptions& opt) {
  check_data_parallel_options(opt, engine_groups(grid, opt.expert_sharded).all->size());
  ZT_CHECK(!opt.expert_sharded || (model.device() == DeviceKind::cpu && !opt.disk_offload.on() && !opt.local_sgd &&
                                   opt.hpz_partition_size == 1),
           "--expert-model-parallel-size runs with DDP and ZeRO 1-3 on the CPU; it does not compose with offload to "
           "disk, --local_sgd_steps or --zero_hpz_partition_size yet");
#ifdef ZT_HAVE_CUDA
  if (model.device() == DeviceKind::cuda) return make_gpu_engine(model, grid, opt);
#endif
  if (opt.disk_offload.on()) return make_offload_engine(model, grid, opt);
  DataParallelOptions o = opt;
  o.reduce_bucket_size = reduce_bucket_elements(opt.reduce_bucket_size, opt.stage);  // 0: the stage's default
  if (o.stage == 0) return std::make_unique<DdpEngine>(model, grid, o);
  return make_zero_engine(model, grid, o);
}

}  // namespace zt::parallel
