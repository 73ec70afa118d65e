// parallelize.cpp: parallelize() and the ParallelModel the trainer steps (parallelize.h).
#include "parallel/parallelize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/profile.h"

namespace zt::parallel {

std::unique_ptr<ParallelModel> parallelize(Transformer& model, const dist::ProcessGrid& grid,
                                           const ParallelPlan& plan) {
  return std::make_unique<ParallelModel>(model, grid, plan);
}

// The order matters: the TP and CP regions change the pass the pipeline cut weighs, and the
// engine takes the parameters over (ZeRO keeps only this rank's shard) before local SGD reads them.
ParallelModel::ParallelModel(Transformer& model, const dist::ProcessGrid& grid, const ParallelPlan& plan)
    : model_(model), grid_(grid), plan_(plan) {
  if (grid_.tp().size() > 1) apply_tensor_parallel();
  if (grid_.cp().size() > 1) apply_context_parallel();
  if (grid_.pp().size() > 1) apply_pipeline();
  if (grid_.ep().size() > 1) apply_expert_parallel();
  engine_ = DataParallel::create(model_, grid_, plan_.data_parallel);
  if (plan_.local_sgd.steps > 0)
    local_sgd_ = std::make_unique<LocalSgd>(model_.flat_params().as<float>(), model_.params(), grid_.dp_replicate(),
                                            plan_.local_sgd);
}

void ParallelModel::apply_tensor_parallel() {
  const LayerCut& cut = model_.layout().cut;
  tp_ = std::make_unique<TensorParallel>(grid_.tp(), cut.rows_split > 1, cut.kv_holders);
  tp_replicated_ = tp_replicated_params(model_.params());
  // The blocks meet the group at their f / g points; the ends of the model become their
  // vocabulary-parallel variants over this rank's rows of the vocabulary.
  for (nn::Block& b : model_.runtime().blocks()) b.tp = tp_.get();
  const int V = model_.config().vocab_size;
  vocab_embedding_ = std::make_unique<VocabParallelEmbedding>(*tp_, cut.vocab_begin, cut.vocab_valid(V));
  vocab_lm_head_ = std::make_unique<VocabParallelLmHead>(*tp_, cut.vocab_begin, cut.vocab_valid(V));
  model_.runtime().set_embedding(vocab_embedding_.get());
  model_.runtime().set_lm_head(vocab_lm_head_.get());
  tp_partial_ = tp_partial_grad_params(model_.layout());
  tp_norm_weights_ = tp_norm_weights(model_.params(), grid_.tp().size());
}

// The pass on this rank's T / cp rows, attention around the ring.
void ParallelModel::apply_context_parallel() {
  cp_ = std::make_unique<ContextParallel>(grid_.cp(), plan_.seq_len);
  for (nn::Block& b : model_.runtime().blocks()) b.cp = cp_.get();  // attention around the ring
  model_.runtime().set_sequence_length(cp_->sequence_length());
  ContextParallel* cp = cp_.get();
  dist::Communicator* comm = &grid_.cp();
  const int B = plan_.rows;
  cp_eval_.shard = [cp, B](const int32_t** in, const int32_t** tg, const int32_t** pos) {
    ZT_CHECK(!*pos, "--context-parallel-size does not support packed rows (position ids) yet");
    const ContextParallel::Shard s = cp->shard(*in, *tg, B);
    *in = s.inputs, *tg = s.targets, *pos = s.positions;
  };
  cp_eval_.reduce = [comm](double* v) { comm->all_reduce(v, 2); };
  // The auxiliary losses of a mixture of experts run over the whole micro-batch's routing.
  if (model_.config().moe.on()) model_.runtime().set_moe_reduce([comm](double* v, int n) { comm->all_reduce(v, n); });
}

// Each rank of the expert group computes its share of every MoE layer's experts (expert_parallel.h).
void ParallelModel::apply_expert_parallel() {
  const int E = model_.config().moe.num_experts, P = grid_.ep().size();
  ZT_CHECK(E > 0, "--expert-model-parallel-size ", P, " needs a mixture-of-experts model; ", model_.config().model_type,
           " has no experts");
  const int T = grid_.tp().size();  // under TP x EP the group splits a TP rank's block of E / T
  ZT_CHECK(E % (P * T) == 0, "--expert-model-parallel-size ", P, " x --tensor-model-parallel-size ", T,
           " does not divide the model's ", E, " experts; use sizes whose product divides ", E);
  ep_ = std::make_unique<ExpertParallel>(grid_.ep());
  for (nn::Block& b : model_.runtime().blocks()) b.ep = ep_.get();
  const LayerCut& cut = model_.layout().cut;
  const int El = E / (P * T), begin = grid_.tp().rank() * (E / T) + grid_.ep().rank() * El;
  ZT_ASSERT(cut.experts == El && cut.experts_begin == begin, "the layout holds experts [", cut.experts_begin, ", +",
            cut.experts, ") but expert-parallel rank ", grid_.ep().rank(), " of ", P, " computes [", begin, ", +", El,
            ")");
  // The engine runs over the ranks holding the same experts; the dense tensors' gradients are then
  // summed over the expert group as well, and count once in the norm (the experts' P times).
  plan_.data_parallel.expert_sharded = true;
  const auto& list = model_.params().list();
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].expert) ep_shared_.push_back(int(i));
    // Under TP x EP times TP's weight (applied first: its weights are known by now).
    ep_norm_weights_.push_back((list[i].expert ? 1.0 : 1.0 / P) * (tp_ ? tp_norm_weights_[i] : 1.0));
  }
}

