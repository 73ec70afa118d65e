// trainer_impl.h: the Trainer behind `ztrain train` (train_run in train/train_config.h), shared by
// its files: trainer.cpp (the set-up: data, model and engine, resume), trainer_loop.cpp (the step
// loop and the final reports) and trainer_hooks.cpp (what follows a step: logging, evaluation,
// saves, spikes, the straggler check, flash checkpoints, as step hooks). Not an API.
#pragma once
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_model.h"
#include "checkpoint/run_folder.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/profile.h"
#include "core/rng_state.h"
#include "core/run_control.h"
#include "data/file_identity.h"
#include "data/loader.h"
#include "data/blend.h"
#include "data/sft_data.h"
#include "data/token_data.h"
#include "dist/parallel_dims.h"
#include "parallel/parallelize.h"
#include "plan/memory_fit.h"
#include "plan/planner.h"
#include "parallel/buckets.h"
#include "models/transformer.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "observe/evaluate.h"
#include "observe/task_eval.h"
#include "plan/gemm_peak.h"
#include "checkpoint/flash_checkpoint.h"
#include "optim/spike_guard.h"
#include "dist/straggler.h"
#include "observe/channel_losses.h"
#include "observe/train_log.h"
#include "parallel/dp_report.h"
#include "train/step_hooks.h"
#include "train/train_config.h"

namespace zt::train_internal {
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The run a checkpoint belongs to (checkpoint/run_folder.h): recorded for `latest` and pruning;
// loading restores nothing (the chief reads it from the checkpoint to carry the run id on).
struct RunTag final : Stateful {
  std::string run_id;
  int64_t attempt = 0;
  void save_state(StateWriter& w) const override {
    w.put_json("ztrain.run_id", run_id);
    w.put_json("ztrain.attempt", attempt);
  }
  void load_state(StateReader&) override {}
};

// The run's own components of a checkpoint at optimizer step `step`: where the data, the RNG and
// the schedule stand, which data and run (Trainer::components adds the others).
struct RunState {
  RunState(const TrainConfig& c, int64_t seqs_per_step, int T, const optim::Schedule& s, int64_t step,
           const FileIdentity& train, const RunTag& tag, std::vector<DataStage>* stages)
      : cursor(seqs_per_step, T, c.data.shuffle, step, stages),
        rng(c.model.seed, c.data.seed),
        schedule(s, step),
        data(train, c.data.allow_change),
        tag(tag) {}
  std::vector<Stateful*> parts() { return {&cursor, &rng, &schedule, &data, &tag}; }
  DataCursor cursor;
  RngState rng;
  optim::ScheduleState schedule;
  DataIdentity data;
  RunTag tag;
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, dist::Communicator& world);
  void run();

 private:
  void cap_device_memory();
  // Offload to disk under --max_host_memory: the engine's share of the cap.
  void set_offload_budget(parallel::DiskOffload& d) const;
  void load_data();
  void plan_steps();
  void load_sft_data();
  // --eval_tasks / --eval_probes: read and tokenized once (trainer_hooks.cpp).
  void load_eval_tasks();
  void prepare_output_dir();
  void build_model_and_engine();
  std::unique_ptr<HfWeights> load_frozen_base(const HfWeights* hf);  // LoRA (trainer.cpp)
  void resume();
  std::unique_ptr<StateReader> resume_source(std::string* dir_out, std::string* save_id_out);
  void begin_data_stage(const std::string& context_change);
  void start_flash();
  void start_run(const CheckpointRef* resumed, const std::string& resumed_dir = "");
  void start_loader_and_log();
  void start_loader(int64_t step);
  StepResult train_step(int64_t step);
  void fail_for_test(int64_t step) const;
  float test_corruption(int64_t step) const;
  float grad_scale(const MicroBatch& first, double loss_scale) const;
  bool update_allowed(StepResult& r);
  // Sophia: the step's micro-batches again, on labels sampled from the model, into the
  // optimizer's curvature estimate (optim::Optimizer::update_curvature).
  void curvature_pass(int64_t step, double loss_scale, float scale);
  // Every component of a checkpoint, in one list for every use (save, resume, rollback, the
  // flash snapshot's size): the run's (rs), the parallel model's (parameters, optimizer, in the
  // global layout), the loss scaler, local SGD, the spike guard and, once it exists, the log.
  std::vector<Stateful*> components(RunState& rs);
  // The step hooks (step_hooks.h), in their order: flash checkpoints and the straggler check (both
  // vote at the step boundary), the slow-rank test hook, spike handling, logging, evaluation, saves.
  struct FlashHook;
  struct StragglerHook;
  struct SlowRankHook;
  struct SpikeHook;
  struct LogHook;
  struct EvalHook;
  struct SaveHook;
  void add_hooks();
  bool rejected(StepContext& c);
  void save(int64_t step);
  int step_vote(const StepContext& c);
  void stop_saved(int64_t step, int signo);
  bool handle_spike(int64_t step, const StepResult& r, int64_t* resume_at);
  int64_t rollback(int64_t step);
  void finish(double train_s);
  int64_t skipped_steps() const { return (scaler_ ? scaler_->skipped_steps() : 0) + spike_->skipped(); }
  // The LR schedule advances with optimizer steps taken, as HF's and DeepSpeed's schedulers
  // do: a step skipped for overflow does not move it.
  double lr_for(int64_t step) const { return sched_->lr_at(step - skipped_steps()); }
  void load_best_model();

