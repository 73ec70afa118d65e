// pipeline.cpp: the pipeline executor (see pipeline.h).
#include "parallel/pipeline.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/profile.h"

namespace zt::parallel {

namespace {
using Clock = std::chrono::steady_clock;
// Tags name the sending virtual stage and the kind, so each (link, kind) is one ordered stream.
int tag_of(int sender_vs, bool grad) { return 2 * sender_vs + (grad ? 1 : 0); }
// The mixture-of-experts side messages that travel with them (after all virtual stages' tags).
int side_tag_of(int sender_vs, bool grad, int virtual_stages) { return tag_of(virtual_stages + sender_vs, grad); }
constexpr int kSideKind = 16;  // a side message's Key::kind: its activation's or gradient's + kSideKind
}  // namespace

StageUnits stage_units(const Transformer& model, const StageCut& cut, dist::Communicator& pp,
                       std::unique_ptr<dist::Communicator>* tied) {
  const ModelLayout& ml = model.layout();
  const int P = cut.stages, stage = pp.rank();
  ZT_ASSERT(pp.size() == P, "pp group and cut disagree");
  StageUnits su;
  su.stages = &pp;
  su.owner.assign(ml.units.size(), 0);
  su.owner[ml.embedding_unit] = 0;
  su.owner[ml.head_unit] = (cut.chunks() - 1) % P;
  for (int l = 0; l < int(ml.block_units.size()); ++l) su.owner[ml.block_units[l]] = cut.stage_of_layer(l);
  su.held.assign(ml.units.size(), 0);
  for (size_t u = 0; u < ml.units.size(); ++u) su.held[u] = su.owner[u] == stage;
  const int last = (cut.chunks() - 1) % P;
  const bool tied_pair = ml.tied_head && P > 1;
  const bool in_pair = tied_pair && (stage == 0 || stage == last);
  // Every rank of pp takes part in the split; only the first and last stage get a group.
  std::unique_ptr<dist::Communicator> t = tied_pair ? pp.split(in_pair ? 0 : -1, stage, "pp_tied") : nullptr;
  if (in_pair) {
    su.tied_unit = ml.embedding_unit;
    su.tied_copy = stage == last;
    su.held[ml.embedding_unit] = 1;
    su.tied = t.get();
  }
  *tied = std::move(t);
  return su;
}

PipelineExecutor::PipelineExecutor(Transformer& model, dist::Communicator& pp, const StageCut& cut, PipeSchedule kind,
                                   int microbatches)
    : model_(model), pp_(pp), cut_(cut), P_(cut.stages), stage_(pp.rank()), m_(microbatches), V_(cut.chunks()) {
  list_ = make_schedule({kind, P_, m_, cut.virtual_stages}, stage_);
  slot_of_mb_ = assign_slots(list_, m_, &slots_);
  occupant_.assign(size_t(slots_), -1);
  sends_.resize(size_t(slots_));
  grad_in_.resize(size_t(slots_));
}

AcquireOrder PipelineExecutor::acquire_order() const {
  AcquireOrder order;
  for (const Action& a : list_) {
    const int v = vs(a), first = cut_.layer_begin(v), end = cut_.layer_end(v);
    if (a.kind == ActionKind::forward) model_.runtime().forward_acquires(first, end, v == 0, v == V_ - 1, &order);
    if (a.kind == ActionKind::backward) model_.runtime().backward_acquires(first, end, &order);
  }
  return order;
}

// The micro-batch starts using its slot: the sends still reading the slot's buffers for the
// previous micro-batch must be complete first.
void PipelineExecutor::touch(int mb, const std::vector<PipelineMicroBatch>& mbs) {
  const int s = slot_of_mb_[mb];
  if (occupant_[s] == mb) return;
  for (dist::Request& r : sends_[s]) r.wait();
  sends_[s].clear();
  occupant_[s] = mb;
  // Stages after the first learn the micro-batch's packing and RoPE table here (the first
  // stage's embed_forward does it again, with the same result).
  model_.runtime().begin_slot(s, mbs[mb].inputs, mbs[mb].positions);
}

void PipelineExecutor::post_recv(const Action& a, const std::vector<PipelineMicroBatch>& mbs) {
  const Key key{int(a.kind), a.mb, a.chunk};
  for (auto& [k, r] : recvs_)
    if (k == key) return;  // posted already
  touch(a.mb, mbs);
  const int s = slot_of_mb_[a.mb], v = vs(a), n = model_.runtime().moe_totals_size(), VS = P_ * V_;
  const size_t idx = size_t(s * V_ + a.chunk);
  const Key side{key.kind + kSideKind, a.mb, a.chunk};
  if (a.kind == ActionKind::recv_act) {
    const TensorView dst = model_.runtime().residual(s, cut_.layer_begin(v));
    recvs_.push_back({key, pp_.irecv(dst.data, bytes_, (v - 1) % P_, tag_of(v - 1, false))});
    if (n)
      recvs_.push_back({side, pp_.irecv(moe_in_[idx].data(), size_t(n) * sizeof(double), (v - 1) % P_,
                                        side_tag_of(v - 1, false, VS))});
  } else {
    recvs_.push_back({key, pp_.irecv(grad_in_[s].data(), bytes_, (v + 1) % P_, tag_of(v + 1, true))});
    if (n)
      recvs_.push_back({side, pp_.irecv(moe_gin_[idx].data(), size_t(n / 2) * sizeof(float), (v + 1) % P_,
                                        side_tag_of(v + 1, true, VS))});
  }
}

void PipelineExecutor::compute(const Action& a, const std::vector<PipelineMicroBatch>& mbs, float grad_scale,
                               const std::function<void(bool)>& set_last, PipelineStepStats* st) {
  const int s = slot_of_mb_[a.mb], v = vs(a);
  const int first = cut_.layer_begin(v), end = cut_.layer_end(v), L = model_.config().n_layer;
  const PipelineMicroBatch& in = mbs[a.mb];
  const auto t0 = Clock::now();
  const int n = model_.runtime().moe_totals_size();
  const size_t idx = size_t(s * V_ + a.chunk);
  if (a.kind == ActionKind::forward) {
    if (v == 0) model_.runtime().embed_forward(s, in.inputs, in.positions);
    if (n) model_.runtime().set_moe_incoming(s, v == 0 ? nullptr : moe_in_[idx].data());
    model_.runtime().blocks_forward(s, first, end);
    if (n && v < V_ - 1) model_.runtime().moe_totals(s, first, end, moe_out_[idx].data());  // sent with the output
    if (v == V_ - 1) {
      // The head's forward and backward at once (one fused kernel); its gradient waits in the
      // slot's last residual (read by nothing after the final norm's backward) for the
      // schedule's backward of this micro-batch.
      set_last(a.mb == m_ - 1);
      int64_t c = 0;
      st->loss_sum += model_.runtime().head_forward_backward(s, in.targets, grad_scale, &c, true);
      st->count += c;
      if (model_.layout().tied_head && P_ > 1) model_.runtime().lm_head_grads_done();
      const TensorView g = model_.runtime().residual_grad(), keep = model_.runtime().residual(s, L);
      std::memcpy(keep.data, g.data, g.bytes());
      dres_holder_ = a.mb;
    }
  } else {
    const TensorView g = model_.runtime().residual_grad();
    if (v == V_ - 1) {
      if (dres_holder_ != a.mb) std::memcpy(g.data, model_.runtime().residual(s, L).data, g.bytes());
    } else {
      std::memcpy(g.data, grad_in_[s].data(), g.bytes());
    }
    dres_holder_ = -1;
    set_last(a.mb == m_ - 1);
    float* moe_grads = n ? model_.runtime().moe_loss_grads(s) : nullptr;
    if (n && v < V_ - 1) std::copy(moe_gin_[idx].begin(), moe_gin_[idx].end(), moe_grads);  // the last chunk's own
    model_.runtime().blocks_backward(s, first, end);
    if (n && v > 0) std::copy_n(moe_grads, moe_gout_[idx].size(), moe_gout_[idx].begin());  // sent with dres
    if (v == 0) {
      model_.runtime().embed_backward(s);
    } else {
      // Sent from the chunk's input residual, free now that the chunk's backward ran.
      std::memcpy(model_.runtime().residual(s, first).data, g.data, g.bytes());
    }
  }
  st->compute_s += prof::seconds_since(t0);
}

PipelineStepStats PipelineExecutor::step(const std::vector<PipelineMicroBatch>& mbs, float grad_scale,
                                         const std::function<void(bool)>& set_last) {
  ZT_ASSERT(int(mbs.size()) == m_, "pipeline step with ", mbs.size(), " micro-batches, planned for ", m_);
  const auto t0 = Clock::now();
  PipelineStepStats st;
  bytes_ = model_.runtime().residual_grad().bytes();  // (B T, C) fp32, like every residual stream
  for (Buffer& b : grad_in_)
    if (b.bytes() != bytes_) b = Buffer(bytes_, MemCategory::activations);
  if (const int n = model_.runtime().moe_totals_size()) {
    const size_t chunks = size_t(slots_ * V_);
    moe_in_.assign(chunks, std::vector<double>(size_t(n), 0.0));
    moe_out_.assign(chunks, std::vector<double>(size_t(n), 0.0));
    moe_gin_.assign(chunks, std::vector<float>(size_t(n / 2), 0.f));
    moe_gout_.assign(chunks, std::vector<float>(size_t(n / 2), 0.f));
  }
  std::fill(occupant_.begin(), occupant_.end(), -1);
  dres_holder_ = -1;
  model_.runtime().begin_pass(true);
  for (size_t i = 0; i < list_.size(); ++i) {
    const Action& a = list_[i];
    switch (a.kind) {
      case ActionKind::recv_act:
      case ActionKind::recv_grad: {
        post_recv(a, mbs);
        const Key key{int(a.kind), a.mb, a.chunk};
        auto it = std::find_if(recvs_.begin(), recvs_.end(), [&](auto& p) { return p.first == key; });
        ZT_PROFILE("pipeline_wait");
        it->second.wait();
        recvs_.erase(it);
        const Key side{key.kind + kSideKind, a.mb, a.chunk};  // its mixture-of-experts side message
        auto st_it = std::find_if(recvs_.begin(), recvs_.end(), [&](auto& p) { return p.first == side; });
        if (st_it != recvs_.end()) {
          st_it->second.wait();
          recvs_.erase(st_it);
        }
        break;
      }
      case ActionKind::send_act:
      case ActionKind::send_grad: {
        const int s = slot_of_mb_[a.mb], v = vs(a);
        const bool grad = a.kind == ActionKind::send_grad;
        const TensorView src = model_.runtime().residual(s, grad ? cut_.layer_begin(v) : cut_.layer_end(v));
        const int peer = ((grad ? v - 1 : v + 1) % P_ + P_) % P_;
        sends_[s].push_back(pp_.isend(src.data, bytes_, peer, tag_of(v, grad)));
        if (model_.runtime().moe_totals_size()) {  // the routing totals on, the losses' gradients back
          const size_t idx = size_t(s * V_ + a.chunk);
          const void* side = grad ? static_cast<const void*>(moe_gout_[idx].data()) : moe_out_[idx].data();
          const size_t bytes = grad ? moe_gout_[idx].size() * sizeof(float) : moe_out_[idx].size() * sizeof(double);
          sends_[s].push_back(pp_.isend(side, bytes, peer, side_tag_of(v, grad, P_ * V_)));
        }
        break;
      }
      case ActionKind::forward:
      case ActionKind::backward:
        // The receives the next compute needs are posted now, so they arrive during this one.
        for (size_t j = i + 1; j < list_.size() && !is_compute(list_[j]); ++j)
          if (list_[j].kind == ActionKind::recv_act || list_[j].kind == ActionKind::recv_grad) post_recv(list_[j], mbs);
        touch(a.mb, mbs);
        compute(a, mbs, grad_scale, set_last, &st);
        break;
    }
  }
  {
    ZT_PROFILE("pipeline_wait");
    for (auto& reqs : sends_) {
      for (dist::Request& r : reqs) r.wait();
      reqs.clear();
    }
  }
  ZT_ASSERT(recvs_.empty(), "pipeline: receives left over at the end of a step");
  st.step_s = prof::seconds_since(t0);
  return st;
}

}  // namespace zt::parallel

