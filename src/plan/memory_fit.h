// memory_fit.h: "will it fit?" before anything large is allocated. The need comes from the
// memory estimator (memory_estimate.h, the same numbers `ztrain estimate-memory` prints) and
// is compared with what the machine can still give (MemAvailable, or a container's cgroup
// limit; core/memory.h). A model or batch that cannot fit is one error naming both numbers,
// at once, instead of seconds of allocation ending in bad_alloc or the OOM killer.
// It deliberately is not a guarantee: the estimate leaves out allocator overhead and the
// runtime libraries (about 2%, docs/memory.md), and other processes may take memory later.
#pragma once
#include <cstdint>
#include <string>

#include "models/config.h"
#include "nn/block.h"

namespace zt::parallel {

struct TrainingLayout {
  int micro_batch = 1;       // B
  int seq_len = 1;           // T
  int zero_stage = 0;        // 0 = DDP
  int num_ranks = 1;         // N
  int hpz_group = 1;         // G: stages 1-3 shard within groups of G ranks when 1 < G < N
  int64_t bucket_elems = 0;  // DDP / ZeRO-1/2 reduce bucket, elements
  nn::ActPlan plan{};        // precision and recomputation
  int comm_elem_bytes = 4;   // the gradient reduction's element size (communication_data_type)
};

// An upper bound of the activation + temporary bytes at (B, T), computed in double: beyond
// kExactPlanLimit the exact planner's size_t arithmetic would wrap around.
double activation_bytes_bound(const ModelConfig& cfg, int B, int T);
constexpr double kExactPlanLimit = double(int64_t(1) << 60);
// Bytes one rank needs to train cfg as laid out (the estimator's row for the stage), or a
// lower bound when that is beyond 2^60 (sizes past it would overflow the exact planner).
int64_t training_bytes_per_rank(const ModelConfig& cfg, const TrainingLayout& l, std::string* breakdown = nullptr);
// Bytes to run cfg forward at (B, T): fp32 parameters, activations and temporaries.
int64_t inference_bytes(const ModelConfig& cfg, int B, int T);
// Ranks of this job on this host (the launcher's local size), 1 without a launcher.
int ranks_on_this_host();
// Throws when ranks_on_host x bytes_per_rank exceeds the memory available now, naming both;
// `what` says what needs it ("training this model"), `hint` what to change. Does nothing
// when the available memory cannot be read.
// limit >= 0 replaces the available memory (--max_memory; limit_source names it).
void check_memory_fits(int64_t bytes_per_rank, int ranks_on_host, const std::string& what, const std::string& breakdown,
                       const std::string& hint, int64_t limit = -1, const std::string& limit_source = "");
// Both of the above for `ztrain train`; limit_source names the cap (--max_memory or
// --max_host_memory) and extra_hint is said first.
void check_training_memory(const ModelConfig& cfg, const TrainingLayout& l, int64_t limit = -1,
                           const std::string& limit_source = "--max_memory", const std::string& extra_hint = "");

}  // namespace zt::parallel
