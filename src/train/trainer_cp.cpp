// trainer_cp.cpp: the trainer's context-parallel pieces (parallel/context_parallel.h;
// docs/parallelism-cp.md): the flag's checks against the world, the sequence and the
// features it does not compose with yet, and the cp group's traffic for train_results.json.
#include <algorithm>

#include "core/error.h"
#include "parallel/context_parallel.h"
#include "train/trainer_parts.h"

namespace zt {

void check_cp_args(const TrainArgs& a, int world, int T, const ModelConfig& cfg) {
  const int cp = a.context_parallel_size;
  if (cp == 1) return;
  const int model_ranks = cp * a.tensor_model_parallel_size * a.pipeline_parallel_size;
  ZT_CHECK(world % model_ranks == 0, "--context-parallel-size ", cp, " does not divide the ", world, " ranks",
           model_ranks == cp ? "" : " (with tensor / pipeline parallelism)", "; the ranks must be a multiple of it");
  parallel::check_cp_composes(T, cp, a.packing, cfg.sliding_window, !a.validation_file.empty(),
                              a.pipeline_parallel_size);
  // A rank's table covers its T / cp rows; longrope picks its factors by the whole sequence.
  ZT_CHECK(cfg.rope.type != "longrope", "--context-parallel-size ", cp,
           " does not compose with rope_scaling longrope yet (its factors follow the whole sequence's length)");
  // Context parallel attention runs causal over whole rows at the default scale.
  ZT_CHECK(cfg.sliding_layers.empty() && cfg.attn_scale == 0.f, "--context-parallel-size ", cp,
           " does not compose with ", cfg.model_type, " yet (sliding-window layers, its attention scale)");
  ZT_CHECK(a.zero_hpz_partition_size <= 1 && a.local_sgd_steps == 0, "--context-parallel-size ", cp,
           " does not compose with --zero_hpz_partition_size or --local_sgd_steps yet");
  ZT_CHECK(a.max_memory.empty() && !a.auto_find_batch_size, "--context-parallel-size ", cp,
           ": --max_memory / --auto_find_batch_size do not model context parallelism yet; set the batch yourself");
}

EvalShard cp_eval_shard(parallel::ContextParallel& cp, dist::Communicator& comm, int B) {
  EvalShard e;
  e.shard = [&cp, B](const int32_t** in, const int32_t** tg, const int32_t** pos) {
    ZT_CHECK(!*pos, "--context-parallel-size does not support packed rows (position ids) yet");
    const parallel::ContextParallel::Shard s = cp.shard(*in, *tg, B);
    *in = s.inputs, *tg = s.targets, *pos = s.positions;
  };
  e.reduce = [&comm](double* v) { comm.all_reduce(v, 2); };
  return e;
}

nlohmann::json cp_report(const dist::Communicator& cp, int64_t steps, int B, int T, int accumulation,
                         const ModelConfig& cfg, const nn::ActPlan& plan, const std::vector<char>& held, int tp) {
  const dist::CommStats st = cp.stats();
  const double sent = st[dist::Collective::send].bytes / double(steps);
  const double recv = st[dist::Collective::recv].bytes / double(steps);
  // A layer's ring moves 3 K / V-sized blocks per step of the ring (forward K / V, backward
  // K / V and dK / dV); a recomputed layer reruns its forward ring in backward: a fourth. Only
  // this rank's layers count (a pipeline stage's), and under tensor parallelism its own KV heads
  // travel (one when TP exceeds them).
  int layers = 0, recomputed = 0;
  for (int l = 0; l < cfg.n_layer; ++l)
    if (held.empty() || held[l]) ++layers, recomputed += plan.of(l) != nn::Recompute::none;
  const int kv_heads = std::max(1, cfg.n_kv_head / tp);
  const double block = parallel::ContextParallel::ring_bytes_per_layer(B, T, cp.size(), kv_heads, cfg.head_size) / 3;
  const double formula = block * (3.0 * layers + recomputed) * accumulation;
  return {{"size", cp.size()},
          {"sent_bytes_per_step", sent},
          {"received_bytes_per_step", recv},
          {"formula_bytes_per_step", formula},
          {"send_seconds_per_step", st[dist::Collective::send].seconds / double(steps)},
          {"wait_seconds_per_step",
           (st[dist::Collective::send].wait_seconds + st[dist::Collective::recv].wait_seconds) / double(steps)}};
}

}  // namespace zt