void ParallelModel::apply_pipeline() {
  model_.runtime().set_act_plan(plan_.act_plan);  // the cut weighs the activations of this plan
  const int P = grid_.pp().size();
  const StageCut cut =
      plan_stages(model_, plan_.rows, local_seq_len(), P, plan_.layers_per_virtual_stage, plan_.stage_layers,
                  optim::optimizer_state_bytes_per_param(plan_.data_parallel.optim), plan_.balance_by_time);
  plan_.data_parallel.pipeline = stage_units(model_, cut, grid_.pp(), &tied_comm_);
  // Activations only for this stage's blocks.
  for (int l = 0; l < model_.config().n_layer; ++l) stage_layers_.push_back(cut.stage_of_layer(l) == grid_.pp().rank());
  model_.runtime().set_held_layers(stage_layers_);
  pipe_ = std::make_unique<PipelineExecutor>(model_, grid_.pp(), cut, plan_.schedule, plan_.micro_batches);
  plan_.data_parallel.pipeline.acquire_order = pipe_->acquire_order();  // ZeRO-3 gathers in the schedule's order
  if (plan_.print)
    std::printf("Pipeline: %d stages, %s schedule, %d micro-batches, blocks per virtual stage %s\n", P,
                schedule_name(plan_.schedule), plan_.micro_batches, cut.to_string().c_str());
}

// This rank's view of a micro-batch: the rows, or under context parallelism its chunks of each
// row at their global positions (held in the region's slot `slot` until that slot's next use).
PipelineMicroBatch ParallelModel::local_rows(const PipelineMicroBatch& rows, int slot) {
  if (!cp_) return rows;
  ZT_CHECK(!rows.positions, "--context-parallel-size does not support packed rows (position ids) yet");
  const ContextParallel::Shard s = cp_->shard(rows.inputs, rows.targets, plan_.rows, slot);
  return {s.inputs, s.targets, s.positions};
}

StepLoss ParallelModel::forward_backward(MicroBatchSource& src, float grad_scale, float loss_factor) {
  StepLoss loss;
  if (pipe_) {
    loss = pipeline_forward_backward(src, grad_scale);
  } else {
    for (int micro = 0; micro < plan_.micro_batches; ++micro) {
      const PipelineMicroBatch rows = src.next(micro);
      int64_t count = 0;
      engine_->set_last_micro(micro == plan_.micro_batches - 1);
      const PipelineMicroBatch lb = local_rows(rows, 0);
      loss.sum +=
          loss_factor * model_.forward_backward(lb.inputs, lb.targets, loss_factor * grad_scale, &count, lb.positions);
      loss.count += double(count);
      src.backward_done(micro, lb);
    }
  }
  ++steps_;
  return loss;
}

