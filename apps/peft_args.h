// peft_args.h: the LoRA flags (TRL's / PEFT's names) resolved into the model config's LoraSpec.
#pragma once
#include <string>
#include <vector>

#include "models/config.h"
#include "train_args.h"

namespace zt {

// Splits PEFT's target_modules as a flag gives them: commas and/or spaces.
std::vector<std::string> split_modules(const std::string& text);
// The PEFT flags' checks that need no model (before the layout's): refused combinations (QDoRA,
// IA3 or DoRA under tensor parallelism), --lora_r 0, a LoRA flag without --use_peft.
void check_peft_flags(const TrainArgs& a);
// cfg.lora from --use_peft / --lora_* / --adapter_name_or_path (whose adapter_config.json sets
// them; a flag given that disagrees with it is an error naming both); an unknown target, or an
// adapter whose tensors do not fit the base, is an error here.
void apply_peft_args(const TrainArgs& a, ModelConfig& cfg);

}  // namespace zt
