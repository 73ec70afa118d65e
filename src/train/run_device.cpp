// run_device.cpp: see run_device.h.
#include "train/run_device.h"

#include "core/error.h"

namespace zt {

std::string gpu_unsupported_reason(const TrainArgs& a, int world_size, const ModelConfig& cfg) {
  if (world_size > 1) return "runs of several processes (NCCL) do not run on the GPU yet";
  if (a.zero_stage > 0) return "ZeRO does not run on the GPU yet (with one GPU nothing is sharded: drop it)";
  if (a.tensor_model_parallel_size > 1 || a.context_parallel_size > 1 || a.pipeline_parallel_size > 1)
    return "tensor, context and pipeline parallelism do not run on the GPU yet";
  if (a.local_sgd_steps > 0) return "local SGD does not run on the GPU yet";
  if (a.fp16) return "fp16 mixed precision runs on the CPU only; on the GPU use --bf16";
  return "";
}

DeviceKind run_device(const TrainArgs& a, int world_size, const ModelConfig& cfg, std::string* note) {
  if (a.device == "cpu") return DeviceKind::cpu;
  if (a.device == "cuda") {
    resolve_device("cuda");  // throws when the backend or a GPU is missing
    const std::string why = gpu_unsupported_reason(a, world_size, cfg);
    ZT_CHECK(why.empty(), "--device cuda: ", why, "; or use --device cpu");
    return DeviceKind::cuda;
  }
  ZT_CHECK(a.device == "auto", "--device ", quote(a.device), " is not a device: use cpu, cuda or auto");
  if (cuda_device_count() == 0) return DeviceKind::cpu;
  const std::string why = gpu_unsupported_reason(a, world_size, cfg);
  if (why.empty()) return DeviceKind::cuda;
  if (note) *note = str_cat("--device auto: training on the CPU although a GPU is present: ", why);
  return DeviceKind::cpu;
}

}  // namespace zt
