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
void checkpoint_save(const std::string& output_dir, int64_t step, const Transformer& model,
                     const optim::AdamW& opt, const nlohmann::json& trainer_state);

// Verifies checksums (Error naming the damaged file), then loads model and optimizer
// state; returns trainer_state.json.
nlohmann::json checkpoint_load(const std::string& dir, Transformer& model, optim::AdamW& opt);

}  // namespace zt