// A pipeline step: every stage of a data-parallel rank reads the same micro-batches (the
// loader's rank is the dp rank), the executor runs the schedule over them, and the loss (the
// last stage's) is summed over the stages; the measured bubble is averaged over them for the log.
StepLoss ParallelModel::pipeline_forward_backward(MicroBatchSource& src, float grad_scale) {
  std::vector<PipelineMicroBatch> mbs;
  for (int micro = 0; micro < plan_.micro_batches; ++micro) mbs.push_back(src.next(micro));
  for (int micro = 0; micro < plan_.micro_batches; ++micro) mbs[size_t(micro)] = local_rows(mbs[size_t(micro)], micro);
  const PipelineStepStats st = pipe_->step(mbs, grad_scale, [&](bool last) { engine_->set_last_micro(last); });
  const int P = grid_.pp().size();
  std::vector<double> v(2 * size_t(P) + 2, 0.0);
  v[0] = st.loss_sum;
  v[1] = double(st.count);
  v[2 + grid_.pp().rank()] = st.compute_s;
  v[2 + P + grid_.pp().rank()] = st.step_s;
  grid_.pp().all_reduce(v.data(), v.size());
  // A stage's bubble is its idle share of the pipeline's whole run (the slowest stage's
  // schedule, as (P - 1) / (m + P - 1) counts it), not of its own: the last stage finishes its
  // last backward while the first still works, and that wait is idle too.
  double makespan = 0, mean = 0;
  for (int s = 0; s < P; ++s) makespan = std::max(makespan, v[2 + P + s]);
  std::vector<double> bubble(size_t(P), 0.0);
  for (int s = 0; s < P; ++s) {
    bubble[size_t(s)] = makespan > 0 ? 1.0 - v[2 + s] / makespan : 0.0;
    mean += bubble[size_t(s)] / P;
  }
  last_bubble_ = mean;
  if (steps_ > 0) {  // the first step warms up
    bubble_sum_ += mean, ++bubble_steps_;
    stage_bubble_sum_.resize(size_t(P), 0.0);
    for (int s = 0; s < P; ++s) stage_bubble_sum_[s] += bubble[size_t(s)];
  }
  return {v[0], v[1]};
}

// Every reduction complete, then tensor parallelism's partial sums (the gradients of split
// tensors computed from partial inputs, and replicated tensors' over the KV group), then the
// loss over the data- and context-parallel ranks (cp ranks hold other tokens).
void ParallelModel::finish_grads(StepLoss& loss) {
  engine_->end_backward();
  if (tp_) {
    const auto pieces = [&](const auto& f) { engine_->for_each_grad_piece(f); };
    sum_partial_grads(grid_.tp(), tp_partial_, pieces);
    if (tp_->kv_group()) sum_partial_grads(*tp_->kv_group(), tp_replicated_, pieces);
  }
  if (ep_)  // the engine reduced over the ranks holding the same experts; the dense part over all
    sum_partial_grads(grid_.ep(), ep_shared_, [&](const auto& f) { engine_->for_each_grad_piece(f); });
  if (grid_.dp_cp().size() > 1) {
    double sums[2] = {loss.sum, loss.count};
    grid_.dp_cp().all_reduce(sums, 2);
    loss = {sums[0], sums[1]};
  }
}

double ParallelModel::grad_norm() {
  if (ep_) {  // the experts' squares summed over the group (and TP), the rest counted once
    double sq = engine_->grad_sq(ep_norm_weights_);
    grid_.ep().all_reduce(&sq, 1);
    if (tp_) grid_.tp().all_reduce(&sq, 1);
    return std::sqrt(sq);
  }
  if (!tp_) return engine_->grad_norm();
  // Split tensors' squares summed over the TP ranks, replicated ones counted once.
  double sq = engine_->grad_sq(tp_norm_weights_);
  grid_.tp().all_reduce(&sq, 1);
  return std::sqrt(sq);
}

void ParallelModel::after_step(int64_t step) {
  if (local_sgd_) local_sgd_->after_step(step);
}

std::vector<Stateful*> ParallelModel::state_components(const std::vector<Stateful*>& run_parts) {
  std::vector<Stateful*> parts = run_parts;
  parts.push_back(&engine_->param_state());
  parts.push_back(&engine_->optimizer());
  return in_global_layout(std::move(parts));
}

std::vector<Stateful*> ParallelModel::param_components() { return in_global_layout({&engine_->param_state()}); }

// Under tensor parallelism, components whose tensors are stored per TP slice, wrapped so their
// pieces are the global tensors' (the first writes the TP size into the checkpoint's metadata).
std::vector<Stateful*> ParallelModel::in_global_layout(std::vector<Stateful*> parts) {
  if (ep_) {  // expert tensors are global ones already: the shared tensors written once per group
    ep_adapters_.clear();
    for (Stateful*& p : parts) {
      ep_adapters_.push_back(std::make_unique<EpStateAdapter>(*p, model_.params(), grid_.ep().rank()));
      p = ep_adapters_.back().get();
    }
  }
  if (!tp_) return parts;
  tp_adapters_.clear();
  for (Stateful*& p : parts) {
    tp_adapters_.push_back(std::make_unique<TpStateAdapter>(*p, model_.params(), grid_.tp().rank(), grid_.tp().size(),
                                                            tp_adapters_.empty()));
    p = tp_adapters_.back().get();
  }
  return parts;
}

