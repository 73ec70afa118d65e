// deepspeed_config.h: reads a DeepSpeed JSON config (HF Trainer's --deepspeed) into TrainArgs
// the way HF's integration does (transformers/integrations/deepspeed.py,
// HfTrainerDeepSpeedConfig): "auto" values take the flags, a value that contradicts a flag given
// on the command line is an error listing every such pair, and DeepSpeed's batch identity
// train_batch_size = micro x accumulation x world size is enforced. Unlike HF, an explicit
// DeepSpeed value silently replaces a flag's *default* (HF compares against defaults too).
// Keys ztrain does not act on are warned about by name; keys of the wrong JSON type are errors.
// docs/deepspeed.md lists every key. The fp16 / bf16 / communication_data_type /
// activation_checkpointing sections are parsed into TrainArgs::ds_precision for the trainer.
// Not here: the ZeRO engine (src/parallel), the precision itself, optimizers other than Adam/AdamW.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "train_args.h"

namespace zt {

// Applies the config at a.deepspeed (no-op when empty) for world_size data-parallel ranks.
// Prints each warning as one "warning: ..." line on stderr when print_warnings (pass false on
// ranks other than 0). Throws zt::Error for unreadable files, bad types and conflicts.
void apply_deepspeed_config(TrainArgs& a, int world_size, bool print_warnings = true);

// The same for an already-parsed config; returns the warnings (without "warning: ").
std::vector<std::string> apply_deepspeed_json(TrainArgs& a, int world_size, const nlohmann::json& cfg);

}  // namespace zt
