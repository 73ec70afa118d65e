// zero.cpp: ZeRO stages 1-3 (and hybrid sharding, qwZ, qgZ) as a ParamProvider.
//
// Layout. The flat parameter layout is cut into buckets of whole model units (stage 3:
// one unit per bucket; stages 1/2: consecutive units, in backward order, up to
// reduce_bucket_size elements). Each bucket is padded (shard_layout, 16-float alignment)
// so every rank of the sharding group owns one equal, contiguous slice of it: the slices
// are what reduce_scatter / all_gather exchange, with no copies. A rank's shard is the
// concatenation of its slices over the buckets; the optimizer's state slots (whatever it
// declares: AdamW's two moments) are sized to it, and its step is cut per tensor
// (shard_pieces) so weight decay still applies per tensor. Checkpoints name the same cuts
// (tensor, first element): parameters and every slot, independent of this layout.
//
// What each stage holds per rank:
//   stage 1: full parameters + full gradients (padded buckets) + moments of the shard.
//            Gradients accumulate locally; on the last micro-batch each bucket is
//            reduce-scattered in place as backward completes it.
//   stage 2: full parameters + gradient shard + moments. A bucket's gradient buffer is
//            taken from a pool when backward first writes it and given back when its
//            reduce-scatter (every micro-batch, like DeepSpeed) has been added into the
//            shard: at most the buckets in flight are held.
//   stage 3: parameter shard + gradient shard + moments. acquire() all-gathers a unit into
//            a pooled buffer (prefetching the next unit of the pass), release() returns it.
// Pipeline stages: the engine holds the stage's units only (the head in a bucket of its own,
// so every bucket's units finish a micro-batch's backward together); ZeRO-2/3 reduce a
// bucket each time its units finish one, in the schedule's order, the same on every
// data-parallel replica of the stage, and ZeRO-3 gathers in the schedule's acquire order
// (StageUnits::acquire_order) instead of the model's whole pass.
// Hybrid (G < N): everything above happens within groups of G consecutive ranks; after
// backward, the group-reduced gradient shards are all-reduced across groups, so the update
// equals the flat run's. qgZ replaces the reduce-scatter by an all-to-all of int8 blocks
// and a local dequantize-and-sum; qwZ all-gathers stage 3's parameters as int8 blocks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>

#include "core/error.h"
#include "kernels/convert.h"
#include "optim/clip.h"
#include "parallel/optimizer_layout.h"
#include "parallel/quantize.h"
#include "parallel/shard.h"
#include "parallel/zero_engine.h"

