// auto_parallel.h: `ztrain train --auto_parallel` (docs/planner.md). Before anything else the
// command asks the planner (plan/planner.h) for the fastest layout of its world size that
// fits the memory, keeping the global batch (--train_batch_size, else micro-batch x
// accumulation x ranks as given), and sets tensor / pipeline parallelism, the ZeRO stage, the
// micro-batch and accumulation, recomputation and --threads from it. Flags given explicitly
// pin their part of the search (tp, pp, ZeRO stage, sequence parallel, recomputation,
// threads); flags the planner cannot honour together with it are refused in one line.
// Rank 0 plans (the machine's defaults, not measurements, so the choice is repeatable) and
// broadcasts the layout, so every rank applies the same one.
#pragma once
#include <string>

#include "dist/communicator.h"
#include "train_args.h"

namespace zt {

// Applies the chosen layout to `a`; returns the line to print (one per job). A collective.
std::string apply_auto_parallel(TrainArgs& a, dist::Communicator& world);

}  // namespace zt
