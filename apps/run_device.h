// run_device.h: which device a training run computes on (--device, docs/gpu.md).
#pragma once
#include <string>

#include "core/device.h"
#include "models/config.h"
#include "train_args.h"

namespace zt {

// Why this run cannot take the GPU path today ("" when it can): one process, no ZeRO, tensor /
// context / pipeline parallelism, local SGD, fp16, or a model family the GPU path does not run.
std::string gpu_unsupported_reason(const TrainArgs& a, int world_size, const ModelConfig& cfg);

// --device cpu: the CPU. cuda: the GPU, or an Error when the backend, a GPU or the run's features
// are missing (the message names which). auto: the GPU when one is present and the run can use
// it; otherwise the CPU, with *note set to why a present GPU goes unused.
DeviceKind run_device(const TrainArgs& a, int world_size, const ModelConfig& cfg, std::string* note);

// The offload keys against the device the run takes (values none | cpu | nvme, else an Error).
// GPU: offload_optimizer cpu selects ZeRO-Offload, and a ZeRO stage 1-2 (DeepSpeed's offload
// configs) becomes 0 (one GPU shards nothing); nvme and offload_param are refused. CPU: cpu
// changes nothing (a note says so); nvme is offload to disk (parallel/offload_engine.h).
// Returns a note for the user, or "".
std::string apply_offload(TrainArgs& a, DeviceKind d);

}  // namespace zt
