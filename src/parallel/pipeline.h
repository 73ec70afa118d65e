// pipeline.h: the pipeline-parallel executor. One stage of the grid's pp group runs its
// schedule (parallel/pipeline_schedule.h) over the Transformer's pieces: embed / blocks
// [a, b) / head forward and backward, one activation slot per micro-batch in flight on this
// stage. Activations and gradients cross stage boundaries as non-blocking point-to-point
// messages on the pp communicator: a receive is posted one compute action ahead, so it
// arrives while the stage computes, and sends complete in the background.
//
// Buffers: a micro-batch's activation arrives in the slot's residual stream at the chunk's
// first block, its output leaves from the residual at the chunk's end; the gradient arriving
// for a chunk lands in a per-slot buffer, and the gradient leaving is written over the chunk's
// input residual (no longer needed once the chunk's backward ran). The last stage computes the
// head's forward and backward together (the fused LM head + loss) and keeps dL/d(stream) in
// the slot's last residual until the schedule asks for that micro-batch's backward.
//
// Parameters and gradients come from the model's ParamProvider (the data-parallel engine with
// this stage's units, see StageUnits), so DP / ZeRO-1/2/3 compose on the dp group unchanged.
// It deliberately is not the data loader (the caller hands it the step's micro-batches: every
// stage of a data-parallel rank reads the same ones) or the optimizer.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/memory.h"
#include "dist/communicator.h"
#include "models/transformer.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_schedule.h"

namespace zt::parallel {

struct PipelineMicroBatch {
  const int32_t* inputs = nullptr;     // (B, T)
  const int32_t* targets = nullptr;    // (B, T)
  const int32_t* positions = nullptr;  // (B, T) or null
};

struct PipelineStepStats {
  double loss_sum = 0;  // summed over the step's micro-batches (the last stage's; 0 elsewhere)
  int64_t count = 0;    // counted target tokens (the last stage's)
  // This stage's schedule (wall clock) and its forwards and backwards in it; the trainer's bubble
  // is a stage's idle share of the slowest stage's schedule.
  double step_s = 0, compute_s = 0;
};

// Which units a stage holds: the embedding with the first virtual stage, the blocks of its
// chunks, the head with the last; a copy of the embedding on the last stage when the LM head
// is tied. `pp` is the grid's pp group (its rank is the stage); tied gets the first-and-last
// stage group, made here by a split of pp (a collective over pp).
StageUnits stage_units(const Transformer& model, const StageCut& cut, dist::Communicator& pp,
                       std::unique_ptr<dist::Communicator>* tied);

class PipelineExecutor {
 public:
  PipelineExecutor(Transformer& model, dist::Communicator& pp, const StageCut& cut, PipeSchedule kind,
                   int microbatches);
  // Activation slots this stage needs (plan the model with them): the micro-batches in flight.
  int slots() const { return slots_; }
  const std::vector<Action>& actions() const { return list_; }
  // The acquires of one step's computes, in order (each forward's and backward's pieces, by
  // ModelRuntime::forward_acquires / backward_acquires). ZeRO-3 gathers by it.
  AcquireOrder acquire_order() const;
  // One step's forward and backward over the m micro-batches. set_last(true) comes before the
  // compute that completes the step's gradients of a unit (the data-parallel engine reduces
  // then). Gradients accumulate in the provider; the loss is the last stage's.
  PipelineStepStats step(const std::vector<PipelineMicroBatch>& mbs, float grad_scale,
                         const std::function<void(bool)>& set_last);

 private:
  struct Key {
    int kind, mb, chunk;
    auto operator<=>(const Key&) const = default;
  };
  bool is_compute(const Action& a) const { return a.kind == ActionKind::forward || a.kind == ActionKind::backward; }
  int vs(const Action& a) const { return virtual_stage(stage_, a.chunk, P_); }
  void touch(int mb, const std::vector<PipelineMicroBatch>& mbs);
  void post_recv(const Action& a, const std::vector<PipelineMicroBatch>& mbs);
  void compute(const Action& a, const std::vector<PipelineMicroBatch>& mbs, float grad_scale,
               const std::function<void(bool)>& set_last, PipelineStepStats* st);

  Transformer& model_;
  dist::Communicator& pp_;
  StageCut cut_;
  int P_, stage_, m_, V_, slots_ = 0;
  size_t bytes_ = 0;  // one activation (B T C fp32)
  std::vector<Action> list_;
  std::vector<int> slot_of_mb_;
  std::vector<int> occupant_;                      // per slot: the micro-batch using it (-1: none)
  std::vector<std::vector<dist::Request>> sends_;  // per slot: sends reading its buffers
  std::vector<Buffer> grad_in_;                    // per slot: the gradient received for a chunk
  std::vector<std::pair<Key, dist::Request>> recvs_;
  // Mixture of experts, per (slot, chunk): the routing totals received with a chunk's activations
  // and sent on with its output (ModelRuntime::moe_totals), and the auxiliary losses' gradients
  // received with the residual gradient and sent on with it (moe_loss_grads).
  std::vector<std::vector<double>> moe_in_, moe_out_;
  std::vector<std::vector<float>> moe_gin_, moe_gout_;
  int dres_holder_ = -1;  // micro-batch whose head gradient is still in the model's residual_grad()
};

}  // namespace zt::parallel

namespace zt::parallel {
// The trainer's cut: given blocks per (virtual) stage (`list`, "6,6"), K layers per virtual
// stage (Megatron's --num-layers-per-virtual-pipeline-stage; 0: one chunk per stage), or else
// balanced by a cost per unit. By time (`by_time`, the default): the unit's training FLOPs per
// token, 6 x its GEMM parameters plus, for a block, causal attention's 6 T C (forward, and
// backward at twice that); the LM head's 6 V C makes the last stage's head worth about five
// GPT-2 blocks, so the last stage gets fewer blocks. By memory: model-state bytes (fp32
// parameter, gradient and `optim_bytes` of optimizer state per parameter) plus, for blocks, the
// activations of one micro-batch of (B, T); the head carries the tied embedding's copy.
StageCut plan_stages(const Transformer& model, int B, int T, int stages, int layers_per_virtual_stage,
                     const std::string& list, double optim_bytes, bool by_time);
}  // namespace zt::parallel
