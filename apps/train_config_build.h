// train_config_build.h: `ztrain train`'s arguments (flags and the DeepSpeed config, train_args.h)
// resolved into the library's TrainConfig (train/train_config.h), once, before training starts.
#pragma once
#include "dist/communicator.h"
#include "train/train_config.h"
#include "train_args.h"

namespace zt {

// Checks the arguments and resolves them, in the order the run has always met them: the flag
// checks, the model config and what it allows (tensor / context parallelism, recomputation, the
// sequence length), the weights' presence, the ranks' agreement on everything (the job's first
// collective), the device, --max_memory / --auto_find_batch_size, the pipeline, the data-parallel
// options, local SGD's groups (a collective), the memory check of the layout and the data's kind.
// Throws zt::Error (JobError where every rank throws the same) naming the flag.
TrainConfig build_train_config(TrainArgs a, dist::Communicator& world);

}  // namespace zt
