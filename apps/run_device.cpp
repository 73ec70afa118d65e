// run_device.cpp: see run_device.h.
#include "run_device.h"

#include "core/error.h"

namespace zt {

std::string gpu_unsupported_reason(const TrainArgs& a, int world_size, const ModelConfig& cfg) {
  if (world_size > 1) return "runs of several processes (NCCL) do not run on the GPU yet";
  if (a.offload_optimizer == "nvme" || a.offload_param == "nvme")
    return "offload to disk (device nvme) runs on the CPU only (docs/offload.md)";
  // ZeRO-Offload's DeepSpeed configs set stage 2 (or 1): with one GPU it shards nothing and runs
  // as stage 0 with the offload engine (apply_offload below).
  const bool offload_stage = a.offload_optimizer == "cpu" && a.zero_stage <= 2;
  if (a.zero_stage > 0 && !offload_stage)
    return "ZeRO does not run on the GPU yet (with one GPU nothing is sharded: drop it)";
  if (a.tensor_model_parallel_size > 1 || a.context_parallel_size > 1 || a.pipeline_parallel_size > 1)
    return "tensor, context and pipeline parallelism do not run on the GPU yet";
  if (a.local_sgd_steps > 0) return "local SGD does not run on the GPU yet";
  if (a.fp16) return "fp16 mixed precision runs on the CPU only; on the GPU use --bf16";
  if (cfg.moe.on()) return "mixture-of-experts models run on the CPU only for now (no GPU expert kernels yet)";
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

std::string apply_offload(TrainArgs& a, DeviceKind d) {
  for (const auto& [key, v] :
       {std::pair{"--offload_optimizer", &a.offload_optimizer}, std::pair{"offload_param.device", &a.offload_param}})
    ZT_CHECK(*v == "none" || *v == "cpu" || *v == "nvme", key, " must be none, cpu or nvme, got ", quote(*v));
  if (d == DeviceKind::cpu) {
    // nvme is offload to disk (parallel/offload_engine.h); cpu means where everything is already.
    if (a.offload_optimizer != "cpu" && a.offload_param != "cpu") return "";
    return "offload device cpu changes nothing on the CPU: parameters and optimizer state are in host memory "
           "already (device nvme offloads them to disk)";
  }
  ZT_CHECK(a.offload_param == "none",
           "offload_param (ZeRO-3 parameter offload) is not implemented on the GPU; "
           "offload the optimizer (offload_optimizer.device cpu) or drop it");
  ZT_CHECK(a.offload_optimizer != "nvme",
           "offload_optimizer to nvme is not implemented on the GPU (it runs on the CPU: --device cpu); use \"cpu\" "
           "(host memory) or \"none\"");
  if (a.offload_optimizer != "cpu" || a.zero_stage == 0) return "";
  const int stage = a.zero_stage;
  a.zero_stage = 0;
  return str_cat("ZeRO stage ", stage, " on one GPU shards nothing: ZeRO-Offload runs as stage 0 with the optimizer ",
                 "in host memory");
}

}  // namespace zt
