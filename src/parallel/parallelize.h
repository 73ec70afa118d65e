// parallelize.h: the one call that applies the parallelism to a single-device model (torchtitan's
// parallelize_llama is the model). parallelize(model, grid, plan) installs tensor / sequence
// parallelism (the TP region and its gradient bookkeeping), context parallelism (the ring and
// the cut of each micro-batch), the pipeline cut and its executor, the data-parallel / ZeRO
// engine and local SGD, and returns the ParallelModel the trainer steps:
//   begin_step(); forward_backward(micro-batches); finish_grads(); grad_norm(); clip(); step(lr)
// plus the step's state components (already in global coordinates), evaluation's set-up and the
// strategies' reports. The trainer never sees a TP partial sum, a CP shard or a pipeline slot.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/state.h"
#include "dist/parallel_dims.h"
#include "models/transformer.h"
#include "nn/block.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/local_sgd.h"
#include "parallel/pipeline.h"
#include "parallel/tensor_parallel.h"

namespace zt::parallel {

// What parallelize() applies on top of the grid's sizes (resolved from the run's configuration).
struct ParallelPlan {
  int rows = 0;           // B: rows per micro-batch
  int seq_len = 0;        // T: tokens per row (the whole row; a cp rank runs T / cp of it)
  int micro_batches = 1;  // per optimizer step (gradient accumulation)
  bool sequence_parallel = false;
  // Pipeline (grid.pp() > 1): the schedule and how the blocks are cut into stages.
  PipeSchedule schedule = PipeSchedule::one_f_one_b;
  int layers_per_virtual_stage = 0;
  std::string stage_layers;  // "6,6": blocks per (virtual) stage; empty: balanced
  bool balance_by_time = true;
  nn::ActPlan act_plan;  // precision and recomputation: the cut weighs its activations
  DataParallelOptions data_parallel;
  LocalSgdOptions local_sgd;  // steps 0: off
  bool print = false;         // the chief: one line describing the pipeline
};

// One micro-batch as this rank's model runs it (B, T) or, under context parallelism, its chunks
// of each row: produced by a MicroBatchSource, cut by the ParallelModel.
struct MicroBatchSource {
  virtual ~MicroBatchSource() = default;
  // Micro-batch `micro` of the step (called in order). Under a pipeline every micro-batch is
  // asked for before the schedule runs, so each must stay valid until the step ends.
  virtual PipelineMicroBatch next(int micro) = 0;
  // After micro-batch `micro`'s backward (no pipeline), with the rows the model ran.
  virtual void backward_done(int micro, const PipelineMicroBatch& local) {}
};

struct StepLoss {
  double sum = 0;    // the loss summed over the step's counted target tokens (finish_grads: over the ranks)
  double count = 0;  // those tokens
};

class ParallelModel {
 public:
  // Use parallelize().
  ParallelModel(Transformer& model, const dist::ProcessGrid& grid, const ParallelPlan& plan);
  ParallelModel(const ParallelModel&) = delete;
  ParallelModel& operator=(const ParallelModel&) = delete;

  // The step: forward and backward over its micro-batches with the gradients scaled by
  // grad_scale (loss_factor, a test hook, scales one step's loss and gradients), the reductions
  // finished (data-parallel and TP partial sums), then the global gradient norm (a collective
  // over every dimension), clipping and the update.
  void begin_step() { engine_->begin_step(); }
  StepLoss forward_backward(MicroBatchSource& src, float grad_scale, float loss_factor);
  void finish_grads(StepLoss& loss);
  double grad_norm();
  void clip(double norm, double max_norm, double unscale) { engine_->clip(norm, max_norm, unscale); }
  void step(double lr) { engine_->step(lr); }
  // Sophia: the reduced (and clipped) gradient of a pass on sampled labels into its curvature.
  void update_curvature() { engine_->update_curvature(); }
  // After optimizer step `step` (0-based) whether or not it was skipped: local SGD's outer sync.
  void after_step(int64_t step);

  // Checkpoints: `run_parts` (the trainer's components) followed by the parameters and the
  // optimizer, each in the global layout under tensor parallelism (valid until the next call;
  // local_sgd() is a component of its own); the parameters alone for a model export. Which
  // state file this rank writes.
  std::vector<Stateful*> state_components(const std::vector<Stateful*>& run_parts);
  std::vector<Stateful*> param_components();
  StateShard checkpoint_shard() const;
  void sync_after_load() { engine_->sync_after_load(); }  // a collective