// Which state file this rank writes: the engine's choice within its TP slice's files (every TP
// rank writes its own slices; replicated tensors come from TP rank 0's file).
StateShard ParallelModel::checkpoint_shard() const {
  const StateShard s = engine_->checkpoint_shard();
  // Every rank of the expert group writes its experts; every TP rank its slices.
  const int E = grid_.ep().size(), T = grid_.tp().size();
  const int me = grid_.ep().rank() * T + grid_.tp().rank();
  return {s.index < 0 ? -1 : s.index * E * T + me, s.count * E * T};
}

// A pipeline: every stage's units are gathered (a collective over the stages), then the chief
// evaluates the whole model from its flat buffers, as one process would; under TP x PP (EP x PP)
// the first stage's ranks (whole TP / expert groups) evaluate, each over its slices (experts). Otherwise every rank
// of a tensor- or context-parallel forward, or of a collective one (ZeRO-3), evaluates; the
// chief logs.
bool ParallelModel::begin_eval(bool chief) {
  // The chief's forward is a collective over its TP group and its expert group: under a pipeline the
  // first stage's ranks (whole TP and expert groups) evaluate with it.
  const bool evaluator = chief || ((tp_ || ep_) && (!pipe_ || grid_.pp().rank() == 0));
  if (!pipe_) return evaluator || cp_ || ep_ || engine_->forward_is_collective();
  engine_->export_params();
  model_.runtime().set_provider(nullptr);
  if (evaluator) {  // the whole model's activations for the evaluation, the stage's again after it
    model_.runtime().set_held_layers({});
    model_.plan(plan_.rows, plan_.seq_len, /*training=*/true);
  }
  eval_evaluator_ = evaluator;
  return evaluator || cp_;
}

void ParallelModel::end_eval() {
  if (!pipe_) return;
  model_.runtime().set_provider(dynamic_cast<ParamProvider*>(engine_.get()));
  if (eval_evaluator_) {
    model_.runtime().set_held_layers(stage_layers_);
    model_.plan(plan_.rows, plan_.seq_len, /*training=*/true, pipe_->slots());
  }
}

// The pipeline's measurements (a collective over the stages): the bubble, and the
// point-to-point bytes per step of every stage (the pp group's counters) with the formula: one
// activation or gradient of B T C fp32 (B T C / tp under sequence parallelism) per micro-batch
// for each boundary the stage sends across (a chunk that is not the last virtual stage sends
// its output, one that is not the first its input's gradient); as many are received.
nlohmann::json ParallelModel::pipeline_report(int64_t steps_run, const ModelConfig& cfg) {
  if (!pipe_) return nlohmann::json();
  const double measured = bubble_steps_ ? bubble_sum_ / double(bubble_steps_) : last_bubble_;
  std::vector<double> per_stage;
  for (double b : stage_bubble_sum_) per_stage.push_back(b / double(std::max<int64_t>(1, bubble_steps_)));
  const int P = grid_.pp().size(), G = plan_.micro_batches;
  const int v = plan_.layers_per_virtual_stage > 0 ? cfg.n_layer / (P * plan_.layers_per_virtual_stage) : 1;
  const dist::CommStats cs = grid_.pp().stats();
  // Sequence parallel: each TP rank sends its 1/tp of the tokens (its residual stream's rows).
  const double sp = plan_.sequence_parallel ? grid_.tp().size() : 1;
  std::vector<double> sent(size_t(P), 0.0), recv(size_t(P), 0.0), formula;
  sent[grid_.pp().rank()] = cs[dist::Collective::send].bytes / double(steps_run);
  recv[grid_.pp().rank()] = cs[dist::Collective::recv].bytes / double(steps_run);
  grid_.pp().all_reduce(sent.data(), sent.size());
  grid_.pp().all_reduce(recv.data(), recv.size());
  for (int st = 0; st < P; ++st) {
    int crossings = 0;
    for (int c = 0; c < v; ++c) {
      const int vs = virtual_stage(st, c, P);
      crossings += (vs < P * v - 1) + (vs > 0);
    }
    formula.push_back(double(crossings) * G * double(plan_.rows) * plan_.seq_len * cfg.n_embd * 4.0 / sp);
  }
  return {{"stages", P},
          {"schedule", schedule_name(plan_.schedule)},
          {"micro_batches", G},
          {"virtual_stages", v},
          {"bubble", measured},
          {"bubble_per_stage", per_stage},
          {"ideal_bubble", ideal_bubble({plan_.schedule, P, G, v})},
          {"send_bytes_per_step", sent},
          {"recv_bytes_per_step", recv},
          {"formula_bytes_per_step", formula}};
}

