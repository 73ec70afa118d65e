// run_identity.h: what the ranks of one job must agree on, checked at start-up as the job's
// first collective: the resolved arguments (flags after the DeepSpeed config), the resolved
// model config and the identity (size, hash of the first MiB) of the input files. Ranks that
// disagreed once corrupted the heap (another n_layer) or trained silently (another
// --learning_rate, --seed or train file on one host).
// Legitimately per rank, so not compared: --threads and --dataloader_prefetch (speed, not
// results), and the paths of input files (a host may hold its copy elsewhere; their contents
// are compared instead). Everything else must be equal.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "data/file_identity.h"
#include "dist/communicator.h"
#include "models/config.h"
#include "train_args.h"

namespace zt {

// Every compared setting of a, by flag name.
nlohmann::json train_args_json(const TrainArgs& a);

// {"args": ..., "model": config_resolved_json, "data": {flag: FileIdentity json or null}}.
nlohmann::json job_identity(const TrainArgs& a, const ModelConfig& cfg, const FileIdentity& train_file);

// All-gathers a hash of identity; when some rank's differs, every rank throws the same
// JobError naming the first difference of the lowest such rank with rank 0, e.g. "rank 1
// disagrees with rank 0 on --learning_rate: rank 0 has 5e-05, rank 1 has 0.0005; ...".
void check_ranks_agree(dist::Communicator& world, const nlohmann::json& identity);

}  // namespace zt
