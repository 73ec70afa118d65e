// hf_export.h: the run's final HF model folder, written by the chief while no rank holds more than
// its own state and one tensor in flight. The ranks that write checkpoint pieces send the pieces of
// their parameters (the checkpoint's "params" slot: global tensor names and element ranges, so any
// layout of DP / ZeRO stage / TP / PP / CP) to the chief tensor by tensor, in the order the weight files are written
// (hf_shard_plan), and the chief writes each tensor as its pieces arrive (hf_save_tensors with fill()). It deliberately
// is not a checkpoint (no optimizer state, no atomic folder swap beyond each file's).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/state.h"
#include "core/tensor.h"
#include "dist/communicator.h"
#include "models/config.h"

namespace zt {

// A collective over `world` (the chief is its rank 0). `params`: this rank's parameter state as
// checkpoints see it (the engine's param_state(), wrapped by the TP adapter under tensor
// parallelism); `writer`: whether this rank writes checkpoint pieces (its StateShard index >= 0).
// Every element of every tensor must come from some writer: a gap is an error naming the tensor.
// LoRA (cfg.lora): the folder gets the adapters in PEFT's format instead (checkpoint/peft_files.h),
// naming peft_base as their base model.
void hf_export_streamed(dist::Communicator& world, const std::vector<Stateful*>& params, bool writer,
                        const ModelConfig& cfg, const std::string& folder, DType dtype, int64_t max_shard_bytes,
                        const std::string& peft_base = "");

}  // namespace zt
