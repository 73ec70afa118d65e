// data_parallel.h: data-parallel training over the ranks of a communicator: DDP (stage 0)
// and ZeRO stages 1-3, optionally hybrid (sharded within groups of G consecutive ranks,
// replicated across groups) and with ZeRO++'s int8 parameter all-gather (qwZ, stage 3) or
// int8 gradient reduce-scatter (qgZ, stages 1-3). docs/distributed.md has the design and
// the bytes each stage moves.
//
// The engine plugs into the Transformer as its ParamProvider (models/param_provider.h), so
// the model code is the serial code: DDP starts a bucket's all-reduce when backward
// reports the bucket's last unit done; ZeRO-2/3 reduce-scatter gradient buckets as they
// complete (every micro-batch) into this rank's shard; ZeRO-3 all-gathers a unit's
// parameters when the model asks for them, prefetching the next unit.
// The trainer's step: begin_step(); per micro-batch set_last_micro() + forward_backward;
// end_backward(); grad_norm(); clip(); step(lr).
// It deliberately is not the trainer (loss reduction, logging) or a checkpoint writer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/async_file.h"
#include "core/state.h"
#include "dist/communicator.h"
#include "dist/parallel_dims.h"
#include "models/transformer.h"
#include "optim/optimizer.h"

namespace zt::parallel {

// Pipeline parallelism (parallel/pipeline.h): which model units this rank's stage holds. The
// engine reduces, clips, updates and checkpoints only those; the gradient norm is summed over
// the stages. With a tied LM head the last stage holds a copy of the embedding unit (as
// Megatron-LM does): its gradient is summed with the first stage's over `tied` after the
// data-parallel reduction, both update it identically, and only the first stage counts it in
// the norm and writes it to checkpoints (sync_after_load copies it to the last stage).
struct StageUnits {
  std::vector<char> held;                // per model unit; empty: every unit (no pipeline)
  std::vector<int> owner;                // per model unit: the pp rank that owns it
  int tied_unit = -1;                    // the embedding unit, when the LM head is tied (first and last stage)
  bool tied_copy = false;                // this rank holds tied_unit as the last stage's copy
  dist::Communicator* stages = nullptr;  // the grid's pp group
  dist::Communicator* tied = nullptr;    // first and last stage of the pipeline (null elsewhere)
  // The units this stage's schedule acquires in one step, in order, with `backward` (the
  // executor's PipelineExecutor::acquire_order): ZeRO-3 gathers and prefetches by it, as it
  // does by the model's whole-pass order without a pipeline.
  AcquireOrder acquire_order;
  bool active() const { return !held.empty(); }
};

// Offload to disk (parallel/offload_engine.h): DeepSpeed's zero_optimization.offload_optimizer /
// offload_param with device nvme, and its aio block. Element counts are DeepSpeed's.
struct DiskOffload {
  bool optimizer = false;  // optimizer state in files (offload_optimizer.device nvme)
  bool params = false;     // fp32 parameters (the masters) too (offload_param.device nvme, ZeRO-3)
  std::string nvme_path;   // the folder of the scratch file
  AioOptions aio;
  int buffer_count = 4;                   // offload_optimizer.buffer_count: the step's windows (>= 2)
  int param_buffer_count = 5;             // offload_param.buffer_count: unit buffers (>= 3)
  int64_t param_buffer_size = 100000000;  // offload_param.buffer_size: elements; a larger unit is an error
  int64_t max_in_cpu = 1000000000;        // offload_param.max_in_cpu: parameter elements in host memory at once
  int64_t sub_group_size = 1000000000;    // zero_optimization.sub_group_size: elements per chunk at most
  // Bytes the engine may hold (gradients, resident parameters, unit buffers, windows; negative
  // when the rest of training takes the whole cap); no cap when unset. budget_source says where
  // it came from, for the error when it is too small.
  std::optional<int64_t> host_budget;
  std::string budget_source;
  bool on() const { return optimizer || params; }
};

struct DataParallelOptions {
  int stage = 0;                     // 0 = DDP, 1/2/3 = ZeRO
  int64_t reduce_bucket_size = 0;    // elements per gradient bucket; 0 = the stage's default (reduce_bucket_elements)
  bool overlap_comm = true;          // start reductions during backward
  int hpz_partition_size = 1;        // G: shard within groups of G ranks (1 = all ranks)
  bool quantized_weights = false;    // qwZ (stage 3)
  bool quantized_gradients = false;  // qgZ (stages 1-3)
  // DeepSpeed's communication_data_type: the dtype gradients are reduced in (f32, bf16, f16).
  // 16-bit: each bucket is converted before its reduction and widened after it, so the wire
  // carries half the bytes and every partial sum is rounded (DDP and the ZeRO reduce-scatter;
  // hybrid sharding's replica all-reduce stays fp32).
  DType comm_dtype = DType::f32;
  // Local SGD (parallel/local_sgd.h): DDP reduces within the grid's dp_shard groups only; the
  // replicate groups synchronise through the outer loop every H steps.
  bool local_sgd = false;
  // The optimizer each engine makes (optim::make_optimizer) over what its rank owns.
  std::string optim = "adamw_torch";  // HF's --optim name
  // On the GPU: "cpu" keeps the fp32 masters and the optimizer state in host memory, updated by
  // the CPU optimizer (ZeRO-Offload, parallel/gpu_engine.cpp); "none" keeps them on the GPU.
  std::string offload_optimizer = "none";
  DiskOffload disk_offload;  // offload to disk (CPU runs of one process)
  optim::OptimizerConfig optim_config;
  StageUnits pipeline;  // pipeline parallel: this stage's units (DDP and ZeRO-1/2/3)
  // Expert parallelism with the experts sharded (each rank holds its expert group's share): the
  // engine runs over the ranks holding the same experts (engine_groups), and the caller sums the
  // gradients of the tensors every rank holds over the expert group (parallel/parallelize.cpp).
  bool expert_sharded = false;
  // ZeRO stages: where this rank's initial parameter values come from (models/param_provider.h);
  // null: the model's flat buffer. With it the model need not hold the whole buffer at all
  // (Transformer(..., hold_params = false)): a rank reads only what it keeps.
  const ParamSource* initial_params = nullptr;
};

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  // Takes over the model's parameters (stages 1-3 copy this rank's shard and free the
  // model's flat buffers; every rank must hold the same initial parameters) and installs
  // itself as the model's provider. The engine's groups come from the process grid (never
  // the world): grid.dp_cp() carries the tiny scalar reduction of the gradient norm; the bulk
  // traffic runs on grid.dp_shard_cp() (and grid.dp_replicate() for hybrid sharding), which
  // carry nothing else, so their counters are the engine's bytes (comms()). Context-parallel
  // ranks hold the same weights and other tokens: the engine treats them as data-parallel
  // ranks (dp_cp and dp_shard_cp are dp and dp_shard when cp is 1).
  static std::unique_ptr<DataParallel> create(Transformer& model, const dist::ProcessGrid& grid,
                                              const DataParallelOptions& opt);