  // Evaluation of the whole model between steps: who runs evaluate() (the chief, and every rank
  // whose forward is a collective: TP, CP, ZeRO-3), on which parameters (a pipeline's gathered
  // ones), and how each batch is cut and reduced (CP; null otherwise).
  bool begin_eval(bool chief);
  void end_eval();
  const EvalShard* eval_shard() const { return cp_ ? &cp_eval_ : nullptr; }

  // The strategies' measurements for train_results.json (collectives): "tensor_parallel" and
  // "context_parallel" as they apply; the pipeline's (null without one); the last measured bubble.
  nlohmann::json report(int64_t steps_run, const ModelConfig& cfg);
  nlohmann::json pipeline_report(int64_t steps_run, const ModelConfig& cfg);
  double last_bubble() const { return last_bubble_; }
  int activation_slots() const { return pipe_ ? pipe_->slots() : 1; }
  int local_seq_len() const { return plan_.seq_len / grid_.cp().size(); }
  DataParallel& engine() { return *engine_; }
  const DataParallel& engine() const { return *engine_; }
  LocalSgd* local_sgd() { return local_sgd_.get(); }
  bool pipelined() const { return pipe_ != nullptr; }
  const ExpertParallel* expert_parallel() const { return ep_.get(); }
  const dist::Communicator* tied_comm() const { return tied_comm_.get(); }

 private:
  void apply_tensor_parallel();
  void apply_context_parallel();
  void apply_pipeline();
  void apply_expert_parallel();
  PipelineMicroBatch local_rows(const PipelineMicroBatch& rows, int slot);
  StepLoss pipeline_forward_backward(MicroBatchSource& src, float grad_scale);
  std::vector<Stateful*> in_global_layout(std::vector<Stateful*> parts);

  Transformer& model_;
  const dist::ProcessGrid& grid_;
  ParallelPlan plan_;
  std::unique_ptr<DataParallel> engine_;
  // Tensor parallelism: the pass's operators, the replicated tensors whose gradients are summed
  // over the group, the tensors whose gradients are partial sums, each tensor's weight in the norm.
  std::unique_ptr<TensorParallel> tp_;
  std::unique_ptr<VocabParallelEmbedding> vocab_embedding_;  // swapped in for the model's ends
  std::unique_ptr<VocabParallelLmHead> vocab_lm_head_;
  std::vector<int> tp_partial_, tp_replicated_;
  std::vector<double> tp_norm_weights_;
  std::vector<std::unique_ptr<TpStateAdapter>> tp_adapters_;
  std::unique_ptr<ContextParallel> cp_;
  EvalShard cp_eval_;
  bool eval_evaluator_ = false;  // between begin_eval and end_eval: this rank evaluated
  // Pipeline: this rank's stage, the first + last stage group (a tied LM head), the layers it runs.
  std::unique_ptr<dist::Communicator> tied_comm_;
  std::unique_ptr<PipelineExecutor> pipe_;
  std::vector<char> stage_layers_;
  double bubble_sum_ = 0, last_bubble_ = 0;  // the measured bubble (mean over stages): sum over steps, last
  std::vector<double> stage_bubble_sum_;     // per stage, summed over the steps after the first
  int64_t bubble_steps_ = 0, steps_ = 0;
  std::unique_ptr<LocalSgd> local_sgd_;
  std::unique_ptr<ExpertParallel> ep_;  // expert parallelism (MoE models; null without)
  // Its experts sharded: the tensors every rank of the expert group holds (their gradients summed
  // over it), each tensor's weight in the norm, the checkpoint adapters.
  std::vector<int> ep_shared_;
  std::vector<double> ep_norm_weights_;
  std::vector<std::unique_ptr<EpStateAdapter>> ep_adapters_;
};

// Applies `plan` to `model` over `grid` (a collective over the grid's groups). The model holds
// its parameters (or, for ZeRO, plan.data_parallel.initial_params gives them by range).
std::unique_ptr<ParallelModel> parallelize(Transformer& model, const dist::ProcessGrid& grid, const ParallelPlan& plan);

}  // namespace zt::parallel
