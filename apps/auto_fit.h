// auto_fit.h: --max_memory and --auto_find_batch_size (HF's name). HF's Trainer finds a batch
// size by catching out-of-memory errors and halving; ztrain knows its memory in advance (the
// estimator, plan/memory_estimate.h, within a few percent of the measured peak), so it
// picks before allocating anything: the largest micro-batch among the requested one and its
// halvings, with the least recomputation that makes it fit, and raises the gradient
// accumulation so the global batch stays what was asked (when the halving divides it).
#pragma once
#include <cstdint>
#include <string>

#include "models/config.h"
#include "train_args.h"

namespace zt {

// "24GB", "12GiB", "500MB", "1.5TB" or a byte count; units as HF / accelerate write them (GB =
// 1e9, GiB = 2^30). Throws zt::Error naming the value when it is not a size.
int64_t parse_memory_size(const std::string& s, const char* what);

// The memory a rank may use: --max_memory divided among this host's ranks, else what the
// machine has available now divided the same way (-1 when unknown). *source names it.
int64_t memory_limit_per_rank(const TrainArgs& a, std::string* source);

// For --auto_find_batch_size: sets per_device_train_batch_size, gradient_accumulation_steps and
// (when needed and not given) the recomputation mode so that the estimate fits `limit` bytes
// per rank; returns the line that says what it chose and why. Throws zt::Error when even a
// micro-batch of 1 with full recomputation does not fit.
std::string auto_find_batch_size(TrainArgs& a, const ModelConfig& cfg, int T, int world_size, int64_t limit,
                                 const std::string& source);

}  // namespace zt
