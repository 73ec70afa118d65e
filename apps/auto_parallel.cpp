// auto_parallel.cpp: see auto_parallel.h.
#include "auto_parallel.h"

#include <cstdio>

#include "core/error.h"
#include "core/memory.h"
#include "models/config.h"
#include "plan/memory_fit.h"
#include "plan/planner.h"
#include "auto_fit.h"
#include "precision.h"

namespace zt {

namespace {

// The layout as integers for the broadcast; status < 0: rank 0 found none.
struct Choice {
  int status = 0, dp = 1, tp = 1, pp = 1, cp = 1, sp = 0, zero = 0, micro = 1, accumulation = 1, recompute = 0,
      threads = 1, ep = 1;
};

// What --auto_parallel refuses beside it: the flags that choose what it plans.
void check_auto_parallel_flags(const TrainArgs& a) {
  auto given = [&](const char* f) { return a.explicit_flags.count(f) > 0; };
  ZT_CHECK(a.deepspeed.empty(),
           "--auto_parallel chooses the ZeRO stage and batch itself; drop --deepspeed (or "
           "--auto_parallel and set the layout in the config)");
  ZT_CHECK(!a.auto_find_batch_size,
           "--auto_parallel chooses the micro-batch itself (within --max_memory); drop "
           "--auto_find_batch_size");
  ZT_CHECK(a.local_sgd_steps == 0, "--auto_parallel plans synchronous layouts; drop --local_sgd_steps");
  for (const char* f : {"num-layers-per-virtual-pipeline-stage", "pipeline_layers", "pipeline_schedule",
                        "recompute-num-layers", "zero_hpz_partition_size"})
    ZT_CHECK(!given(f), "--", f,
             " is not planned by --auto_parallel (1F1B, balanced cuts, whole-model "
             "recomputation, flat ZeRO); drop it or drop --auto_parallel and give the layout yourself");
  ZT_CHECK(!given("recompute-granularity") || a.recompute_granularity == "full",
           "--auto_parallel plans full recomputation or none; --recompute-granularity ", a.recompute_granularity,
           " is not among them");
}

// The planner's inputs (the model, the batch, the precision) and the constraints the given flags
// set (a flag given fixes its dimension), and the machine as the planner models it.
void plan_inputs(const TrainArgs& a, int N, parallel::PlanInputs* in_out, parallel::PlanConstraints* c_out,
                 parallel::PlanMachine* m_out) {
  auto given = [&](const char* f) { return a.explicit_flags.count(f) > 0; };
  parallel::PlanInputs& in = *in_out;
  parallel::PlanConstraints& c = *c_out;
  parallel::PlanMachine& m = *m_out;
  const ModelConfig cfg =
      config_from_file(a.model_config_path.empty() ? a.model_name_or_path + "/config.json" : a.model_config_path);
  in.cfg = cfg;
  in.seq_len = a.model_max_length > 0 ? a.model_max_length : std::min(1024, cfg.max_position);
  in.global_batch = a.train_batch_size > 0 ? a.train_batch_size
                                           : int64_t(a.per_device_train_batch_size) * a.gradient_accumulation_steps * N;
  in.precision = act_plan_from_args(a, cfg).precision;
  in.optim = a.optim;
  in.packing = a.packing;
  in.validation = !a.validation_file.empty();
  if (given("tensor-model-parallel-size")) c.tp = a.tensor_model_parallel_size;
  if (given("pipeline-model-parallel-size")) c.pp = a.pipeline_parallel_size;
  if (given("context-parallel-size")) c.cp = a.context_parallel_size;
  if (given("expert-model-parallel-size")) c.ep = a.expert_model_parallel_size;
  if (given("zero_stage")) c.zero = a.zero_stage;
  if (given("sequence-parallel")) c.sp = a.sequence_parallel ? 1 : 0;
  if (given("gradient_checkpointing") || given("recompute-granularity"))
    c.recompute = a.gradient_checkpointing || a.recompute_granularity == "full" ? 1 : 0;
  m.nproc = N;
  const int local = parallel::ranks_on_this_host();
  m.nodes = N % local == 0 ? N / local : 1;
  m.cores_per_host = available_cores();
  m.gemm_gflops_core = parallel::kDefaultGemmGflopsCore;
  m.gemm_half_rows = parallel::kDefaultGemmHalfRows;
  m.efficiency = parallel::kDefaultEfficiency;
  m.link_gbps = parallel::kDefaultLinkGbps;
  m.mem_gbps = parallel::kDefaultMemGbps;
  m.oversubscribed_efficiency = parallel::kDefaultOversubscribedEfficiency;
  m.runtime_bytes = parallel::kDefaultRuntimeBytes;
}

// The chosen layout into the arguments, as if given.
void apply_choice(const Choice& ch, TrainArgs& a) {
  auto given = [&](const char* f) { return a.explicit_flags.count(f) > 0; };
  a.tensor_model_parallel_size = ch.tp;
  a.sequence_parallel = ch.sp != 0;
  a.pipeline_parallel_size = ch.pp;
  a.context_parallel_size = ch.cp;
  a.expert_model_parallel_size = ch.ep;
  a.zero_stage = ch.zero;
  a.per_device_train_batch_size = ch.micro;
  a.gradient_accumulation_steps = ch.accumulation;
  if (ch.recompute && a.recompute_granularity.empty()) a.gradient_checkpointing = true;
  if (!given("threads")) a.threads = ch.threads;
  // The planner has checked --max_memory for the layout, tensor, pipeline and context parallelism
  // included; the trainer's own check models data parallelism only (it refuses TP and CP with it).
  if ((ch.tp > 1 || ch.pp > 1 || ch.cp > 1 || ch.ep > 1) && !a.max_memory.empty()) a.max_memory.clear();
}

}  // namespace

std::string apply_auto_parallel(TrainArgs& a, dist::Communicator& world) {
  check_auto_parallel_flags(a);
  const int N = world.size();
  parallel::PlanInputs in;
  parallel::PlanConstraints c;
  parallel::PlanMachine m;
  plan_inputs(a, N, &in, &c, &m);
  Choice ch;
  std::string error, line;
  if (world.rank() == 0) {
    try {
      std::string source;
      m.memory_per_rank = memory_limit_per_rank(a, &source);
      const std::vector<parallel::PlanRow> rows = parallel::plan_layouts(in, m, c);
      const parallel::PlanRow& best = rows.front();
      ZT_CHECK(
          best.fits, "--auto_parallel: no layout of ", N, " ranks fits ", format_bytes(double(m.memory_per_rank)),
          " per rank (", source, "); the smallest needs ",
          format_bytes(double(std::min_element(rows.begin(), rows.end(),
                                               [](auto& x, auto& y) { return x.memory.total() < y.memory.total(); })
                                  ->memory.total())),
          "; use more ranks, --bf16 or a shorter --model_max_length");
      const parallel::PlanLayout& l = best.layout;
      ch = {0,   l.dp, l.tp, l.pp, l.cp, l.sp, l.zero, l.micro_batch, l.accumulation, l.recompute, best.time.threads,
            l.ep};
      line = str_cat("auto_parallel: ", N, " ranks -> ", l.name(), " (", l.flags(), " --threads ", best.time.threads,
                     "); predicted ", format_bytes(double(best.memory.total())), " per rank, ",
                     str_cat(int64_t(best.time.step_s * 1000)), " ms per step, global batch ", in.global_batch, " x ",
                     in.seq_len, " tokens (ztrain plan lists the alternatives)");
    } catch (const Error& e) {
      ch.status = -1;
      error = e.what();
    }
  }
  world.broadcast(&ch, sizeof ch, 0);
  if (ch.status < 0) {
    if (world.rank() == 0) throw Error(error);
    throw Error("--auto_parallel: rank 0 found no layout (its error names why)");
  }
  apply_choice(ch, a);
  return line;
}

}  // namespace zt