  virtual void begin_step() = 0;
  // Before each micro-batch: whether it is the step's last (DDP and ZeRO-1 reduce only then).
  virtual void set_last_micro(bool last) = 0;
  // After the last micro-batch: every reduction complete.
  virtual void end_backward() = 0;
  // L2 norm of the whole reduced gradient (a collective).
  virtual double grad_norm() = 0;
  // The squared norm of the reduced gradient with parameter p's squares weighted by weights[p]
  // (a collective over the data-parallel ranks and, under a pipeline, the stages, the tied copy
  // counted once). A caller whose ranks hold other parts of some tensors (tensor parallelism,
  // parallel/parallelize.cpp) weighs replicated ones so that a sum over its group counts them once.
  virtual double grad_sq(const std::vector<double>& weights) = 0;
  // Each gradient piece the engine holds after end_backward() as (param, grads, count), for a
  // caller that reduces them further (a pipeline stage's are its units', the tied copy included).
  virtual void for_each_grad_piece(const std::function<void(int param, float* g, int64_t n)>& f) = 0;
  // Scales the gradients for clipping (norm: the unscaled global norm) and by `unscale`
  // (fp16: 1 / loss scale) in one pass.
  virtual void clip(double norm, double max_norm, double unscale = 1.0) = 0;
  // The optimizer on what this rank owns, then parameter synchronisation (ZeRO-1/2 all-gather).
  virtual void step(double lr) = 0;
  // Instead of a step: the reduced gradient (of a pass on labels sampled from the model) into
  // the optimizer's curvature estimate (Sophia; optim::Optimizer::update_curvature).
  virtual void update_curvature() { ZT_ASSERT(false, "this engine has no curvature update"); }
  // Whether the model's forward pass is a collective under this engine (ZeRO-3 gathers
  // parameters): then every rank must run evaluation, not only rank 0.
  virtual bool forward_is_collective() const { return false; }
  // A collective: afterwards model.flat_params() holds the full, current parameters.
  virtual void export_params() = 0;
  // The optimizer over this rank's parameters (DDP: all of them; ZeRO: its shard). Its
  // state spans are set, so it saves and loads itself as checkpoint pieces.
  virtual optim::Optimizer& optimizer() = 0;
  // Checkpoints: the parameters this rank holds, as pieces of slot "params" (DDP: every
  // tensor whole; ZeRO: this rank's shard cut per tensor). Loading is a collective for
  // ZeRO-1/2 (the loaded shards are all-gathered into the full parameters).
  virtual Stateful& param_state() = 0;
  // After a checkpoint (or --load_best_model_at_end) loaded param_state() and optimizer(): a
  // collective that copies state held by two ranks but saved by one (the tied embedding of a
  // pipeline's last stage). Nothing without a pipeline.
  virtual void sync_after_load() {}
  // Which state file this rank writes (index < 0: none; another rank holds the same state).
  virtual StateShard checkpoint_shard() const = 0;

