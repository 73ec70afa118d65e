// tensor_parallel.cpp: see tensor_parallel.h.
#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/cross_entropy.h"
#include "kernels/ops.h"

namespace zt::parallel {

LayerCut tensor_parallel_cut(const ModelConfig& c, int P, int rank, bool sequence_parallel) {
  ZT_CHECK(P >= 1 && rank >= 0 && rank < P, "tensor parallel rank ", rank, " of ", P);
  if (P == 1) return {};
  ZT_CHECK(c.n_head % P == 0, "--tensor-model-parallel-size ", P, " does not divide the model's ", c.n_head,
           " attention heads; pick a divisor of ", c.n_head);
  ZT_CHECK(c.n_kv_head % P == 0 || P % c.n_kv_head == 0, "--tensor-model-parallel-size ", P, " and the model's ",
           c.n_kv_head,
           " key/value heads: one must divide the other (KV heads are split, or replicated when TP exceeds them)");
  ZT_CHECK(c.ffn % P == 0, "--tensor-model-parallel-size ", P, " does not divide the model's MLP width ", c.ffn);
  LayerCut k;
  k.whole = false;
  k.heads = c.n_head / P;
  k.heads_begin = rank * k.heads;
  k.kv_holders = c.n_kv_head >= P ? 1 : P / c.n_kv_head;
  k.kv_heads = c.n_kv_head >= P ? c.n_kv_head / P : 1;
  k.kv_heads_begin = rank / k.kv_holders * k.kv_heads;
  k.ffn = c.ffn / P;
  k.ffn_begin = rank * k.ffn;
  k.vocab_rows = (c.vocab_size + P - 1) / P;
  k.vocab_begin = rank * k.vocab_rows;
  k.adds_row_biases = rank == 0;
  k.rows_split = sequence_parallel ? P : 1;
  if (c.moe.on()) {  // a rank's experts whole, the shared expert cut like a dense MLP
    const MoeConfig& m = c.moe;
    ZT_CHECK(m.num_experts % P == 0, "--tensor-model-parallel-size ", P, " does not divide the model's ", m.num_experts,
             " experts; pick a divisor of ", m.num_experts);
    ZT_CHECK(m.shared_ffn % P == 0, "--tensor-model-parallel-size ", P, " does not divide the shared expert's width ",
             m.shared_ffn);
    k.experts = m.num_experts / P;
    k.experts_begin = rank * k.experts;
    k.shared_ffn = m.shared_ffn / P;
    k.shared_ffn_begin = rank * k.shared_ffn;
  }
  return k;
}

void VocabParallelEmbedding::forward(TensorView out, const float* wte, const float* wpe,
                                     const nn::EmbeddingPass& p) const {
  // Under sequence parallelism each rank embeds all N rows, and g reduce-scatters them.
  const TensorView full = tp_.sequence_parallel() ? p.all_rows : out;
  kernels::embedding_forward_vocab(full.as<float>(), p.ids, wte, tp_.rank() == 0 ? wpe : nullptr, p.N, p.T, p.C,
                                   p.positions, v0_, nv_);
  tp_.row_parallel_output(out, full);
}

void VocabParallelEmbedding::backward(float* dwte, float* dwpe, TensorView dy, const nn::EmbeddingPass& p) const {
  // g backward: every rank needs all N rows' gradient (SP gathers them). Every rank adds the
  // positions' gradient, which is then the same on all (a replicated tensor).
  TensorView all = dy;
  if (tp_.sequence_parallel()) {
    all = p.all_rows;
    tp_.row_parallel_output_grad(all, dy);
  }
  kernels::embedding_backward_vocab(dwte, dwpe, all.as<const float>(), p.ids, p.N, p.T, p.C, p.positions, v0_, nv_);
}

double VocabParallelLmHead::forward(float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                                    const nn::LmHeadPass& p, int64_t* count) const {
  kernels::VocabShard vs;
  vs.v0 = v0_;
  vs.nv = nv_;
  vs.max = [this](float* v, int64_t n) { tp_.all_reduce_max(v, n); };
  vs.sum = [this](float* v, int64_t n) { tp_.all_reduce_sum(v, n); };
  return kernels::lmhead_ce_vocab(dx, dw, x, w, targets, p.dims, p.grad_scale, p.logits, count, vs, p.lowp,
                                  p.token_losses);
}

TensorParallel::TensorParallel(dist::Communicator& tp, bool sequence_parallel, int kv_replicas)
    : comm_(tp), sp_(sequence_parallel) {
  // Collective over the tp group: the runs of ranks that share a replicated KV head.
  if (kv_replicas > 1) kv_ = tp.split(tp.rank() / kv_replicas, tp.rank(), tp.name() + ".kv");
}

std::vector<int> tp_replicated_params(const ParamTable& table) {
  std::vector<int> out;
  for (size_t i = 0; i < table.list().size(); ++i)
    if (table.list()[i].split_replicas > 1) out.push_back(int(i));
  return out;
}

void TensorParallel::column_parallel_input(TensorView full) {
  if (!sp_ || size() == 1) return;
  ZT_PROFILE("tp_comm");
  const size_t bytes = full.bytes() / size_t(size());
  char* out = static_cast<char*>(full.data);
  comm_.all_gather(out + rank() * bytes, out, bytes);
}

void TensorParallel::row_parallel_output(TensorView out, TensorView partial) {
  if (size() == 1) {
    if (out.data != partial.data) std::memcpy(out.data, partial.data, out.bytes());
    return;
  }
  ZT_PROFILE("tp_comm");
  ZT_ASSERT(partial.dtype == DType::f32 && out.dtype == DType::f32);
  if (!sp_) {
    ZT_ASSERT(out.data == partial.data, "tensor parallel: the reduction is in place");
    comm_.all_reduce(partial.as<float>(), size_t(partial.numel()));
    return;
  }
  ZT_ASSERT(out.numel() * size() == partial.numel());
  comm_.reduce_scatter(partial.as<const float>(), out.as<float>(), size_t(out.numel()));
}

void TensorParallel::column_parallel_input_grad(TensorView out, TensorView grad) {
  row_parallel_output(out, grad);  // the same reduction, in backward
}

void TensorParallel::row_parallel_output_grad(TensorView full, TensorView local) {
  if (!sp_ || size() == 1) {
    if (full.data != local.data) std::memcpy(full.data, local.data, local.bytes());
    return;
  }
  ZT_PROFILE("tp_comm");
  comm_.all_gather(local.data, full.data, local.bytes());
}

void TensorParallel::all_reduce_max(float* x, int64_t n) {
  if (size() > 1) comm_.all_reduce(x, size_t(n), dist::ReduceOp::max);
}

void TensorParallel::all_reduce_sum(float* x, int64_t n) {
  if (size() > 1) comm_.all_reduce(x, size_t(n), dist::ReduceOp::sum);
}

namespace {
// The runs of a slice (models/params.h).
template <class F>
void for_each_run(const ParamInfo& p, int64_t offset, F f) {
  for_each_slice_run(p, offset, f);
}
}  // namespace

std::vector<int> tp_partial_grad_params(const ModelLayout& layout) {
  std::vector<int64_t> offsets;
  const ModelOffsets& s = layout.offsets;
  auto norm = [&](const NormOffsets& n) {
    for (int64_t o : {n.w, n.b})
      if (o >= 0) offsets.push_back(o);
  };
  for (const BlockOffsets& b : s.blocks) {
    // A mixture-of-experts layer: every rank routes every token, the router's gradient (and the
    // shared expert gate's) gathering each rank's experts' share.
    for (int64_t o : {b.moe.router.w, b.moe.shared_gate.w})
      if (o >= 0) offsets.push_back(o);
    // Per-head q / k norms are whole on every rank, each rank's heads adding to their gradient;
    // OLMo-2's are cut with the projections (a slice's gradient is whole on its rank).
    if (!s.shape.qk_norm_full) norm(b.q_norm), norm(b.k_norm);
    if (layout.cut.rows_split > 1) norm(b.ln1), norm(b.ln2), norm(b.post1), norm(b.post2);
  }
  if (layout.cut.rows_split > 1) norm(s.lnf);
  // LoRA: a column layer's A and a row layer's B are whole on every rank, each rank's outputs (or
  // inputs) adding their share to the gradient. IA3 (b < 0): a column layer's input vector and a
  // row layer's output vector, likewise.
  // A mixture of experts' router and shared-expert gate adapters (plain: whole everywhere) both, as
  // their weights' gradients; the routed experts' are whole on their one rank.
  for (const BlockAdapters& ba : layout.adapters)
    for (const std::vector<AdapterPart>* parts : ba.linears())
      for (const AdapterPart& p : *parts) {
        const bool column = p.kind == nn::LinearKind::column, row = p.kind == nn::LinearKind::row;
        if (p.b < 0) {  // IA3
          if ((column && p.feedforward) || (row && !p.feedforward)) offsets.push_back(p.a);
          continue;
        }
        if (!row) offsets.push_back(p.a);
        if (!column) offsets.push_back(p.b);
        if (row && p.m >= 0) offsets.push_back(p.m);  // DoRA: each rank's slice of the outputs adds its share
      }
  std::vector<int> out;
  const auto& list = layout.table.list();
  for (size_t i = 0; i < list.size(); ++i)
    if (std::find(offsets.begin(), offsets.end(), list[i].offset) != offsets.end()) out.push_back(int(i));
  return out;
}

void sum_partial_grads(dist::Communicator& group, const std::vector<int>& params, const GradPieces& pieces) {
  if (group.size() == 1 || params.empty()) return;
  ZT_PROFILE("tp_comm");
  std::vector<std::pair<float*, int64_t>> runs;
  int64_t total = 0;
  pieces([&](int param, float* g, int64_t n) {
    if (std::binary_search(params.begin(), params.end(), param)) runs.push_back({g, n}), total += n;
  });
  std::vector<float> buf(static_cast<size_t>(total));
  int64_t at = 0;
  for (auto& [g, n] : runs) std::copy_n(g, n, buf.data() + at), at += n;
  group.all_reduce(buf.data(), buf.size());
  at = 0;
  for (auto& [g, n] : runs) std::copy_n(buf.data() + at, n, g), at += n;
}

std::vector<double> tp_norm_weights(const ParamTable& local_table, int tp_size) {
  std::vector<double> w;
  for (const ParamInfo& p : local_table.list())
    w.push_back(p.expert                 ? 1.0
                : p.split == Split::none ? 1.0 / tp_size
                                         : 1.0 / p.split_replicas);  // experts: one rank's
  return w;
}

nlohmann::json tp_comm_report(const dist::Communicator& tp, dist::Communicator* pp, bool sp, int64_t steps) {
  nlohmann::json j;
  j["size"] = tp.size();
  j["sequence_parallel"] = sp;
  const dist::CommStats st = tp.stats();
  nlohmann::json per = nlohmann::json::object();
  double bus = 0;
  for (size_t k = 0; k < dist::kNumCollectives; ++k) {
    const dist::CollectiveStats& c = st.by_kind[k];
    if (c.calls == 0) continue;
    per[dist::collective_name(dist::Collective(k))] = {{"calls", double(c.calls) / double(steps)},
                                                       {"bytes", c.bytes / double(steps)},
                                                       {"bus_bytes", c.bus_bytes / double(steps)},
                                                       {"seconds", c.seconds / double(steps)}};
    bus += c.bus_bytes;
  }
  j["per_step"] = per;
  j["bus_bytes_per_step"] = bus / double(steps);
  if (pp && pp->size() > 1) {
    std::vector<double> stages(size_t(pp->size()), 0.0);
    stages[size_t(pp->rank())] = bus / double(steps);
    pp->all_reduce(stages.data(), stages.size());
    j["bus_bytes_per_step_per_stage"] = stages;
  }
  return j;
}

TpStateAdapter::TpStateAdapter(Stateful& inner, const ParamTable& local, int tp_rank, int tp_size, bool write_meta)
    : inner_(inner), table_(local), rank_(tp_rank), size_(tp_size), meta_(write_meta) {}

const ParamInfo* TpStateAdapter::split_param(const std::string& name) const {
  const ParamInfo* p = table_.find(name);
  return p && p->split != Split::none ? p : nullptr;
}

bool TpStateAdapter::writes(const std::string& name) const {
  const ParamInfo* p = table_.find(name);
  if (!p || p->expert) return true;                // not a parameter's tensor; an expert this rank holds
  if (p->split == Split::none) return rank_ == 0;  // replicated: once
  return rank_ % p->split_replicas == 0;           // a replicated KV head: its first holder
}

void TpStateAdapter::to_global(const StatePiece& piece, const std::function<void(const StatePiece&)>& f) const {
  const ParamInfo* p = split_param(piece.tensor);
  if (!p) {
    f(piece);
    return;
  }
  // The piece is elements [b, e) of this rank's local tensor: each run of the slice that exists
  // in the global tensor (vocabulary padding does not) becomes a piece of the global tensor.
  const int64_t b = piece.slice.begin, e = b + piece.slice.count;
  for_each_run(*p, p->split_offset, [&](int64_t g, int64_t l, int64_t n) {
    const int64_t lo = std::max(b, l), hi = std::min(e, l + n);
    if (lo >= hi) return;
    StatePiece q = piece;
    q.shape = p->global_shape;
    q.slice = {g + (lo - l), hi - lo};
    q.data = piece.data + (lo - b);
    f(q);
  });
}

namespace {
class GlobalWriter final : public StateWriter {
 public:
  GlobalWriter(StateWriter& w, const TpStateAdapter& a) : w_(w), a_(a) {}
  void put_tensor(const StatePiece& piece) override {
    if (a_.writes(piece.tensor)) a_.to_global(piece, [&](const StatePiece& q) { w_.put_tensor(q); });
  }
  void put_json(const std::string& key, const nlohmann::json& value) override { w_.put_json(key, value); }

 private:
  StateWriter& w_;
  const TpStateAdapter& a_;
};
class GlobalReader final : public StateReader {
 public:
  GlobalReader(StateReader& r, const TpStateAdapter& a) : r_(r), a_(a) {}
  void get_tensor(const StatePiece& piece) override {
    a_.to_global(piece, [&](const StatePiece& q) { r_.get_tensor(q); });
  }
  const nlohmann::json* find_json(const std::string& key) const override { return r_.find_json(key); }
  std::string source() const override { return r_.source(); }

 private:
  StateReader& r_;
  const TpStateAdapter& a_;
};
}  // namespace

void TpStateAdapter::save_state(StateWriter& w) const {
  GlobalWriter gw(w, *this);
  inner_.save_state(gw);
  if (meta_) w.put_json(kTpSizeKey, size_);
}

void TpStateAdapter::load_state(StateReader& r) {
  GlobalReader gr(r, *this);
  inner_.load_state(gr);
}

}  // namespace zt::parallel
