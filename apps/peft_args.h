// peft_args.h: the LoRA flags (TRL's / PEFT's names) resolved into the model config's LoraSpec.
#pragma once
#include <string>
#include <vector>

#include "models/config.h"
#include "train_args.h"

namespace zt {

// Splits PEFT's target_modules as a flag gives them: commas and/or spaces.
std::vector<std::string> split_modules(const std::string& text);
// cfg.lora from --use_peft / --lora_* / --adapter_name_or_path (whose adapter_config.json sets
// them; a flag given that disagrees with it is an error naming both); refused combinations
// (DoRA, IA3, tensor / pipeline / context parallelism, an unknown target) are errors here.
void apply_peft_args(const TrainArgs& a, ModelConfig& cfg);

}  // namespace zt