  // Communicators carrying the gradient / parameter traffic (their counters are the
  // measured bytes; the scalar norm reduction runs on world and is not among them).
  virtual std::vector<const dist::Communicator*> comms() const = 0;
  // Bus bytes per rank per optimizer step with `accumulation` micro-batches: what this
  // engine's plan moves (padding and int8 scales included), and the ZeRO paper's figure
  // (2 (N-1)/N Psi for DDP / ZeRO-1, ZeRO-2 per reduction, 3 (N-1)/N Psi for ZeRO-3).
  // The paper's Psi is the parameters this engine holds (held_params: a pipeline stage's units,
  // a tied embedding's copy included; else the model's).
  virtual double planned_bus_bytes(int accumulation) const = 0;
  virtual double paper_bus_bytes(int accumulation) const = 0;
  // A description for the log / train_results.json (stage, ranks, buckets, shard sizes).
  virtual nlohmann::json describe() const = 0;
  virtual int64_t held_params() const = 0;
};

// The groups an engine runs over: `all` (every rank of its data parallelism: the gradient norm's
// scalars), `shard` (the bulk traffic: DDP's all-reduce, ZeRO's shards) and `replicate` (hybrid
// sharding's replicas). The grid's dp_cp, dp_shard_cp and dp_replicate; with expert_sharded,
// edp_cp and edp_shard_cp (dp_replicate holds the same experts already).
struct EngineGroups {
  dist::Communicator *all, *shard, *replicate;
};
EngineGroups engine_groups(const dist::ProcessGrid& grid, bool expert_sharded);

// Validates the options against the world size; throws zt::Error with a one-line message.
void check_data_parallel_options(const DataParallelOptions& opt, int world_size);

}  // namespace zt::parallel