// The cp group's traffic: a layer's ring moves 3 K / V-sized blocks per step of the ring
// (forward K / V, backward K / V and dK / dV); a recomputed layer reruns its forward ring in
// backward: a fourth. Only this rank's layers count (a pipeline stage's), and under tensor
// parallelism its own KV heads travel (one when TP exceeds them).
static nlohmann::json cp_report(const dist::Communicator& cp, int64_t steps, const ParallelPlan& plan,
                                const ModelConfig& cfg, const std::vector<char>& held, int tp) {
  const dist::CommStats st = cp.stats();
  const double sent = st[dist::Collective::send].bytes / double(steps);
  const double recv = st[dist::Collective::recv].bytes / double(steps);
  int layers = 0, recomputed = 0;
  for (int l = 0; l < cfg.n_layer; ++l)
    if (held.empty() || held[l]) ++layers, recomputed += plan.act_plan.of(l) != nn::Recompute::none;
  const int kv_heads = std::max(1, cfg.n_kv_head / tp);
  const double block =
      ContextParallel::ring_bytes_per_layer(plan.rows, plan.seq_len, cp.size(), kv_heads, cfg.head_size) / 3;
  const double formula = block * (3.0 * layers + recomputed) * plan.micro_batches;
  return {{"size", cp.size()},
          {"sent_bytes_per_step", sent},
          {"received_bytes_per_step", recv},
          {"formula_bytes_per_step", formula},
          {"send_seconds_per_step", st[dist::Collective::send].seconds / double(steps)},
          {"wait_seconds_per_step",
           (st[dist::Collective::send].wait_seconds + st[dist::Collective::recv].wait_seconds) / double(steps)}};
}

nlohmann::json ParallelModel::report(int64_t steps_run, const ModelConfig& cfg) {
  nlohmann::json r = nlohmann::json::object();
  if (tp_)
    r["tensor_parallel"] =
        tp_comm_report(grid_.tp(), pipe_ ? &grid_.pp() : nullptr, plan_.sequence_parallel, steps_run);
  if (cp_) r["context_parallel"] = cp_report(grid_.cp(), steps_run, plan_, cfg, stage_layers_, grid_.tp().size());
  if (ep_ && steps_run > 0) {
    // Dropless, each routed assignment's row (C fp32) goes out and back, forward and backward:
    // rows x K x layers x C x 4 bytes x 2 x 2 per micro-batch (evaluation's forward adds its own).
    // A rank sends its own rows out but the rows its experts received back, so ranks differ by the
    // routing's imbalance: the group's mean is what the formula gives.
    // Under TP x EP a TP rank's group carries its block's rows only: the TP ranks' add up to it.
    double sent = ep_->row_bytes();
    grid_.ep().all_reduce(&sent, 1);
    if (tp_) grid_.tp().all_reduce(&sent, 1);
    sent /= grid_.ep().size();
    // A fully recomputed layer reruns its forward's exchanges in backward: 3 passes instead of 2.
    int passes = 0;  // over this rank's layers (a pipeline stage's: its expert group's)
    for (int l = 0; l < cfg.n_layer; ++l)
      if (stage_layers_.empty() || stage_layers_[size_t(l)])
        passes += 2 + (plan_.act_plan.of(l) == nn::Recompute::full);
    const double rows = double(plan_.rows) * local_seq_len() * plan_.micro_batches;  // a CP rank's share
    const double formula = rows * cfg.moe.top_k * passes * cfg.n_embd * 4.0 * 2;
    int64_t expert_params = 0;
    for (const ParamInfo& p : model_.params().list()) expert_params += p.expert ? p.numel : 0;
    r["expert_parallel"] = {{"size", grid_.ep().size()},
                            {"all_to_all_bytes_per_step", sent / double(steps_run)},
                            {"formula_bytes_per_step", formula},
                            {"params_per_rank", model_.num_params()},
                            {"expert_params_per_rank", expert_params}};
  }
  return r;
}

}  // namespace zt::parallel