namespace zt::parallel {
namespace {

constexpr int64_t kAlign = 16;  // elements: 64-byte slices of fp32
// Bytes of one element of the fp32 masters, gradients and moments this engine keeps.
constexpr size_t kF32Bytes = dtype_size(DType::f32);
constexpr size_t kMaxInflight = 2;
constexpr size_t kPoolKeep = 2;

struct PieceTemplate {
  int64_t rel, numel;  // within the rank's slice of a bucket
  bool decay;
  int param;            // index into the model's ParamTable::list()
  int64_t param_begin;  // first element of that parameter
};

struct BucketInfo {
  int64_t begin = 0, end = 0;  // flat range
  int units = 0;               // model units in it
  int first_unit = 0;          // the unit backward completes first (stage 3: the only one)
  ShardLayout layout;
  int64_t shard_off = 0;  // offset of this rank's slice in the shard storage
  std::vector<PieceTemplate> pieces;
};

class ZeroEngine final : public DataParallel, public ParamProvider {
 public:
  // The sharding group is the grid's dp_shard (dp_shard x cp: context-parallel ranks hold the
  // same weights and act as extra data-parallel ranks), the groups holding the same shards are
  // linked by dp_replicate (hybrid sharding when it has more than one rank): the grid's layout,
  // not rank arithmetic here. Under sharded expert parallelism, the ranks holding the same experts.
  ZeroEngine(Transformer& model, const dist::ProcessGrid& grid, const DataParallelOptions& o)
      : ZeroEngine(model, engine_groups(grid, o.expert_sharded), o) {}
  ZeroEngine(Transformer& model, const EngineGroups& groups, const DataParallelOptions& o)
      : model_(model),
        dp_(*groups.all),
        options_(o),
        stage_(o.stage),
        dp_ranks_(groups.all->size()),
        shard_group_size_(groups.shard->size()),
        group_(groups.shard),
        replica_(groups.replicate->size() > 1 ? groups.replicate : nullptr),
        stage_units_(o.pipeline) {
    ZT_ASSERT(shard_group_size_ == (o.hpz_partition_size > 1 ? o.hpz_partition_size : dp_ranks_),
              "grid and ZeRO options disagree");
    shard_rank_ = group_->rank();
    units_ = model.layout().units;
    tied_ = model.layout().tied_head;
    plan_buckets_();
    const int L = model.config().n_layer;
    model.runtime().forward_acquires(0, L, true, true, &pass_order_[0]);
    pass_order_[1] = pass_order_[0];
    model.runtime().backward_acquires(0, L, &pass_order_[1]);
    // The initial values of flat elements [begin, begin + n): from the options' source, or the
    // model's buffer.
    const float* P = model.flat_params().as<const float>();
    ZT_ASSERT(P || o.initial_params, "ZeRO: no initial parameters (the model holds none and no source was given)");
    auto take = [&](int64_t begin, int64_t n, float* dst) {
      if (o.initial_params)
        o.initial_params->read(begin, n, dst);
      else
        std::memcpy(dst, P + begin, size_t(n) * kF32Bytes);
    };
    if (stage_ <= 2) {
      for (auto& b : buckets_) {
        full_p_.emplace_back(size_t(b.layout.padded) * kF32Bytes, MemCategory::parameters);
        take(b.begin, b.end - b.begin, full_p_.back().as<float>());
      }
    } else {
      pshard_ = Buffer(size_t(shard_elems_) * kF32Bytes, MemCategory::parameters);
      for (auto& b : buckets_) {
        Range r = b.layout.range(shard_rank_);
        if (!r.empty()) take(b.begin + r.begin, r.size(), pshard_.as<float>() + b.shard_off);
      }
    }
    options_.initial_params = nullptr;  // used up: the source (the caller's weight files) need not outlive this
    if (stage_ == 1)
      for (auto& b : buckets_) full_g_.emplace_back(size_t(b.layout.padded) * kF32Bytes, MemCategory::gradients);
    else
      gshard_ = Buffer(size_t(shard_elems_) * kF32Bytes, MemCategory::gradients);
    opt_ = optim::make_optimizer(o.optim, o.optim_config, shard_elems_);
    set_state_pieces();
    // The update's pieces: this rank's slice of each tensor in its bucket (the buffers never
    // move, so the list is made once, not every step).
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (const PieceTemplate& t : buckets_[b].pieces)
        step_pieces_.push_back({shard_param(b) + t.rel, shard_grad(b) + t.rel, buckets_[b].shard_off + t.rel, t.numel,
                                t.decay, t.param, t.param_begin});
    // A tensor cut between shards has its per-matrix statistics summed over the shard group
    // (hybrid sharding's replicas compute the same sums).
    check_optimizer_fits(*opt_, model);
    opt_->set_layout(
        {optimizer_tensors(model), step_pieces_, [this](float* v, int64_t n) { group_->all_reduce(v, size_t(n)); }});
    gbuf_.resize(buckets_.size());
    pending_.assign(buckets_.size(), 0);
    model.runtime().drop_flat_state();
    model.runtime().set_provider(this);
  }
  ~ZeroEngine() override { model_.runtime().set_provider(nullptr); }

