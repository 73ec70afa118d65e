// deepspeed_offload.h: the keys of DeepSpeed's zero_optimization.offload_optimizer /
// offload_param sections besides `device` (deepspeed_config.cpp reads that), and the top-level
// `aio` block, into TrainArgs (docs/deepspeed.md#offload-to-disk). Each key is honoured or
// refused with one line naming it; shared by deepspeed_config.cpp, not an API.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train_args.h"

namespace zt::ds_offload {

// section: "zero_optimization.offload_optimizer" or "...offload_param". A key that contradicts a
// flag given on the command line adds HF's mismatch line to *mismatches.
void read_offload_keys(TrainArgs& a, const std::string& section, const nlohmann::json& v, bool param,
                       std::vector<std::string>* mismatches);
void read_aio(TrainArgs& a, const nlohmann::json& v);

}  // namespace zt::ds_offload
