// trainer_parts.h: the trainer's pieces shared by its files (trainer.cpp: set-up and the
// step loop; trainer_report.cpp: the data-parallel report). Not a public API.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "models/config.h"
#include "nn/block.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "train/evaluate.h"
#include "train/train_args.h"

namespace zt {

// Model-state bytes per rank by the ZeRO paper for a sharding group of `group` ranks.
nlohmann::json zero_paper_bytes(int64_t psi, int stage, int group, double optim_bytes_per_param);
// Per-step communication of the engine: measured counters by collective, and the theory.
nlohmann::json comm_report(const parallel::DataParallel& dp, int64_t steps, int accumulation);
void print_dp_report(const nlohmann::json& report, const nlohmann::json& model_states);

// Context parallelism (trainer_cp.cpp): --context-parallel-size against the world, the sequence
// length T and what does not compose with it yet (one error line each); the cp group's bytes per
// step, measured and by the ring formula for this rank's layers (held_layers: a pipeline stage's,
// empty = all; docs/parallelism-cp.md).
void check_cp_args(const TrainArgs& a, int world, int T, const ModelConfig& cfg);
// Evaluation under context parallelism: batches cut to this rank's chunks, sums over the cp group.
EvalShard cp_eval_shard(parallel::ContextParallel& cp, dist::Communicator& comm, int B);
nlohmann::json cp_report(const dist::Communicator& cp, int64_t steps, int B, int T, int accumulation,
                         const ModelConfig& cfg, const nn::ActPlan& plan, const std::vector<char>& held_layers, int tp);

}  // namespace zt
