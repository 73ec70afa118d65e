// train_args_check.h: the checks `ztrain train`'s arguments pass before any work (HF's strategy
// rules, flags that need another, value ranges the flag parser cannot see), and the inputs the
// command reads (which --overwrite_output_dir must never delete). apps/train_config_build.cpp runs
// them while it resolves the arguments into the library's TrainConfig.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "dist/parallel_dims.h"
#include "models/config.h"
#include "nn/block.h"
#include "parallel/pipeline_schedule.h"
#include "train_args.h"

namespace zt {

// --resume_allow_changes: which differences from the checkpoint a resume accepts.
struct AllowedChanges {
  bool model = false, data = false;
};
AllowedChanges allowed_changes(const std::string& list);

// Throws a one-line zt::Error naming the flag on the first problem.
void check_args(const TrainArgs& a);
// --context-parallel-size against the world, the sequence length T and what does not compose
// with it yet (one error line each).
void check_cp_args(const TrainArgs& a, int world, int T);
// The layout's flags against the world (one error line each): tensor / sequence parallelism,
// the pipeline (returns its schedule); local SGD's groups (by host unless given; a collective);
// the process grid they make.
void check_tp_args(const TrainArgs& a, int world);
parallel::PipeSchedule check_pipeline_args(const TrainArgs& a, int world, const ModelConfig& cfg);
int local_sgd_group(dist::Communicator& world, int given);
dist::ParallelDims grid_dims(const TrainArgs& a, int world);
// Mixture-of-experts models: the MoE flags into the config (refused for a dense model), and what
// does not compose with the experts yet (tensor, context and pipeline parallelism): one error line
// each.
void apply_moe_args(const TrainArgs& a, ModelConfig* cfg);
// Every file or folder the command reads, with the flag that names it.
std::vector<std::pair<std::string, std::string>> input_paths(const TrainArgs& a);

}  // namespace zt
