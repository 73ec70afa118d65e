// train_log.h: what a training run tells its user: the HF start-up block, a line per
// logging step, the closing metrics block with memory by category, and the files HF
// writes (trainer_state.json with log_history at full precision, train_results.json).
// It holds the trainer's counters (global step, log history, the running loss sum), which
// checkpoints save through the state interface (core/state.h) like every other component.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/state.h"
#include "models/config.h"
#include "models/transformer.h"
#include "observe/evaluate.h"
#include "observe/task_eval.h"
#include "plan/gemm_peak.h"

namespace zt {

// What the log takes from the run's arguments (the trainer fills it): where it writes, how it
// reports, and what trainer_state.json records of the batch, the intervals and the seeds.
struct TrainLogOptions {
  std::string output_dir;
  std::string logging_dir;  // "" = output_dir/runs/<run_name> or HF's <date>_<host>
  std::string run_name;
  std::string report_to = "tensorboard";  // tensorboard | none
  std::string disable_tqdm = "auto";      // auto | true | false: the live progress line
  bool plot = false;                      // output_dir/loss.png at the end
  int micro_batch = 1, accumulation = 1;  // per rank
  int threads = 0;                        // as given (0: all cores)
  double logging_steps = 500;
  int64_t save_steps = 500;
  bool shuffle = true;
  int64_t seed = 42, data_seed = 42;  // data_seed resolved (HF's None = seed)
};

class TrainLog final : public Stateful {
 public:
  TrainLog(const TrainLogOptions& o, const Transformer& model, int64_t total_steps, int64_t steps_per_epoch, int T,
           int64_t resume_step, int world_size = 1);
  void print_header(int64_t num_examples, int64_t seqs_per_step) const;
  // Records an optimizer step; emits a log entry when `log` is set.
  // extra: more named values for the step (mixed precision: loss_scale, skipped_steps), in
  // metrics.jsonl, the logged dict, trainer_state.json's log_history and TensorBoard (train/<name>).
  void step_done(int64_t step, double loss, double grad_norm, double lr, double step_s, bool log,
                 const std::vector<std::pair<const char*, double>>& extra = {});
  // More values for the next step's metrics.jsonl row only, where arrays fit (a mixture of
  // experts' tokens per expert per layer); merged into the row, then dropped.
  void set_step_detail(nlohmann::json j) { step_detail_ = std::move(j); }
  void first_step(double startup_s, double weights_s) const;
  // tasks: the --eval_tasks / --eval_probes metrics of the same evaluation (null: none), in the
  // same entry and under their own TensorBoard tags (observe/task_eval.h), their summaries printed.
  void eval_done(int64_t step, const EvalResult& r, const TaskEvalResult* tasks = nullptr);
  // trainer_state.json as HF writes it, plus ztrain's resume state under "ztrain" (the
  // counters below, the data cursor and the seed), as the final file of a run.
  nlohmann::json trainer_state() const;
  void write_trainer_state(const std::string& dir) const;
  // Checkpoints: HF's TrainerState fields (global_step, log_history, ...) and
  // "ztrain.loss_sum"; loading continues the run from them.
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;
  // Extra keys merged into train_results.json (e.g. the data-parallel report).
  void add_results(const nlohmann::json& j) { extra_results_.update(j); }
  // An entry of log_history that is not a step's log (a data stage, train/context_stage.h).
  void add_history(const nlohmann::json& entry) { history_.push_back(entry); }
  // The GEMM peak MFU is reported against (given or measured, gemm_peak.h), before print_header.
  void set_peak(const GemmPeak& p);
  // data_wait_s: time the step loop spent blocked on the data loader.
  void finish(double train_s, double data_wait_s);
  const std::string& tensorboard_dir() const { return tb_dir_; }

 private:
  double epoch_at(int64_t step) const { return double(step) / double(steps_per_epoch_); }
  void progress(int64_t step, double loss, double grad_norm, double lr, double step_s);
  void clear_progress();
  void write_plot() const;

  TrainLogOptions options_;
  GemmPeak peak_;
  const Transformer& model_;
  int64_t total_steps_, steps_per_epoch_;
  int T_;
  int world_ = 1;  // data-parallel ranks: tokens and samples per step count all of them
  nlohmann::json extra_results_ = nlohmann::json::object();
  nlohmann::json step_detail_;  // set_step_detail: null when none
  double tokens_per_step_, flops_per_token_;
  int64_t step_ = 0, last_logged_ = 0;
  double loss_total_ = 0, loss_since_log_ = 0, time_since_log_ = 0;
  nlohmann::json history_ = nlohmann::json::array();
  nlohmann::json last_eval_;
  std::unique_ptr<class JsonlLog> jsonl_;  // metrics.jsonl: one line per optimizer step and per eval
  std::unique_ptr<class TfEventsWriter> tensorboard_;
  std::string tb_dir_;
  bool progress_ = false;  // live line on stderr
  bool progress_shown_ = false;
  double ema_step_s_ = 0;

 public:
  ~TrainLog() override;
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;
};

}  // namespace zt
