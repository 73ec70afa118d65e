// planner.cpp: see planner.h.
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/memory.h"
#include "dist/communicator.h"
#include "models/layout.h"
#include "models/transformer.h"
#include "optim/optimizer.h"
#include "parallel/buckets.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/shard.h"
#include "parallel/tensor_parallel.h"
#include "plan/memory_estimate.h"
#include "plan/memory_fit.h"

namespace zt::parallel {

std::string PlanLayout::flags() const {
  std::string s;
  if (tp > 1) s += str_cat("--tensor-model-parallel-size ", tp, sp ? " --sequence-parallel" : "", " ");
  if (pp > 1) s += str_cat("--pipeline-model-parallel-size ", pp, " ");
  if (cp > 1) s += str_cat("--context-parallel-size ", cp, " ");
  if (ep > 1) s += str_cat("--expert-model-parallel-size ", ep, " ");
  s += str_cat("--zero_stage ", zero, " --per_device_train_batch_size ", micro_batch, " --gradient_accumulation_steps ",
               accumulation);
  if (recompute) s += " --gradient_checkpointing";
  return s;
}

std::string PlanLayout::name() const {
  return str_cat("dp", dp, " tp", tp, sp ? "+sp" : "", " pp", pp, cp > 1 ? str_cat(" cp", cp) : "",
                 ep > 1 ? str_cat(" ep", ep) : "", " zero", zero, " B", micro_batch, " m", accumulation,
                 recompute ? " recompute" : "");
}

int PlanMachine::threads_per_rank() const {
  return std::max(1, int(std::floor(cores_per_host / std::max(1, ranks_per_host()) + 1e-9)));
}

namespace {

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// What one rank of a layout holds and computes: the TP rank's layout, the pipeline cut, the
// stage's units.
struct StageView {
  ModelLayout ml;
  StageCut cut;
  std::vector<std::vector<char>> held_units;   // per stage, per unit
  std::vector<std::vector<char>> held_blocks;  // per stage, per layer
};

// Rank 0's cut: its TP slices and expert share (every rank holds as much).
LayerCut plan_cut(const PlanInputs& in, const PlanLayout& l) {
  LayerCut cut = parallel::tensor_parallel_cut(in.cfg, l.tp, 0, l.sp);
  parallel::expert_parallel_cut(in.cfg, l.ep, 0, cut);
  return cut;
}

StageView stage_view(const PlanInputs& in, const PlanLayout& l) {
  StageView v;
  v.ml = model_layout(in.cfg, plan_cut(in, l));
  const ModelLayout& ml = v.ml;
  const int L = in.cfg.n_layer, P = l.pp;
  if (P > 1) {
    // The trainer's default cut (plan_stages, --pipeline_balance time): a block costs 6 x its
    // (local) GEMM parameters + 6 T C, the head 6 V C, the embedding nothing.
    std::vector<double> blocks;
    for (int b = 0; b < L; ++b)
      blocks.push_back(6.0 * double(ml.units[ml.block_units[b]].size()) + 6.0 * (in.seq_len / l.cp) * in.cfg.n_embd);
    v.cut = cut_balanced(0.0, blocks, 6.0 * double(in.cfg.vocab_size) * in.cfg.n_embd, P, 1);
  } else {
    v.cut.stages = 1;
    v.cut.first_layer = {0, L};
  }
  for (int s = 0; s < P; ++s) {
    std::vector<char> units(ml.units.size(), 0), blocks(size_t(L), 0);
    if (s == 0) units[ml.embedding_unit] = 1;
    if (s == P - 1) units[ml.head_unit] = 1;
    if (s == P - 1 && ml.tied_head) units[ml.embedding_unit] = 1;  // the last stage's copy
    for (int b = 0; b < L; ++b)
      if (v.cut.stage_of_layer(b) == s) {
        units[ml.block_units[b]] = 1;
        blocks[b] = 1;
      }
    v.held_units.push_back(units);
    v.held_blocks.push_back(blocks);
  }
  return v;
}

// Micro-batches a stage holds activations for: the executor's slots over the 1F1B schedule.
// Under 1F1B a stage has at most P micro-batches in flight, so the count is the same for every
// m >= P: the schedule is simulated with at most 2P of them (a global batch of millions of
// sequences would otherwise simulate millions of micro-batches per layout).
int stage_slots(int P, int m, int stage) {
  if (P == 1) return 1;
  const int sim = std::min(m, 2 * P);
  int slots = 0;
  assign_slots(make_schedule({PipeSchedule::one_f_one_b, P, sim, 1}, stage), sim, &slots);
  return slots;
}

// The divisors of n up to `cap`, ascending, in O(sqrt n): the micro-batch sizes of a batch of n.
std::vector<int64_t> divisors_up_to(int64_t n, int64_t cap) {
  std::vector<int64_t> small, large;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d) continue;
    if (d <= cap) small.push_back(d);
    if (d != n / d && n / d <= cap) large.push_back(n / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

nn::ActPlan act_plan(const PlanInputs& in, const PlanLayout& l) {
  nn::ActPlan p;
  p.precision = in.precision;
  if (l.recompute) {
    p.recompute = nn::Recompute::full;
    p.recompute_layers = in.cfg.n_layer;
  }
  return p;
}

// The parameters every rank of an expert group holds (all but the experts), of the held units
// (null: every unit).
int64_t dense_params(const ModelLayout& ml, const std::vector<char>* held = nullptr) {
  int64_t n = 0;
  for (size_t u = 0; u < ml.units.size(); ++u)
    if (!held || (*held)[u])
      for (int p : ml.units[u].params) n += ml.table.list()[size_t(p)].expert ? 0 : ml.table.list()[size_t(p)].numel;
  return n;
}

int64_t units_params(const ModelLayout& ml, const std::vector<char>& held) {
  int64_t n = 0;
  for (size_t u = 0; u < ml.units.size(); ++u)
    if (held[u]) n += ml.units[u].size();
  return n;
}

// Global (whole-model) training FLOPs per token of block l and of the LM head: 6 x GEMM
// parameters, and causal attention's 12 x heads x head size x T for a block
// (Transformer::flops_per_token's convention, split per unit).
struct UnitFlops {
  double block = 0, head = 0;
  double expert = 0;  // of block: the routed experts' GEMMs (run at their own rows per expert)
};
UnitFlops unit_flops(const ModelConfig& c, int T) {
  const ModelLayout whole = model_layout(c);
  const auto& b = whole.offsets.blocks.at(0);
  double gemm = 0;
  for (auto* lin : {&b.qkv, &b.proj, &b.fc_in, &b.fc_out}) gemm += double(lin->in) * lin->out;
  double expert = 0;
  if (c.moe.on()) {  // a token's router, top-k experts and shared expert (Transformer::matmul_params)
    const MoeConfig& m = c.moe;
    expert = 3.0 * m.top_k * m.expert_ffn * double(c.n_embd);
    gemm += expert + double(c.n_embd) * (m.num_experts + 3.0 * m.shared_ffn + (m.shared_gate ? 1.0 : 0.0));
  }
  return {6.0 * gemm + 12.0 * c.n_head * c.head_size * double(T), 6.0 * double(c.vocab_size) * c.n_embd, 6.0 * expert};
}

}  // namespace

int64_t cp_ring_bytes(const ModelConfig& c, int B, int T, int cp, int tp, int slots) {
  if (cp <= 1) return 0;
  const int64_t Tl = T / cp, NH = c.n_head / tp, KVH = c.n_kv_head >= tp ? c.n_kv_head / tp : 1;
  const int64_t kv = int64_t(B) * Tl * 2 * KVH * c.head_size, out = int64_t(B) * Tl * NH * c.head_size;
  const int64_t lse = int64_t(B) * NH * Tl;
  // kv_[2] and acc_[2]; out_blk_; lse_blk_ and D_ (floats); per slot 3 int32 rows.
  int64_t bytes = 4 * (4 * kv + out + 2 * lse) + int64_t(slots) * 3 * 4 * B * Tl;
  // RoPE: the rows' global positions run past the T / cp the arena's table was planned for, so
  // the model fills a cos / sin table of the whole context (Transformer::extend_rope).
  if (model_layout(c).offsets.shape.rope) bytes += 4 * int64_t(c.max_position) * c.head_size;
  return bytes;
}

double cp_ring_seconds(const ModelConfig& c, int B, int T, int cp, int tp, bool recompute, const PlanMachine& m) {
  if (cp <= 1) return 0;
  const int KVH = c.n_kv_head >= tp ? c.n_kv_head / tp : 1;
  const double blocks = (recompute ? 4.0 : 3.0) * (cp - 1);  // messages per layer (ring steps x kinds)
  const double bytes = double(B) * (T / cp) * 2 * KVH * c.head_size * sizeof(float);
  return blocks * (bytes / (std::max(1e-9, m.link_gbps) * 1e9) + m.latency_us * 1e-6);
}

namespace {
// DP: a stage's local gradient bytes (Ps parameters), reduced once per step (ZeRO-2 every
// micro-batch, ZeRO-3 also gathers parameters forward and backward every micro-batch) over the
// engine's dp x cp / ep ranks, then gathered; under expert parallelism the dense gradients (this
// rank's shard under ZeRO) are then all-reduced over the expert group.
double dp_reduce_seconds(const PlanLayout& l, const ModelLayout& ml, const std::vector<char>& held, int64_t Ps, int M,
                         double link, double lat) {
  const int Re = l.dp * l.cp / l.ep;
  double s = 0;
  if (Re > 1) {
    const double rounds = l.zero <= 1 ? 2.0 : l.zero == 2 ? M + 1.0 : 3.0 * M;
    s = rounds * (double(Re - 1) / Re * 4.0 * double(Ps) / link + lat);
  }
  if (l.ep > 1) {
    const double dense = double(dense_params(ml, &held)) / (l.zero >= 1 ? Re : 1);
    s += 2.0 * (l.ep - 1) / l.ep * 4.0 * dense / link + lat;
  }
  return s;
}
}  // namespace

double ep_exchange_seconds(const PlanInputs& in, const PlanLayout& l, double tokens, const PlanMachine& m) {
  if (l.ep <= 1) return 0;
  // Dispatch and combine, forward and backward (a recomputed forward's again): each moves the
  // micro-batch's routed rows (tokens x top-k, C fp32), (ep - 1) / ep of them to other ranks; under
  // TP x EP a TP rank's group carries its block's rows (1 / tp of them).
  const double exchanges = (l.recompute ? 3.0 : 2.0) * 2.0;
  const double bytes = tokens * in.cfg.moe.top_k * in.cfg.n_embd * 4.0 * (l.ep - 1) / l.ep / l.tp;
  return exchanges * (bytes / (std::max(1e-9, m.link_gbps) * 1e9) + m.latency_us * 1e-6);
}

std::string layout_refusal(const PlanInputs& in, const PlanLayout& l, int nproc) {
  const ModelConfig& c = in.cfg;
  if (l.cp < 1) return str_cat("context parallel size ", l.cp, " must be at least 1");
  if (l.dp * l.cp * l.tp * l.pp != nproc)
    return str_cat("dp x cp x tp x pp = ", l.dp * l.cp * l.tp * l.pp, " is not ", nproc, " ranks");
  if (l.cp > 1) {  // the trainer's refusals (check_cp_args)
    try {
      check_cp_composes(in.seq_len, l.cp, in.packing, in.validation, l.pp);
    } catch (const Error& e) {
      return e.what();
    }
  }
  try {
    parallel::tensor_parallel_cut(c, l.tp, 0, l.sp);  // throws when the model does not cut so
  } catch (const Error& e) {
    return e.what();
  }
  // The cost model has no expert layers under tensor, context or pipeline parallelism yet (the
  // trainer runs them: docs/moe.md).
  if (l.ep < 1) return str_cat("expert parallel size ", l.ep, " must be at least 1");
  if (l.ep > 1 && !c.moe.on())
    return str_cat("--expert-model-parallel-size applies to mixture-of-experts models; ", c.model_type,
                   " has no experts");
  if (l.ep > 1 && c.moe.num_experts % (l.ep * l.tp))
    return str_cat("--expert-model-parallel-size ", l.ep, " x --tensor-model-parallel-size ", l.tp,
                   " does not divide the model's ", c.moe.num_experts, " experts");
  if (l.ep > 1 && ((l.dp * l.cp) % l.ep || l.ep % l.cp))
    return str_cat("parallel dim ep ", l.ep, " must divide dp ", l.dp, " x cp ", l.cp, " and be a multiple of cp");
  if (l.sp && l.tp == 1) return "--sequence-parallel needs tensor parallelism";
  // SP splits a rank's rows: T / cp of each sequence under context parallelism.
  if (l.sp && int64_t(l.micro_batch) * (in.seq_len / l.cp) % l.tp != 0)
    return str_cat("--sequence-parallel: B x T = ", int64_t(l.micro_batch) * (in.seq_len / l.cp),
                   l.cp > 1 ? " (a cp rank's rows)" : "", " is not a multiple of tp ", l.tp);
  if (l.pp > c.n_layer) return str_cat("pipeline stages ", l.pp, " exceed the model's ", c.n_layer, " layers");
  if (l.pp > 1) {
    try {
      check_schedule({PipeSchedule::one_f_one_b, l.pp, l.accumulation, 1});
    } catch (const Error& e) {
      return e.what();
    }
  }
  if (l.zero < 0 || l.zero > 3) return str_cat("ZeRO stage ", l.zero, " does not exist");
  return "";
}

namespace {

// Stage s's parameters, gradients, optimizer state and communication buffers (r.activations,
// r.temporary and the compute copy `copy` already known; S: the optimizer's state bytes per
// parameter). A cp rank runs the model on its T / cp rows; parameters, gradients and optimizer
// state are data parallel's over dp x cp ranks (ZeRO shards over both).
void stage_state_memory(const PlanInputs& in, const PlanLayout& l, const StageView& v, int s, int64_t copy, double S,
                        LayoutMemory& r) {
  const ModelLayout& ml = v.ml;
  // The engine's ranks: dp x cp, or under expert parallelism those holding the same experts.
  const int T = in.seq_len / l.cp, R = l.dp * l.cp / l.ep;
  const int64_t W = 4;
  const int64_t local = ml.table.total();
  if (l.pp == 1 || l.zero >= 2) {
    // The estimator's row for the stage's units (all of them without a pipeline), on this TP
    // rank's slices: ZeRO-2/3 under a pipeline hold what they hold without one, for the
    // stage's units only.
    ModelMemoryInputs mi;
    mi.num_params = l.pp == 1 ? local : units_params(ml, v.held_units[s]);
    for (size_t u = 0; u < ml.units.size(); ++u)
      if (l.pp == 1 || v.held_units[s][u]) mi.unit_params.push_back(ml.units[u].size());
    std::sort(mi.unit_params.rbegin(), mi.unit_params.rend());
    mi.largest_unit_params = mi.unit_params.empty() ? 0 : mi.unit_params[0];
    mi.activation_bytes = r.activations;
    mi.temporary_bytes = r.temporary;
    mi.compute_copy_bytes = copy;
    MemoryEstimateOptions opt;
    opt.num_ranks = R;
    opt.hpz_partition_size = 1;
    opt.optim = in.optim;
    const MemoryRow row = estimate_memory(mi, opt).at(size_t(l.zero));
    r.params = row.params;
    r.grads = row.grads;
    r.optim = row.optim;
    r.comm = row.comm;
  } else {
    // A stage's own units (docs/parallelism.md "What a stage holds"): gradients and optimizer
    // state per stage; DDP keeps the flat parameter buffer whole, ZeRO-1 the stage's.
    const int64_t Ps = units_params(ml, v.held_units[s]);
    r.params = W * (l.zero == 0 ? local : Ps) + copy;
    r.grads = W * Ps;
    r.optim = int64_t(std::ceil(S * double(l.zero == 0 ? Ps : shard_layout(Ps, R).shard)));
    if (R > 1)
      r.comm = l.zero == 0 ? std::min(W * Ps, 4 * reduce_bucket_elements(0, 0))
                           : std::min(W * Ps, 2 * int64_t(dist::kRingChunkBytes));
  }
  if (l.ep > 1) {  // the dense gradients' all-reduce over the expert group gathers them in one buffer
    const int64_t dense = dense_params(ml, l.pp == 1 ? nullptr : &v.held_units[s]);
    r.comm += W * (l.zero == 0 ? dense : shard_layout(dense, R).shard);
  }
  if (l.pp > 1) {  // the received gradient per slot (the activation lands in the arena's residual)
    const int64_t n = l.sp ? int64_t(l.micro_batch) * T / l.tp : int64_t(l.micro_batch) * T;
    r.comm += int64_t(r.slots) * n * in.cfg.n_embd * W;
  }
}

// The final export (checkpoint/hf_export.h) streams the model to the chief one tensor at a time:
// the chief (stage 0) holds the tensor being written and one other rank's pieces of it, a
// writer its own pieces of one tensor, packed for the send: the largest tensor split over TP
// and, under ZeRO, over the data-parallel shards (fp32 weights, --save_dtype's default).
// DDP without TP: the chief writes its stage's tensors from its own buffers and receives only
// the other stages' (whole, from their writers).
int64_t export_extra_bytes(const PlanLayout& l, const StageView& v, int s, int64_t largest_whole) {
  const ModelLayout& ml = v.ml;
  const int R = l.dp * l.cp;
  const int64_t W = 4;
  const int64_t piece = W * largest_whole / (int64_t(l.tp) * (l.zero >= 1 ? R : 1));
  if (l.zero == 0 && l.tp == 1) {
    int64_t other = 0;  // the largest tensor stage 0 does not hold
    for (size_t u = 0; u < ml.units.size(); ++u)
      if (l.pp > 1 && !v.held_units[0][u])
        for (int p : ml.units[u].params) other = std::max(other, ml.table.list()[size_t(p)].numel);
    return s == 0 ? 2 * W * other : piece;
  }
  return s == 0 ? W * largest_whole + piece : piece;
}

}  // namespace

LayoutMemory layout_memory(const PlanInputs& in, const PlanLayout& l, int64_t runtime_bytes) {
  const StageView v = stage_view(in, l);
  const nn::ActPlan plan = act_plan(in, l);
  const LayerCut cut = plan_cut(in, l);
  const int T = in.seq_len / l.cp;  // a cp rank's rows (the trainer plans the arena so)
  const double S = optim::optimizer_state_bytes_per_param(in.optim);
  const ModelLayout whole = model_layout(in.cfg);
  int64_t largest_whole = 0;
  for (const ParamInfo& p : whole.table.list()) largest_whole = std::max(largest_whole, p.numel);
  LayoutMemory best;
  bool first = true;
  for (int s = 0; s < l.pp; ++s) {
    LayoutMemory r;
    r.stage = s;
    r.slots = stage_slots(l.pp, l.accumulation, s);
    size_t acts = 0, tmp = 0, copy = 0;
    ModelRuntime::planned_bytes(in.cfg, l.micro_batch, T, &acts, &tmp, r.slots, plan, &copy, cut,
                                l.pp > 1 ? &v.held_blocks[s] : nullptr);
    r.activations = int64_t(acts) + expert_side_bytes(in.cfg, l.micro_batch, T, l.ep, l.tp, plan.precision);
    r.temporary = int64_t(tmp);
    r.runtime = runtime_bytes;
    r.cp_ring = cp_ring_bytes(in.cfg, l.micro_batch, in.seq_len, l.cp, l.tp, r.slots);
    stage_state_memory(in, l, v, s, int64_t(copy), S, r);
    r.export_extra = export_extra_bytes(l, v, s, largest_whole);
    if (first || r.total() > best.total()) best = r;
    first = false;
  }
  return best;
}

namespace {
// FLOP/s of one core on GEMMs of r rows.
double gemm_rate(const PlanMachine& m, double r) {
  return std::max(1e-9, m.gemm_gflops_core * m.efficiency * r / (r + m.gemm_half_rows)) * 1e9;
}

// One core's seconds for a stage's FLOPs of a micro-batch (tokens rows; blocks held, and the LM head):
// the dense GEMMs at the micro-batch's rows, the routed experts' at each expert's rows (the K / E share
// of them, times ep: a rank's experts take the rows of its expert group's ranks).
double compute_seconds(const ModelConfig& c, const UnitFlops& f, const PlanLayout& l, const PlanMachine& m,
                       double tokens, int blocks, bool head, double recompute) {
  const double dense = tokens * (blocks * (f.block - f.expert) * recompute + (head ? f.head : 0.0)) / l.tp;
  const double expert = tokens * blocks * f.expert * recompute / l.tp;
  const double expert_rows = c.moe.on() ? tokens * l.ep * c.moe.top_k / c.moe.num_experts : tokens;
  return dense / gemm_rate(m, tokens) + expert / gemm_rate(m, expert_rows);
}
}  // namespace

LayoutTime layout_time(const PlanInputs& in, const PlanLayout& l, const PlanMachine& m) {
  const ModelConfig& c = in.cfg;
  const StageView v = stage_view(in, l);
  // Per-token FLOPs at the whole T (a cp rank's rows attend to all T / 2 earlier keys on average,
  // zigzag balanced), on T / cp tokens per rank: attention's T^2 divided by cp like the rest.
  const UnitFlops f = unit_flops(c, in.seq_len);
  const int P = l.pp, M = l.accumulation, L = c.n_layer;
  LayoutTime t;
  t.threads = m.threads_per_rank();
  // A rank computes on its threads' cores while it runs. With more ranks than cores a host's
  // ranks take turns (a waiting rank gives its core up: ctest dist_wait_cpu): the
  // critical path runs at a whole core, and the host's total work over its cores (each rank's
  // share, cores / ranks) bounds the step from below; a bubble's idle time goes to other ranks.
  const double per_rank = m.cores_per_host / std::max(1, m.ranks_per_host());
  const double share = double(t.threads);
  t.core_share = std::min(per_rank, share);
  const double over = per_rank < 1 ? m.oversubscribed_efficiency : 1.0;
  const int T = in.seq_len / l.cp, R = l.dp * l.cp;
  const double link = std::max(1e-9, m.link_gbps) * 1e9, lat = m.latency_us * 1e-6;
  const double tokens = double(l.micro_batch) * T;  // per micro-batch per rank group
  const double A = 4.0 * tokens * c.n_embd;         // one activation, bytes
  const double r_tp = double(l.tp - 1) / l.tp;
  const double recompute = l.recompute ? 8.0 / 6.0 : 1.0;  // forward again in backward
  const double ring_layer = cp_ring_seconds(c, l.micro_batch, in.seq_len, l.cp, l.tp, l.recompute, m);
  const double ep_layer = ep_exchange_seconds(in, l, tokens, m);
  const int Re = R / l.ep;  // the engine's ranks: those holding the same experts
  double worst_mb = 0, core_seconds = 0, worst_dp = 0, worst_opt = 0, worst_tp = 0, worst_pp = 0, worst_comp = 0,
         worst_cp = 0, worst_ep = 0;
  for (int s = 0; s < P; ++s) {
    int blocks = 0;
    for (int b = 0; b < L; ++b) blocks += v.held_blocks[s][b];
    const double comp = compute_seconds(c, f, l, m, tokens, blocks, s == P - 1, recompute) / share;
    // TP: 4 all-reduces of an activation per block, the embedding's and the LM head input's,
    // each 2 r A bus bytes (SP: reduce-scatter + all-gather, the same bytes).
    const int calls = l.tp > 1 ? 4 * blocks + (s == 0) + (s == P - 1 ? 3 : 0) : 0;
    const double tp_s = l.tp > 1 ? calls * lat + (4.0 * blocks + (s == 0) + (s == P - 1)) * 2 * r_tp * A / link : 0.0;
    // PP: the activation forward and its gradient back across each boundary of the stage.
    const int cross = (s > 0) + (s < P - 1);
    const double pp_s = cross * (lat + (l.sp ? A / l.tp : A) / link);
    // CP: each block's ring, exposed (the kernels overlap part of it; not modelled).
    const double cp_s = blocks * ring_layer;
    const double ep_s = blocks * ep_layer;  // EP: each MoE layer's exchanges
    const double mb = comp + tp_s + pp_s + cp_s + ep_s;
    const int64_t Ps = units_params(v.ml, v.held_units[s]);
    const double dp_s = dp_reduce_seconds(l, v.ml, v.held_units[s], Ps, M, link, lat);
    // AdamW: about 28 bytes read and written per updated parameter, memory bound.
    const double updated = l.zero >= 1 ? double(Ps) / Re : double(Ps);
    const double opt_s = updated * 28.0 / (std::max(1e-9, m.mem_gbps) * 1e9 * share);
    if (mb > worst_mb) {
      worst_mb = mb;
      worst_comp = comp;
      worst_tp = tp_s;
      worst_pp = pp_s;
      worst_cp = cp_s;
      worst_ep = ep_s;
    }
    worst_dp = std::max(worst_dp, dp_s);
    worst_opt = std::max(worst_opt, opt_s);
    // Work this stage's ranks put on their host's cores, in core-seconds (communication copies
    // through shared memory included).
    core_seconds += double(R * l.tp) * (M * (comp * share + tp_s + pp_s + cp_s + ep_s) + dp_s + opt_s * share);
  }
  t.compute_s = worst_comp * M;
  t.tp_comm_s = worst_tp * M;
  t.pp_comm_s = worst_pp * M;
  t.cp_comm_s = worst_cp * M;
  t.ep_comm_s = worst_ep * M;
  t.dp_comm_s = worst_dp;
  t.optimizer_s = worst_opt;
  t.bubble = P > 1 ? double(P - 1) / (M + P - 1) : 0.0;
  t.critical_s = worst_mb * (M + P - 1) + worst_dp + worst_opt;
  t.cpu_bound_s = core_seconds / std::max(1, m.nodes) / std::max(1e-9, m.cores_per_host) / over;
  t.step_s = std::max(t.critical_s, t.cpu_bound_s);
  return t;
}

namespace {
// The process grids of N ranks under the constraints: tp x pp x cp x dp = N, and for a model with
// experts ep dividing dp x cp (layout_refusal judges what the model and the trainer accept).
std::vector<PlanLayout> plan_grids(int N, const PlanConstraints& cons, bool experts) {
  auto pin = [](int want, int v) { return want < 0 || want == v; };
  std::vector<PlanLayout> grids;
  for (int tp = 1; tp <= N; ++tp) {
    if (N % tp || !pin(cons.tp, tp)) continue;
    for (int pp = 1; pp <= N / tp; ++pp) {
      if ((N / tp) % pp || !pin(cons.pp, pp)) continue;
      for (int cp = 1; cp <= N / (tp * pp); ++cp) {
        if ((N / (tp * pp)) % cp || !pin(cons.cp, cp)) continue;
        const int dp = N / (tp * pp * cp);
        for (int ep = 1; ep <= (experts ? dp * cp : 1); ++ep) {
          if ((dp * cp) % ep || !pin(cons.ep, ep)) continue;
          PlanLayout g;
          g.dp = dp, g.tp = tp, g.pp = pp, g.cp = cp, g.ep = ep;
          grids.push_back(g);
        }
      }
    }
  }
  return grids;
}
}  // namespace

void check_plan_request(const PlanInputs& in, const PlanMachine& m) {
  ZT_CHECK(m.nproc >= 1, "--nproc must be at least 1, got ", m.nproc);
  ZT_CHECK(m.nodes >= 1 && m.nproc % m.nodes == 0, "--nnodes ", m.nodes, " does not divide --nproc ", m.nproc,
           "; every host runs the same number of ranks");
  ZT_CHECK(in.seq_len >= 1 && in.seq_len <= in.cfg.max_position, "--model_max_length ", in.seq_len,
           " is outside the model's context of 1..", in.cfg.max_position, " positions");
  ZT_CHECK(in.global_batch >= 1, "--global_batch must be at least 1, got ", in.global_batch);
  ZT_CHECK(m.cores_per_host > 0 && m.gemm_gflops_core > 0 && m.efficiency > 0 && m.link_gbps > 0 && m.mem_gbps > 0 &&
               m.gemm_half_rows >= 0 && m.oversubscribed_efficiency > 0,
           "the machine's cores, GEMM, link and memory speeds must be positive");
}

std::vector<PlanRow> plan_layouts(const PlanInputs& in, const PlanMachine& m, const PlanConstraints& cons) {
  check_plan_request(in, m);
  const int N = m.nproc;
  ZT_CHECK(cons.tp < 0 || N % cons.tp == 0, "--tensor-model-parallel-size ", cons.tp, " does not divide the ", N,
           " ranks");
  ZT_CHECK(cons.pp < 0 || N % cons.pp == 0, "--pipeline-model-parallel-size ", cons.pp, " does not divide the ", N,
           " ranks");
  ZT_CHECK(cons.cp < 0 || N % cons.cp == 0, "--context-parallel-size ", cons.cp, " does not divide the ", N, " ranks");
  ZT_CHECK(N % (std::max(1, cons.tp) * std::max(1, cons.pp) * std::max(1, cons.cp)) == 0,
           "the pinned tensor x pipeline x context parallel sizes do not divide the ", N, " ranks");
  ZT_CHECK(cons.ep <= 1 || in.cfg.moe.on(), "--expert-model-parallel-size applies to mixture-of-experts models; ",
           in.cfg.model_type, " has no experts");
  ZT_CHECK(cons.ep <= 1 || N % cons.ep == 0, "--expert-model-parallel-size ", cons.ep, " does not divide the ", N,
           " ranks");
  std::vector<PlanRow> rows;
  std::string refused;  // the first refusal, for the error when nothing runs
  int dp_divides = 0;
  auto pin = [](int want, int v) { return want < 0 || want == v; };
  for (const PlanLayout& g : plan_grids(N, cons, in.cfg.moe.on())) {
    if (in.global_batch % g.dp) continue;
    ++dp_divides;
    const int64_t per_dp = in.global_batch / g.dp;
    const std::vector<int64_t> micro_batches = divisors_up_to(per_dp, int64_t(1) << 20);
    for (int zero = 0; zero <= 3; ++zero) {
      // Nothing to shard with one engine rank (the dp x cp ranks holding the same experts).
      if (!pin(cons.zero, zero) || (cons.zero < 0 && g.dp * g.cp / g.ep == 1 && zero > 0)) continue;
      for (int sp = 0; sp <= (g.tp > 1 ? 1 : 0); ++sp) {
        if (!pin(cons.sp, sp) && !(cons.sp == 0 && sp == 0)) continue;
        for (int rc = 0; rc <= 1; ++rc) {
          if (!pin(cons.recompute, rc)) continue;
          for (int64_t B : micro_batches) {
            if (!pin(cons.micro_batch, int(B))) continue;
            PlanLayout l{g.dp, g.tp, g.pp, sp == 1, zero, int(B), int(per_dp / B), rc == 1, g.cp, g.ep};
            const std::string why = layout_refusal(in, l, N);
            if (!why.empty()) {
              if (refused.empty()) refused = l.name() + ": " + why;
              continue;
            }
            PlanRow row;
            row.layout = l;
            row.memory = layout_memory(in, l, m.runtime_bytes);
            row.time = layout_time(in, l, m);
            row.tokens_per_s = double(in.global_batch) * in.seq_len / row.time.step_s;
            row.fits = m.memory_per_rank < 0 || row.memory.total() <= m.memory_per_rank;
            rows.push_back(row);
          }
        }
      }
    }
  }
  ZT_CHECK(dp_divides > 0, "no data-parallel degree of ", N, " ranks divides the global batch of ", in.global_batch,
           " sequences; make the batch a multiple of the data-parallel ranks");
  ZT_CHECK(!rows.empty(), "no layout of ", N, " ranks can run this model",
           refused.empty() ? "" : " (e.g. " + refused + ")", "; change --nproc or the pinned flags");
  std::stable_sort(rows.begin(), rows.end(), [](const PlanRow& a, const PlanRow& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.time.step_s != b.time.step_s) return a.time.step_s < b.time.step_s;
    return a.memory.total() < b.memory.total();
  });
  for (PlanRow& r : rows) {
    const LayoutTime& t = r.time;
    std::string s = t.core_share < 1
                        ? str_cat(fixed(t.core_share, 2), " core/rank; compute ", fixed(t.compute_s, 2), " s")
                        : str_cat(t.threads, " thread(s)/rank; compute ", fixed(t.compute_s, 2), " s");
    if (t.bubble > 0) s += str_cat(", bubble ", fixed(100 * t.bubble, 0), "%");
    if (t.tp_comm_s > 0) s += str_cat(", tp all-reduce ", fixed(t.tp_comm_s, 2), " s");
    if (t.pp_comm_s > 0) s += str_cat(", pp sends ", fixed(t.pp_comm_s, 2), " s");
    if (t.cp_comm_s > 0) s += str_cat(", cp ring ", fixed(t.cp_comm_s, 2), " s");
    if (t.ep_comm_s > 0) s += str_cat(", ep all-to-all ", fixed(t.ep_comm_s, 2), " s");
    if (t.dp_comm_s > 0) s += str_cat(", dp reduce ", fixed(t.dp_comm_s, 2), " s");
    s += str_cat(", update ", fixed(t.optimizer_s, 2), " s");
    if (t.cpu_bound_s >= t.critical_s) s += "; bound by the host's cores";
    if (r.layout.recompute) s += "; recompute +33% block FLOPs";
    if (!r.fits) s += str_cat("; needs ", format_bytes(double(r.memory.total())), " > the limit");
    r.reason = s;
  }
  return rows;
}

void check_model_parallel_memory(const ModelConfig& cfg, int T, const PlanLayout& l, nn::Precision precision,
                                 const std::string& optim, int64_t limit) {
  PlanInputs in;
  in.cfg = cfg;
  in.seq_len = T;
  in.precision = precision;
  in.optim = optim;
  const LayoutMemory m = layout_memory(in, l, 0);
  const std::string breakdown = str_cat(
      l.name(), ", the largest rank (stage ", m.stage, "): parameters ", format_bytes(double(m.params)), ", gradients ",
      format_bytes(double(m.grads)), ", optimizer state ", format_bytes(double(m.optim)), ", activations ",
      format_bytes(double(m.activations + m.temporary)), ", export ", format_bytes(double(m.export_extra)),
      m.cp_ring > 0 ? ", cp ring " + format_bytes(double(m.cp_ring)) : "");
  check_memory_fits(
      m.total(), ranks_on_this_host(), "training this model", breakdown,
      "use more tensor, pipeline or context parallel ranks, a smaller --per_device_train_batch_size (more "
      "accumulation), --gradient_checkpointing or --bf16 (ztrain plan compares the layouts)",
      limit, "--max_memory");
}

}  // namespace zt::parallel