  // ---- ParamProvider ----
  void begin_pass(bool backward) override {
    for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].units;
    if (stage_ != 3) return;
    // A pipeline step: the schedule's order over all its micro-batches; else the model's pass.
    schedule_ = stage_units_.active() ? &stage_units_.acquire_order : &pass_order_[backward ? 1 : 0];
    pos_ = 0;
  }
  TensorView acquire(int u, bool backward) override {
    const int b = bucket_of_[u];
    const Shape shape{units_[u].size()};
    if (stage_ != 3) return TensorView::of(full_p_[b].as<float>() + (units_[u].begin - buckets_[b].begin), shape);
    const AcquireOrder& order = *schedule_;
    while (pos_ < order.size() && !(order[pos_].first == u && order[pos_].second == backward)) ++pos_;
    ZT_ASSERT(pos_ < order.size(), "ZeRO-3: unit acquired out of the model's pass order");
    ++pos_;
    if (!gathers_.count(u)) start_gather(u);
    finish_gather(u);
    if (pos_ < order.size()) {
      const int next = order[pos_].first;
      if (!gathers_.count(next) && !held_.count(next)) start_gather(next);
    }
    return TensorView::of(held_[u].as<float>(), shape);
  }
  void release(int u) override {
    if (stage_ != 3) return;
    auto it = held_.find(u);
    if (it != held_.end()) {
      put(std::move(it->second));
      held_.erase(it);
    }
  }
  TensorView grads(int u) override {
    const int b = bucket_of_[u];
    const int64_t rel = units_[u].begin - buckets_[b].begin;
    const Shape shape{units_[u].size()};
    if (stage_ == 1) return TensorView::of(full_g_[b].as<float>() + rel, shape);
    if (!gbuf_[b].data()) {
      // The bucket's reduction from the previous micro-batch ends first (it started a forward or
      // a whole pass ago) and its buffer is reused: a bucket never holds two buffers at once.
      auto in_flight = [&] {
        return std::any_of(inflight_.begin(), inflight_.end(), [&](const Pending& p) { return p.bucket == b; });
      };
      while (in_flight()) drain(inflight_.size() - 1);
      gbuf_[b] = get(size_t(buckets_[b].layout.padded) * kF32Bytes);
      // An empty unit (LoRA's embedding and head units) has no buffer (null): nothing to clear.
      if (gbuf_[b].data()) std::memset(gbuf_[b].data(), 0, gbuf_[b].bytes());
    }
    return TensorView::of(gbuf_[b].as<float>() + rel, shape);
  }
  void grads_done(int u) override {
    const int b = bucket_of_[u];
    if (b < 0) return;                  // another pipeline stage's unit
    if (stage_ == 1 && !last_) return;  // stage 1 accumulates locally until the last micro-batch
    if (--pending_[b] > 0) return;
    // Stages 2/3 reduce every micro-batch: a pipeline runs them all in one pass, so the
    // count starts again for the next one.
    pending_[b] = buckets_[b].units;
    reduce_bucket(b);
    if (!options_.overlap_comm) drain(0);
  }

