// precision.h: what the mixed-precision and recomputation arguments mean for the model
// (nn::ActPlan), checked against the model once its config is known.
#pragma once
#include "models/config.h"
#include "nn/block.h"
#include "train_args.h"

namespace zt {

// The plan for --bf16 / --fp16 / --gradient_checkpointing / --recompute-granularity /
// --recompute-num-layers (after a DeepSpeed config has filled them). Bad combinations
// throw zt::Error with one line naming them.
nn::ActPlan act_plan_from_args(const TrainArgs& a, const ModelConfig& cfg);

// The dtype gradients are reduced in: DeepSpeed's communication_data_type ("fp32", "bf16",
// "fp16"), or when absent DeepSpeed's default, the training dtype (bf16 under --bf16, fp16
// under --fp16, else fp32).
DType comm_dtype_from_args(const TrainArgs& a);

}  // namespace zt
