// memory_estimate.h: per-rank training memory under each data-parallel strategy (DDP,
// ZeRO-1/2/3, ZeRO++ hpZ, hybrid sharding), like DeepSpeed's
// estimate_zero3_model_states_mem_needs_all_live but with ztrain's activations and
// temporaries (from the same planner the Transformer allocates with) and the
// communication buffers ztrain's data-parallel code uses:
//   DDP: gradients are all-reduced in place in fp32 buckets of the flat gradient buffer;
//     counted: one bucket of MPI scratch in flight.
//   ZeRO-1: buckets are reduce-scattered in place by the communicator's ring; counted: its
//     scratch, two 8 MiB chunks (or one bucket if smaller).
//   ZeRO-2: each bucket of unsharded gradients is reduce-scattered into the rank's shard;
//     counted: three buckets (one filling from backward, two in flight) plus the largest
//     unit's gradient buffer (a tied embedding's is held through the whole backward), at
//     most the whole gradient.
//   Bucket caps are the trainer's (parallel/buckets.h reduce_bucket_elements): DDP 25 MiB,
//     ZeRO 5e8 elements (DeepSpeed's default: GPT-2 124M is then one bucket), or one given cap.
//   ZeRO-3 / hpZ / hybrid: parameters are gathered per unit (a transformer block, or a
//     top-level tensor such as the embedding); counted: the two largest units of gathered
//     parameters (current + prefetched) and of unsharded gradients (current + in flight).
// Model states are fp32: 4 (parameter) + 4 (gradient) + the optimizer's state (AdamW: 8,
// two moments; optim::optimizer_state_bytes_per_param) bytes per parameter unsharded.
// ZeRO-1 shards the optimizer state over N ranks, ZeRO-2 also the gradients, ZeRO-3 also
// the parameters; hpZ (ZeRO++) keeps ZeRO-3's shards over N plus a secondary parameter copy
// sharded over G; hybrid (FSDP's HYBRID_SHARD) is ZeRO-3 within groups of G ranks,
// replicated across the N/G groups.
// It deliberately is not a measurement: allocator overhead, the binary and the runtime
// libraries (about 2% here, docs/memory.md) are not included.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/layout.h"
#include "models/params.h"
#include "nn/block.h"

namespace zt::parallel {

struct ModelMemoryInputs {
  int64_t num_params = 0;
  int64_t largest_unit_params = 0;   // the most parameters ZeRO-3 gathers at once
  std::string largest_unit;          // its name: "embedding", "block 3" or "head"
  std::vector<int64_t> unit_params;  // every unit's size (the model's unit list), largest first
  int64_t activation_bytes = 0;      // per rank, for the micro-batch (B, T)
  int64_t temporary_bytes = 0;
  // Mixed precision: the weights' compute copy every rank holds whole (bf16: 2 bytes per
  // parameter; fp16: 4, fp32 values rounded to fp16), counted with the parameters.
  int64_t compute_copy_bytes = 0;
  // LoRA (cfg.lora): the frozen base every rank holds whole beside the trainable adapters
  // (num_params): fp32, or its block linear weights (and routed experts) in NF4 / int8 as QLoRA
  // stores them (models/qlora.cpp), plus under mixed precision the compute copy of its fp32 rest.
  int64_t frozen_bytes = 0;
};
// The bytes of frozen_bytes above for a layout of cfg (0 without LoRA).
int64_t frozen_base_bytes(const ModelConfig& cfg, const ModelLayout& ml, nn::Precision precision);
// Expert parallelism's expert side (outside the activation arena) on a rank of an expert group of
// ep > 1: the B x T rows' top-k assignments of its TP block (1 / tp of them, balanced routing),
// (3 C + 6 F) floats each (bf16 runs: two bf16 operand rows of max(C, 2F) more), every MoE layer; 0
// for ep 1 (tensor parallelism alone exchanges no rows).
int64_t expert_side_bytes(const ModelConfig& cfg, int B, int T, int ep, int tp,
                          nn::Precision precision = nn::Precision::fp32);
// From a model config without allocating the model (the parameter table is built alone,
// activations come from ModelRuntime::planned_bytes).
// plan: precision and recomputation (activations, temporaries and the compute copy follow it).
// cut: the layout a rank holds (expert parallelism: its experts only; default the whole model).
ModelMemoryInputs memory_inputs(const ModelConfig& cfg, int B, int T, const nn::ActPlan& plan = {},
                                const LayerCut& cut = {});
// A unit's name in reports: its kind, and the layer for a block ("block 3").
std::string unit_name(const Unit& u);

enum class Strategy { ddp, zero1, zero2, zero3, zero3_hpz, hybrid };
const char* strategy_name(Strategy s);

struct MemoryEstimateOptions {
  int num_ranks = 1;           // N
  int hpz_partition_size = 0;  // G; 0 = N/2 when N >= 4 (the hpZ / hybrid rows need 1 < G < N)
  int64_t bucket_bytes = 0;    // DDP / ZeRO-1/2 gradient bucket cap; 0 = the trainer's default per stage
  int zero3_live_units = 2;    // gathered units resident at once (current + prefetch)
  // HF's --optim name of the optimizer whose state bytes per parameter are counted.
  std::string optim = "adamw_torch";
  // Bytes per element gradients are reduced in (communication_data_type): 2 adds DDP's 16-bit
  // copy of the whole gradient that its reductions run on.
  int comm_elem_bytes = 4;
};

struct MemoryRow {
  Strategy strategy = Strategy::ddp;
  int num_ranks = 1;
  int group = 1;  // G for hpZ / hybrid, else N
  int64_t params = 0, grads = 0, optim = 0, activations = 0, temporary = 0, comm = 0;
  int64_t total() const { return params + grads + optim + activations + temporary + comm; }
};
// One row per strategy; hpZ and hybrid rows only when 1 < G < N.
std::vector<MemoryRow> estimate_memory(const ModelMemoryInputs& in, const MemoryEstimateOptions& opt);

// One GPU (--device cuda, docs/gpu.md): what the GPU holds when one process trains there.
// Model states, compute copy, activations and the temporaries arena as on one CPU rank (the same
// planner), and in `comm`, what only the GPU path allocates: cuBLASLt's 32 MiB workspace,
// attention's scratch (the bf16 copies of q, k, v and of dO with D for the tensor-core kernels;
// D alone for the others), the LM head's row statistics and the micro-batch's ids and targets.
// Host mirrors of the checkpointed state are host memory, not counted; so is the optimizer state
// with offload_optimizer (ZeRO-Offload keeps it, and the fp32 masters, in host memory).
MemoryRow estimate_gpu_memory(const ModelConfig& cfg, const ModelMemoryInputs& in, int B, int T,
                              const nn::ActPlan& plan, const std::string& optim, bool offload_optimizer = false);
// The G the estimate uses for opt (resolving the 0 default).
int resolved_group(const MemoryEstimateOptions& opt);

}  // namespace zt::parallel