  // ---- DataParallel ----
  void begin_step() override {
    if (stage_ == 1)
      for (auto& g : full_g_) std::memset(g.data(), 0, g.bytes());
    else
      std::memset(gshard_.data(), 0, gshard_.bytes());
  }
  void set_last_micro(bool last) override { last_ = last; }
  void end_backward() override {
    // Every bucket's units reported done (its buffer went to a reduction): the buckets hold
    // units that finish a micro-batch's backward together (plan_buckets_).
    for (const Buffer& g : gbuf_) ZT_ASSERT(!g.data(), "ZeRO: a gradient bucket was never reduced");
    drain(0);
    if (replica_) {
      // Hybrid: each group holds its own sum; add the groups' shards.
      std::vector<dist::Request> rs;
      for (size_t b = 0; b < buckets_.size(); ++b)
        if (stage_ == 1) rs.push_back(replica_->iall_reduce(shard_grad(b), size_t(buckets_[b].layout.shard)));
      if (stage_ != 1) rs.push_back(replica_->iall_reduce(gshard_.as<float>(), size_t(shard_elems_)));
      for (auto& r : rs) r.wait();
    }
    // Pipeline with a tied LM head: the embedding's gradient shard is the first stage's plus
    // the last stage's (the bucket holds the embedding alone on both, so the shards line up).
    if (stage_units_.tied)
      stage_units_.tied->all_reduce(shard_grad(tied_bucket_), size_t(buckets_[tied_bucket_].layout.shard));
  }
  double grad_norm() override {
    double s = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (stage_units_.tied_copy && int(b) == tied_bucket_) continue;  // the first stage counts it
      const double n = optim::grad_norm(shard_grad(b), buckets_[b].layout.shard);
      s += n * n;
    }
    dp_.all_reduce(&s, 1);
    s /= double(dp_ranks_ / shard_group_size_);                         // every group holds the whole gradient once
    if (stage_units_.active()) stage_units_.stages->all_reduce(&s, 1);  // pipeline stages: their units' squares
    return std::sqrt(s);
  }
  double grad_sq(const std::vector<double>& w) override {
    double s = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (stage_units_.tied_copy && int(b) == tied_bucket_) continue;  // the first stage counts it
      for (const PieceTemplate& t : buckets_[b].pieces) {
        const double x = optim::grad_norm(shard_grad(b) + t.rel, t.numel);
        s += w[size_t(t.param)] * x * x;
      }
    }
    dp_.all_reduce(&s, 1);
    s /= double(dp_ranks_ / shard_group_size_);                         // every group holds the whole gradient once
    if (stage_units_.active()) stage_units_.stages->all_reduce(&s, 1);  // pipeline stages: their units' squares
    return s;
  }
  void for_each_grad_piece(const std::function<void(int, float*, int64_t)>& f) override {
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (const PieceTemplate& t : buckets_[b].pieces) f(t.param, shard_grad(b) + t.rel, t.numel);
  }
  void clip(double norm, double max_norm, double unscale) override {
    for (size_t b = 0; b < buckets_.size(); ++b)
      optim::clip_grads(shard_grad(b), buckets_[b].layout.shard, norm, max_norm, unscale);
  }
  void step(double lr) override {
    opt_->step(step_pieces_, lr);
    gather_params();
  }
  void update_curvature() override { opt_->update_curvature(step_pieces_); }
  bool forward_is_collective() const override { return stage_ == 3; }
  void export_params() override {
    model_.runtime().restore_flat_params();
    float* P = model_.flat_params().as<float>();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const BucketInfo& k = buckets_[b];
      if (stage_ <= 2) {
        std::memcpy(P + k.begin, full_p_[b].data(), size_t(k.end - k.begin) * kF32Bytes);
        continue;
      }
      Buffer buf = get(size_t(k.layout.padded) * kF32Bytes);
      group_->all_gather(pshard_.as<float>() + k.shard_off, buf.data(), size_t(k.layout.shard) * kF32Bytes);
      std::memcpy(P + k.begin, buf.data(), size_t(k.end - k.begin) * kF32Bytes);
      put(std::move(buf));
    }
    // Pipeline: every unit from the stage that owns it.
    if (stage_units_.active())
      for (size_t u = 0; u < units_.size(); ++u)
        stage_units_.stages->broadcast(P + units_[u].begin, size_t(units_[u].size()) * kF32Bytes,
                                       stage_units_.owner[u]);
  }
  void sync_after_load() override {
    if (!stage_units_.tied) return;
    // The tied embedding's shard (parameters and every optimizer slot): first stage -> last.
    const int b = tied_bucket_;
    const size_t n = size_t(buckets_[b].layout.shard);
    stage_units_.tied->broadcast(shard_param(b), n * kF32Bytes, 0);
    for (const PieceTemplate& t : buckets_[size_t(b)].pieces)
      opt_->for_each_state(buckets_[size_t(b)].shard_off + t.rel, t.numel, t.param,
                           [&](void* d, size_t bytes) { stage_units_.tied->broadcast(d, bytes, 0); });
    gather_params();
  }
  optim::Optimizer& optimizer() override { return *opt_; }
  Stateful& param_state() override { return params_state_; }
  // Hybrid: the groups hold the same shards; only the first group writes them.
  // Pipeline: one file per (stage, shard).
  StateShard checkpoint_shard() const override {
    const int pp = stage_units_.active() ? stage_units_.stages->rank() : 0,
              stages = stage_units_.active() ? stage_units_.stages->size() : 1;
    return {replica_ && replica_->rank() != 0 ? -1 : pp * shard_group_size_ + shard_rank_, shard_group_size_ * stages};
  }
  std::vector<const dist::Communicator*> comms() const override {
    std::vector<const dist::Communicator*> c{group_};
    if (replica_) c.push_back(replica_);
    return c;
  }
  double planned_bus_bytes(int acc) const override {
    using dist::Collective;
    double reduce = 0, gather = 0, cross = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const ShardLayout& l = buckets_[b].layout;
      reduce += options_.quantized_gradients
                    ? dist::bus_bytes(Collective::all_to_all, double(shard_group_size_) * quant_packed_bytes(l.shard),
                                      shard_group_size_)
                    : dist::bus_bytes(Collective::reduce_scatter, double(l.padded) * dtype_size(options_.comm_dtype),
                                      shard_group_size_);
      const double g = stage_ == 3 && options_.quantized_weights
                           ? dist::bus_bytes(Collective::all_gather,
                                             double(shard_group_size_) * quant_packed_bytes(l.shard), shard_group_size_)
                           : dist::bus_bytes(Collective::all_gather, double(l.padded) * kF32Bytes, shard_group_size_);
      // Stage 3: per micro-batch by the model's pass, or (pipeline) per step by the schedule.
      gather += g * (stage_ != 3             ? 1
                     : stage_units_.active() ? gathers_per_step(int(b)) / double(acc)
                                             : gathers_per_pass(int(b)));
      if (replica_) cross += dist::bus_bytes(Collective::all_reduce, double(l.shard) * kF32Bytes, replica_->size());
    }
    if (stage_ == 1) return reduce + gather + cross;
    if (stage_ == 2) return acc * reduce + gather + cross;
    return acc * (reduce + gather) + cross;
  }
  double paper_bus_bytes(int acc) const override {
    const double psi = double(kF32Bytes) * double(held_params()), f = double(dp_ranks_ - 1) / dp_ranks_;
    if (stage_ == 1) return 2 * f * psi;
    if (stage_ == 2) return (acc + 1) * f * psi;
    return 3 * acc * f * psi;
  }
  int64_t held_params() const override {
    int64_t n = 0;
    for (const BucketInfo& b : buckets_) n += b.end - b.begin;
    return n;
  }
  nlohmann::json describe() const override {
    return {{"stage", stage_},
            {"ranks", dp_ranks_},
            {"shard_group", shard_group_size_},
            {"buckets", buckets_.size()},
            {"shard_elements", shard_elems_},
            {"qwZ", options_.quantized_weights},
            {"qgZ", options_.quantized_gradients}};
  }

 private:
  // Stages 1/2: every rank's updated (or loaded) shard into everyone's full parameters.
  void gather_params() {
    if (stage_ == 3) return;
    std::vector<dist::Request> rs;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const int64_t sh = buckets_[b].layout.shard;
      rs.push_back(group_->iall_gather(shard_param(b), full_p_[b].data(), size_t(sh) * kF32Bytes));
    }
    for (auto& r : rs) r.wait();
  }
  // Checkpoints: this rank's shard as pieces of each tensor (the optimizer's pieces), for the
  // parameters and, through state spans, every slot the optimizer declares.
  void set_state_pieces() {
    const auto& list = model_.params().list();
    std::vector<optim::StateSpan> spans;
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (const PieceTemplate& t : buckets_[b].pieces) {
        if (stage_units_.tied_copy && int(b) == tied_bucket_) break;  // the first stage writes it
        const ParamInfo& p = list[t.param];
        params_state_.pieces.push_back({p.name, p.shape, "params", {t.param_begin, t.numel}, shard_param(b) + t.rel});
        spans.push_back({p.name, p.shape, t.param_begin, t.numel, buckets_[b].shard_off + t.rel});
      }
    opt_->set_state_spans(std::move(spans));
    params_state_.after_load = [this] { gather_params(); };
  }
  void plan_buckets_() {
    // Units in backward order (the reverse of the list: head, blocks last first, embedding).
    const int U = int(units_.size());
    bucket_of_.assign(U, -1);
    for (int u = U - 1; u >= 0; --u) {
      if (stage_units_.active() && !stage_units_.held[u]) continue;  // another pipeline stage's unit
      // The tied embedding of a pipeline takes a bucket of its own on both stages holding it;
      // so does the head: its backward runs with its forward, the blocks' later.
      auto solo = [&](int x) {
        return stage_units_.active() && (x == stage_units_.tied_unit || x == model_.layout().head_unit);
      };
      const bool alone = solo(u) || (!buckets_.empty() && solo(buckets_.back().first_unit));
      const bool merge = stage_ != 3 && !buckets_.empty() && !alone &&
                         buckets_.back().end - units_[u].begin <= options_.reduce_bucket_size &&
                         buckets_.back().begin == units_[u].end;
      if (merge) {
        buckets_.back().begin = units_[u].begin;
        ++buckets_.back().units;
      } else {
        BucketInfo b;
        b.begin = units_[u].begin;
        b.end = units_[u].end;
        b.units = 1;
        b.first_unit = u;
        buckets_.push_back(b);
      }
      bucket_of_[u] = int(buckets_.size()) - 1;
      if (u == stage_units_.tied_unit) tied_bucket_ = bucket_of_[u];
    }
    shard_elems_ = 0;
    for (auto& b : buckets_) {
      b.layout = shard_layout(b.end - b.begin, shard_group_size_, kAlign);
      b.shard_off = shard_elems_;
      shard_elems_ += b.layout.shard;
      // The bucket's tensors as their own table (offsets from the bucket start), cut by
      // this rank's slice: AdamW's per-tensor decay rule needs the pieces.
      ParamTable sub;
      std::vector<bool> decay;
      std::vector<int> global;
      const auto& list = model_.params().list();
      for (size_t i = 0; i < list.size(); ++i)
        if (list[i].offset >= b.begin && list[i].offset < b.end) {
          sub.add(list[i].name, list[i].shape, list[i].init);
          decay.push_back(list[i].decay());
          global.push_back(int(i));
        }
      for (const ShardPiece& sp : shard_pieces(sub, b.layout, shard_rank_))
        b.pieces.push_back({sp.flat_begin - int64_t(shard_rank_) * b.layout.shard, sp.count, bool(decay[sp.param]),
                            global[sp.param], sp.param_begin});
    }
  }
  // How often a unit is gathered in one training pass (stage 3): blocks twice (forward and
  // backward), the head once (its backward follows its forward while it is held), the
  // embeddings once, or twice when the LM head is tied to them.
  int gathers_per_pass(int b) const {
    const Unit& u = units_[buckets_[b].first_unit];  // stage 3: one unit per bucket
    if (u.kind == UnitKind::head) return 1;
    if (u.kind == UnitKind::embedding) return tied_ ? 2 : 1;
    return 2;
  }
  // Stage 3 under a pipeline: how often the schedule acquires the bucket's unit in one step.
  int gathers_per_step(int b) const {
    int n = 0;
    for (const auto& [u, backward] : stage_units_.acquire_order) n += bucket_of_[u] == b;
    return n;
  }
  float* shard_param(size_t b) {
    if (stage_ == 3) return pshard_.as<float>() + buckets_[b].shard_off;
    return full_p_[b].as<float>() + int64_t(shard_rank_) * buckets_[b].layout.shard;
  }
  float* shard_grad(size_t b) {
    if (stage_ == 1) return full_g_[b].as<float>() + int64_t(shard_rank_) * buckets_[b].layout.shard;
    return gshard_.as<float>() + buckets_[b].shard_off;
  }

  // Reductions: start bucket b's reduce-scatter (or qgZ all-to-all); complete() adds the
  // result into the shard. At most kMaxInflight stay in flight (each holds its buffer).
  struct Pending {
    dist::Request req;
    int bucket;
    Buffer in, qin, qout;  // in: stage 2/3's bucket buffer, owned while in flight
  };
  void reduce_bucket(int b) {
    const ShardLayout& l = buckets_[b].layout;
    float* in = stage_ == 1 ? full_g_[b].as<float>() : gbuf_[b].as<float>();
    Pending p;
    p.bucket = b;
    if (options_.quantized_gradients) {
      const size_t qb = quant_packed_bytes(l.shard);
      p.qin = get(qb * shard_group_size_);
      p.qout = get(qb * shard_group_size_);
      for (int j = 0; j < shard_group_size_; ++j)
        quantize_int8_packed(p.qin.as<char>() + j * qb, in + int64_t(j) * l.shard, l.shard);
      p.req = group_->iall_to_all(p.qin.data(), p.qout.data(), qb);
    } else if (options_.comm_dtype != DType::f32) {
      // communication_data_type bf16 / fp16: the bucket goes out in 16 bits; this rank's
      // reduced shard lands in qout and is widened in drain().
      const int64_t n = int64_t(shard_group_size_) * l.shard;
      p.qin = get(size_t(n) * 2);
      p.qout = get(size_t(l.shard) * 2);
      kernels::to_lowp(options_.comm_dtype, p.qin.as<uint16_t>(), in, n);
      p.req = group_->ireduce_scatter(p.qin.data(), p.qout.data(), size_t(l.shard), options_.comm_dtype);
    } else {
      p.req = group_->ireduce_scatter(in, in + int64_t(shard_rank_) * l.shard, size_t(l.shard));
    }
    // The buffer leaves gbuf_ so the next micro-batch's backward starts a fresh one while
    // this reduction may still run.
    if (stage_ != 1) p.in = std::move(gbuf_[b]);
    inflight_.push_back(std::move(p));
    drain(kMaxInflight);
  }
  void drain(size_t keep) {
    while (inflight_.size() > keep) {
      Pending p = std::move(inflight_.front());
      inflight_.pop_front();
      p.req.wait();
      const int b = p.bucket;
      const ShardLayout& l = buckets_[b].layout;
      float* dst = shard_grad(b);
      if (options_.quantized_gradients) {
        const size_t qb = quant_packed_bytes(l.shard);
        if (stage_ == 1) std::memset(dst, 0, size_t(l.shard) * kF32Bytes);  // in place: replace, not add
        for (int j = 0; j < shard_group_size_; ++j)
          dequantize_int8_add_packed(dst, p.qout.as<char>() + j * qb, l.shard);
        put(std::move(p.qin));
        put(std::move(p.qout));
      } else if (options_.comm_dtype != DType::f32) {
        const uint16_t* h = p.qout.as<const uint16_t>();
        if (stage_ == 1) {
          kernels::from_lowp(options_.comm_dtype, dst, h, l.shard);  // in place: replace
        } else {
          const DType t = options_.comm_dtype;
#pragma omp parallel for simd schedule(static)
          for (int64_t i = 0; i < l.shard; ++i) dst[i] += t == DType::bf16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
        }
        put(std::move(p.qin));
        put(std::move(p.qout));
      } else if (stage_ != 1) {
        const float* src = p.in.as<float>() + int64_t(shard_rank_) * l.shard;
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < l.shard; ++i) dst[i] += src[i];
      }
      put(std::move(p.in));
    }
  }
  void dequantize_int8_add_packed(float* acc, const char* src, int64_t n) {
    const int64_t nb = quant_num_blocks(n);
    dequantize_int8_add(acc, reinterpret_cast<const int8_t*>(src + nb * 4), reinterpret_cast<const float*>(src), n);
  }

  // Stage 3 gathers.
  struct Gather {
    dist::Request req;
    Buffer buf, qin, qout;
  };
  void start_gather(int u) {
    const BucketInfo& k = buckets_[bucket_of_[u]];
    Gather g;
    g.buf = get(size_t(k.layout.padded) * kF32Bytes);
    const float* mine = pshard_.as<float>() + k.shard_off;
    if (options_.quantized_weights) {
      const size_t qb = quant_packed_bytes(k.layout.shard);
      g.qin = get(qb);
      g.qout = get(qb * shard_group_size_);
      quantize_int8_packed(g.qin.data(), mine, k.layout.shard);
      g.req = group_->iall_gather(g.qin.data(), g.qout.data(), qb);
    } else {
      g.req = group_->iall_gather(mine, g.buf.data(), size_t(k.layout.shard) * kF32Bytes);
    }
    gathers_.emplace(u, std::move(g));
  }
  void finish_gather(int u) {
    auto it = gathers_.find(u);
    Gather& g = it->second;
    g.req.wait();
    if (options_.quantized_weights) {
      // Every slot, this rank's included, is dequantized, so all ranks compute with
      // identical parameters.
      const ShardLayout& l = buckets_[bucket_of_[u]].layout;
      const size_t qb = quant_packed_bytes(l.shard);
      for (int j = 0; j < shard_group_size_; ++j)
        dequantize_int8_packed(g.buf.as<float>() + int64_t(j) * l.shard, g.qout.as<char>() + j * qb, l.shard);
      put(std::move(g.qin));
      put(std::move(g.qout));
    }
    held_[u] = std::move(g.buf);
    gathers_.erase(it);
  }

  // A pool of temporary buffers by exact size: blocks (all the same size) reuse each other's.
  Buffer get(size_t bytes) {
    for (size_t i = 0; i < pool_.size(); ++i)
      if (pool_[i].bytes() == bytes) {
        Buffer b = std::move(pool_[i]);
        pool_.erase(pool_.begin() + i);
        return b;
      }
    return Buffer(bytes, MemCategory::temporary);
  }
  // Keeps at most kPoolKeep idle buffers (the most recent: blocks, all one size, reuse
  // them); older ones are freed, so buffers of other sizes do not pile up.
  void put(Buffer b) {
    if (!b.data()) return;
    pool_.push_back(std::move(b));
    if (pool_.size() > kPoolKeep) pool_.erase(pool_.begin());
  }

  Transformer& model_;
  dist::Communicator& dp_;  // the whole data-parallel group: the gradient norm's scalar
  DataParallelOptions options_;
  int stage_, dp_ranks_, shard_group_size_, shard_rank_ = 0;
  bool tied_ = true, last_ = true;
  dist::Communicator *group_, *replica_;  // the grid's dp_shard and (hybrid) dp_replicate
  StageUnits stage_units_;
  int tied_bucket_ = -1;
  std::vector<Unit> units_;
  std::vector<BucketInfo> buckets_;
  std::vector<optim::StepPiece> step_pieces_;
  std::vector<int> bucket_of_;
  int64_t shard_elems_ = 0;
  std::vector<Buffer> full_p_, full_g_, gbuf_, pool_;
  Buffer pshard_, gshard_;
  std::unique_ptr<optim::Optimizer> opt_;
  PieceState params_state_;
  std::vector<int> pending_;
  std::deque<Pending> inflight_;
  AcquireOrder pass_order_[2];  // the model's pass: forward only, forward and backward
  const AcquireOrder* schedule_ = nullptr;
  size_t pos_ = 0;
  std::map<int, Gather> gathers_;
  std::map<int, Buffer> held_;
};

}  // namespace

std::unique_ptr<DataParallel> make_zero_engine(Transformer& model, const dist::ProcessGrid& grid,
                                               const DataParallelOptions& opt) {
  return std::make_unique<ZeroEngine>(model, grid, opt);
}

}  // namespace zt::parallel
