// dp_report.h: what a data-parallel run reports at its end (train_results.json's
// "data_parallel" and the printed summary; dp_report.cpp).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "parallel/data_parallel.h"

namespace zt::parallel {

// Model-state bytes per rank by the ZeRO paper for a sharding group of `group` ranks.
nlohmann::json zero_paper_bytes(int64_t psi, int stage, int group, double optim_bytes_per_param);
// Per-step communication of the engine: measured counters by collective, and the theory.
nlohmann::json comm_report(const DataParallel& dp, int64_t steps, int accumulation);
void print_dp_report(const nlohmann::json& report, const nlohmann::json& model_states);
// Offload to disk's line (the engine's describe()["offload_nvme"]): bytes per step and bandwidth.
void print_offload_report(const nlohmann::json& offload);

}  // namespace zt::parallel
