// checkpoint.h: HF-style training checkpoints (`checkpoint-N/` folders) that resume
// exactly. A checkpoint holds model.safetensors + config.json (fp32), optimizer.safetensors
// (AdamW moments per parameter name, step count in the metadata), trainer_state.json
// (HF's fields plus ztrain's resume state: data cursor, running loss sum, RNG seed),
// and checksums.json (a hash and size per file), written last.
// Atomicity: everything goes into `checkpoint-N.tmp/`, each file fsynced, then one
// rename makes the folder appear whole; a crash or kill -9 mid-save leaves only a .tmp
// folder, which loading ignores and the next save removes. Loading verifies every
// checksum and names the damaged file; `latest` falls back to the newest intact one.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_meta.h"
#include "models/transformer.h"
#include "optim/adamw.h"

namespace zt {

// Writes output_dir/checkpoint-<step>/ atomically.
void checkpoint_save(const std::string& output_dir, int64_t step, const Transformer& model, const optim::AdamW& opt,
                     const nlohmann::json& trainer_state);

// Verifies checksums (Error naming the damaged file), then loads model and optimizer
// state into the flat buffers of model and opt (either format below); returns
// trainer_state.json.
nlohmann::json checkpoint_load(const std::string& dir, Transformer& model, optim::AdamW& opt);

// Sharded checkpoints (ZeRO stages): instead of model.safetensors + optimizer.safetensors,
// each shard owner writes zero_shard-SSSSS-of-NNNNN.safetensors holding its pieces of the
// parameters and both AdamW moments as 1-D tensors named "<kind>.<param name>.<first
// element>" (kind: params, exp_avg, exp_avg_sq). Pieces are named by parameter, not by the
// writer's bucket layout, so checkpoint_load assembles them for any number of ranks and
// any stage (resharding), and a single process can load them too.
// Protocol (the caller synchronises the ranks): rank 0 calls checkpoint_sharded_begin;
// barrier; every shard owner calls checkpoint_write_shard; barrier; rank 0 calls
// checkpoint_sharded_finish (config.json, trainer_state.json, checksums.json of every file,
// then the atomic rename).
struct CheckpointPiece {
  int param = 0;                 // index into ParamTable::list()
  int64_t begin = 0, count = 0;  // elements of that parameter
  const float *params = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;
};
std::string checkpoint_tmp_dir(const std::string& output_dir, int64_t step);
void checkpoint_sharded_begin(const std::string& output_dir, int64_t step);
void checkpoint_write_shard(const std::string& output_dir, int64_t step, const Transformer& model, int shard,
                            int num_shards, const std::vector<CheckpointPiece>& pieces, int64_t opt_steps);
void checkpoint_sharded_finish(const std::string& output_dir, int64_t step, const Transformer& model,
                               const nlohmann::json& trainer_state);

}  // namespace zt