namespace zt::parallel {

StageCut plan_stages(const Transformer& model, int B, int T, int P, int K, const std::string& list, double optim_bytes,
                     bool by_time) {
  const int L = model.config().n_layer;
  ZT_CHECK(P <= L, "--pipeline-model-parallel-size ", P, " exceeds the model's ", L,
           " layers; every stage needs at least one layer");
  const int v = K > 0 ? L / (P * K) : 1;
  if (K > 0) cut_per_virtual_stage(L, P, K);  // checks that P x K divides the layers
  if (!list.empty()) return cut_from_list(list, L, P, v);
  if (K > 0) return cut_per_virtual_stage(L, P, K);
  const ModelLayout& layout = model.layout();
  if (by_time) {
    const ModelConfig& c = model.config();
    auto flops = [&](int u) { return 6.0 * double(layout.units[u].size()); };  // per token, GEMMs
    std::vector<double> blocks;
    for (int l = 0; l < L; ++l) blocks.push_back(flops(layout.block_units[l]) + 6.0 * double(T) * double(c.n_embd));
    // The head's GEMM is V x C whether or not it is tied; the embedding itself is a lookup.
    const double head = 6.0 * double(c.vocab_size) * double(c.n_embd);
    return cut_balanced(0.0, blocks, head, P, 1);
  }
  size_t acts = 0, tmp = 0;
  ModelRuntime::planned_bytes(model.config(), B, T, &acts, &tmp, 1, model.runtime().act_plan());
  const ModelLayout& ml = model.layout();
  const double per_param = 8.0 + optim_bytes;
  auto states = [&](int u) { return double(ml.units[u].size()) * per_param; };
  std::vector<double> blocks;
  for (int l = 0; l < L; ++l) blocks.push_back(states(ml.block_units[l]) + double(acts) / L);
  const double head = states(ml.head_unit) + (ml.tied_head ? states(ml.embedding_unit) : 0.0);
  return cut_balanced(states(ml.embedding_unit), blocks, head, P, 1);
}

}  // namespace zt::parallel