  Clock::time_point t_start_ = Clock::now();
  const TrainConfig config_;
  dist::Communicator& world_;
  std::unique_ptr<dist::ProcessGrid> grid_;
  dist::Communicator* dp_comm_ = nullptr;
  bool chief_ = false;  // the only rank that prints and writes files
  // Short names for the settings read throughout (views of config_, not copies).
  const ModelConfig& cfg_ = config_.model.config;
  const FileIdentity& train_id_ = config_.data.identity;
  std::unique_ptr<OutputDirLock> lock_;  // the chief's, for the run's lifetime
  RunTag run_tag_;                       // the chief's; empty on the other ranks (they write no JSON)
  const int &rows_ = config_.data.micro_batch, &accumulation_ = config_.data.accumulation,
            &seq_len_ = config_.data.seq_len;
  const nn::ActPlan& plan_ = config_.precision.plan;  // precision and recomputation (after auto_find_batch_size)
  int64_t seqs_per_step_ = 0, steps_per_epoch_ = 0, total_steps_ = 0, log_every_ = 1, start_step_ = 0;
  std::unique_ptr<TokenFile> data_, val_;
  // Named data channels (data/blend.h; one unnamed channel for a plain file): their files, the
  // blend, the loss per channel (observe/channel_losses.h).
  const ChannelSpec& channels_ = config_.data.channels;
  std::unique_ptr<BlendedSource> blend_;
  std::unique_ptr<ChannelLosses> chan_;
  std::unique_ptr<WindowSampler> sampler_;
  int64_t train_sequences_ = 0;
  // SFT (a .jsonl --train_file): tokenized examples and the rows the loader reads.
  const bool& sft_ = config_.data.sft;
  // One per channel (data/blend.h; one for a plain .jsonl file).
  std::vector<std::unique_ptr<SftTokens>> sft_train_;
  std::vector<std::unique_ptr<SftRows>> sft_rows_;
  std::unique_ptr<SftTokens> sft_val_;
  std::unique_ptr<SftRows> sft_val_rows_;
  std::unique_ptr<TaskEval> tasks_;  // --eval_tasks / --eval_probes, scored at each evaluation
  std::unique_ptr<Transformer> model_;
  const DeviceKind& device_ = config_.parallel.device;  // --device, resolved (apps/run_device.h)
  GemmPeak gpu_peak_;                                   // the GPU's GEMM peak, measured before the model moves there
  const HfSideFiles& side_files_ = config_.model.side_files;  // tokenizer + generation config, carried into saves
  int64_t eval_every_ = 0, save_every_ = 0;                   // steps between evaluations / saves (0: none)
  bool final_eval_ = true;
  // --load_best_model_at_end (the chief's): the best metric so far, its step and checkpoint.
  double best_metric_ = 0;
  int64_t best_step_ = -1;
  std::string best_checkpoint_;
  double weights_s_ = 0, startup_s_ = 0;
  std::unique_ptr<optim::Schedule> sched_;
  // The model with the run's parallelism applied (parallel/parallelize.h): how a step is
  // computed across ranks.
  std::unique_ptr<parallel::ParallelModel> parallel_;
  // A pipeline step's micro-batches, held for its schedule; and a Sophia curvature step's.
  std::vector<MicroBatch> held_batches_;
  // fp16: the loss scaler (DeepSpeed's rules); bf16: a fixed scale of 1 that only counts the
  // steps skipped for inf/NaN gradients (bf16.check_grad_overflow). None in fp32.
  std::unique_ptr<optim::LossScaler> scaler_;
  std::unique_ptr<StateReader> resumed_;  // a checkpoint folder, or a flash snapshot
  LoaderConfig loader_config_;
  // The run's data stages (data/loader.h): one, or more after long-context resumes
  // (train/context_stage.h); the last is current. stage_entry_: its log_history record, to add.
  std::vector<DataStage> stages_;
  nlohmann::json stage_entry_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<TrainLog> log_;
  nlohmann::json model_states_ = nlohmann::json::object();  // empty when no step runs (resumed at the end)
  int64_t last_saved_step_ = -1;
  std::unique_ptr<FlashCheckpointer> flash_;               // --flash_checkpoint
  std::unique_ptr<SpikeGuard> spike_;                      // --spike_policy; NaN / Inf never reach the weights
  int64_t rollback_target_ = -1, rollbacks_in_a_row_ = 0;  // --spike_max_rollbacks
  std::unique_ptr<StragglerMonitor> straggler_;            // with more than one rank: per-rank step work
  std::vector<std::unique_ptr<StepHook>> hooks_;
};

}  // namespace zt::train_internal
