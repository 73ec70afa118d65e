// trainer_hooks.cpp: the Trainer's step hooks (step_hooks.h), registered once by add_hooks: what
// follows a step of the loop (trainer_loop.cpp) in a fixed order. Flash checkpoints and the
// straggler check vote at the step boundary; a rejected update (non-finite, a spike) is handled
// by the spike policy, possibly rolling back; then the step is logged, evaluated and saved.
#include "train/trainer_impl.h"

namespace zt::train_internal {
namespace fs = std::filesystem;

// --flash_checkpoint: whether some rank's shard is still being written; when none is, the chief
// seals the checkpoint.
struct Trainer::FlashHook final : StepHook {
  explicit FlashHook(FlashCheckpointer& f) : flash(f) {}
  size_t vote_slots() const override { return 1; }
  void vote_put(const StepContext&, double* v) override { v[0] = flash.shard_pending() ? 1 : 0; }
  void vote_get(const StepContext&, const double* v) override { flash.after_vote(v[0] != 0); }
  FlashCheckpointer& flash;
};

// More than one rank: every rank's work time in the step (its own slot of the vote), judged
// against the median rank's (dist/straggler.h).
struct Trainer::StragglerHook final : StepHook {
  StragglerHook(StragglerMonitor& m, const dist::Communicator& w) : monitor(m), world(w) {}
  void before_step(int64_t) override { monitor.step_begins(); }
  size_t vote_slots() const override { return size_t(world.size()); }
  void vote_put(const StepContext& c, double* v) override { v[world.rank()] = monitor.work_seconds(c.step_s); }
  void vote_get(const StepContext& c, const double* v) override {
    monitor.judge(c.step, std::vector<double>(v, v + world.size()));
  }
  StragglerMonitor& monitor;
  const dist::Communicator& world;
};

// Test hook (ZT_TEST_SLOW_RANK, set by apps/): this rank sleeps at the start of every step, a
// straggler for tests/dist/straggler.sh.
struct Trainer::SlowRankHook final : StepHook {
  explicit SlowRankHook(double s) : seconds(s) {}
  void before_step(int64_t) override { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }
  double seconds;
};

// --spike_policy: a step whose update was not applied.
struct Trainer::SpikeHook final : StepHook {
  explicit SpikeHook(Trainer& t) : t(t) {}
  bool after_rejected(StepContext& c) override { return t.handle_spike(c.step, c.result, &c.resume_at); }
  Trainer& t;
};

// The step's log entry (every step: the progress line, trainer_state.json at logging steps), and
// after the first step what this rank holds for training, by category (ZeRO's model states).
struct Trainer::LogHook final : StepHook {
  explicit LogHook(Trainer& t) : t(t) {}
  void after_step(StepContext& c) override;
  Trainer& t;
};

// Evaluation every eval_every_ steps and at the end; the best metric so far.
struct Trainer::EvalHook final : StepHook {
  explicit EvalHook(Trainer& t) : t(t) {}
  void after_step(StepContext& c) override;
  Trainer& t;
};

// A checkpoint every save_every_ steps.
struct Trainer::SaveHook final : StepHook {
  explicit SaveHook(Trainer& t) : t(t) {}
  void after_step(StepContext& c) override;
  Trainer& t;
};

void Trainer::add_hooks() {
  if (flash_) hooks_.push_back(std::make_unique<FlashHook>(*flash_));
  if (straggler_) hooks_.push_back(std::make_unique<StragglerHook>(*straggler_, world_));
  if (config_.test.slow_rank == world_.rank())
    hooks_.push_back(std::make_unique<SlowRankHook>(config_.test.slow_seconds));
  hooks_.push_back(std::make_unique<SpikeHook>(*this));
  hooks_.push_back(std::make_unique<LogHook>(*this));
  hooks_.push_back(std::make_unique<EvalHook>(*this));
  hooks_.push_back(std::make_unique<SaveHook>(*this));
}

bool Trainer::rejected(StepContext& c) {
  for (const auto& h : hooks_)
    if (h->after_rejected(c)) return true;
  return false;
}

namespace {
// A mixture of experts' router statistics of the step (models/model_runtime.h: this rank's passes):
// the losses and drops as logged values; each layer's tokens per expert and its balance (the
// busiest expert's load over the mean load: 1 is even, E all on one) in metrics.jsonl.
void moe_step_log(const MoeStats& s, int E, std::vector<std::pair<const char*, double>>* extra, nlohmann::json* row) {
  if (s.passes == 0 || E == 0) return;
  extra->push_back({"aux_loss", s.aux_loss / double(s.passes)});
  extra->push_back({"router_z_loss", s.z_loss / double(s.passes)});
  extra->push_back({"moe_dropped", double(s.dropped)});
  nlohmann::json load = nlohmann::json::array(), balance = nlohmann::json::array();
  double worst = 0;
  for (size_t l = 0; l * size_t(E) < s.load.size(); ++l) {
    const auto first = s.load.begin() + std::ptrdiff_t(l * size_t(E));
    const std::vector<int64_t> layer(first, first + E);
    int64_t sum = 0, most = 0;
    for (int64_t v : layer) sum += v, most = std::max(most, v);
    const double b = sum > 0 ? double(most) * E / double(sum) : 0.0;
    worst = std::max(worst, b);
    load.push_back(layer);
    balance.push_back(b);
  }
  extra->push_back({"moe_max_balance", worst});
  *row = {{"moe_tokens_per_expert", load}, {"moe_balance", balance}};
}
// Under a pipeline each stage counted its own layers' loads, and the last stage the losses: summed
// over the stages (a collective over the pp group).
void sum_over_stages(dist::Communicator& pp, const ModelConfig& cfg, MoeStats* s) {
  const size_t LE = size_t(cfg.n_layer) * size_t(cfg.moe.num_experts);
  s->load.resize(LE, 0);
  std::vector<double> v{double(s->passes), s->aux_loss, s->z_loss, double(s->dropped)};
  v.insert(v.end(), s->load.begin(), s->load.end());
  pp.all_reduce(v.data(), v.size());
  s->passes = int64_t(v[0]), s->aux_loss = v[1], s->z_loss = v[2], s->dropped = int64_t(v[3]);
  for (size_t i = 0; i < LE; ++i) s->load[i] = int64_t(v[4 + i]);
}
}  // namespace

void Trainer::LogHook::after_step(StepContext& c) {
  const int64_t step = c.step;
  if (step == t.start_step_) {
    const MemStats ms = mem_stats();
    for (MemCategory m : {MemCategory::parameters, MemCategory::gradients, MemCategory::optimizer_state,
                          MemCategory::temporary, MemCategory::activations})
      t.model_states_[mem_category_name(m)] = ms.current[size_t(m)];
  }
  // HF's --logging_first_step logs step 1 too, whatever --logging_strategy says.
  const bool log_now =
      (t.config_.logging.first_step && step == 0) ||
      (t.config_.logging.strategy != Interval::no && (step + 1 == t.total_steps_ || (step + 1) % t.log_every_ == 0));
  // The loss per channel: a collective over the data-parallel ranks at logging steps.
  const auto* channel_losses = t.chan_ && log_now ? &t.chan_->reduce(t.grid_->dp_cp()) : nullptr;
  MoeStats moe = t.model_->runtime().take_moe_stats();  // every rank: the statistics restart each step
  if (t.parallel_->pipelined() && t.model_->config().moe.on()) sum_over_stages(t.grid_->pp(), t.model_->config(), &moe);
  if (!t.log_) return;
  std::vector<std::pair<const char*, double>> extra;
  nlohmann::json moe_detail;
  moe_step_log(moe, t.model_->config().moe.num_experts, &extra, &moe_detail);
  if (moe_detail.is_object()) t.log_->set_step_detail(std::move(moe_detail));
  if (t.scaler_ && t.config_.precision.fp16) extra.push_back({"loss_scale", t.scaler_->scale_exact()});
  if (t.scaler_) extra.push_back({"skipped_steps", double(t.scaler_->skipped_steps())});
  // Local SGD: bytes this rank sent across groups (hosts) per step so far in this run.
  if (const parallel::LocalSgd* l = t.parallel_->local_sgd())
    extra.push_back({"bytes_across_hosts_per_step", l->bytes_across() / double(step + 1 - t.start_step_)});
  if (t.parallel_->pipelined()) extra.push_back({"pipeline_bubble", t.parallel_->last_bubble()});
  if (t.straggler_) {
    extra.push_back({"slowest_rank", double(t.straggler_->slowest_rank())});
    extra.push_back({"slowest_rank_ratio", t.straggler_->slowest_ratio()});
  }
  if (t.spike_->policy() != SpikePolicy::none) {
    extra.push_back({"spike_skipped", double(t.spike_->skipped())});
    extra.push_back({"spike_rollbacks", double(t.spike_->rollbacks())});
  }
  if (channel_losses) extra.insert(extra.end(), channel_losses->begin(), channel_losses->end());
  // HF logs the learning rate the scheduler holds after its step, i.e. the next one.
  t.log_->step_done(step + 1, c.result.loss, c.result.grad_norm, t.lr_for(step + 1), c.step_s, log_now, extra);
  if (t.straggler_ && log_now) {
    const std::string line = t.straggler_->window_line(step);
    if (!line.empty()) std::printf("%s\n", line.c_str());
  }
  if (step == t.start_step_) t.log_->first_step(t.startup_s_, t.weights_s_);
}

// Every rank whose forward is a collective evaluates (ParallelModel::begin_eval); the chief logs.
void Trainer::EvalHook::after_step(StepContext& c) {
  const int64_t step = c.step;
  const bool eval_now =
      (t.eval_every_ > 0 && (step + 1) % t.eval_every_ == 0) || (t.final_eval_ && step + 1 == t.total_steps_);
  if (!(t.val_ || t.sft_val_rows_) || !eval_now) return;
  if (t.parallel_->begin_eval(t.chief_)) {
    const EvalShard* cs = t.parallel_->eval_shard();
    const int64_t max_samples = t.config_.logging.max_eval_samples;
    EvalResult e = t.sft_val_rows_ ? evaluate(*t.model_, *t.sft_val_rows_, t.rows_, t.seq_len_, max_samples, cs)
                                   : evaluate(*t.model_, *t.val_, t.rows_, t.seq_len_, max_samples,
                                              t.config_.data.packing ? t.loader_config_.eos_id : -1,
                                              t.config_.logging.eval_batch, cs);
    // The tasks and probes on the same weights, in the rows planned for training.
    const TaskEvalResult te = t.tasks_ ? t.tasks_->run(*t.model_, t.rows_, t.seq_len_) : TaskEvalResult{};
    if (t.log_) t.log_->eval_done(step + 1, e, t.tasks_ ? &te : nullptr);
    const double v = t.config_.checkpoint.metric == BestMetric::loss ? e.loss : e.perplexity;
    const bool greater = t.config_.checkpoint.greater_is_better;
    c.best_now = t.best_step_ < 0 || (greater ? v > t.best_metric_ : v < t.best_metric_);
    if (c.best_now) t.best_metric_ = v, t.best_step_ = step + 1;
  }
  t.parallel_->end_eval();
}

// Every rank reads the files (those whose forward is a collective score them too). The rows are the
// training rows: a context longer than --model_max_length loses its start, as in the harness.
void Trainer::load_eval_tasks() {
  const TrainConfig::Logging& l = config_.logging;
  if (l.eval_tasks.empty() && l.eval_probes.empty()) return;
  const char* flag = l.eval_tasks.empty() ? "--eval_probes" : "--eval_tasks";
  ZT_CHECK(grid_->cp().size() == 1, flag,
           " is not supported with context parallelism (each rank holds part of a row); evaluate the saved model "
           "with `ztrain eval --tasks/--probes`");
  ZT_CHECK(l.eval_probes.empty() || (grid_->tp().size() == 1 && device_ == DeviceKind::cpu),
           "--eval_probes ranks each answer among the whole vocabulary, which only the CPU's whole-vocabulary LM "
           "head computes (not under tensor parallelism or on a GPU); evaluate the saved model with `ztrain eval "
           "--probes`");
  const std::string& tok_path = config_.data.tokenizer_path;
  ZT_CHECK(!tok_path.empty(), flag,
           " needs a tokenizer: pass --tokenizer_name (a folder with tokenizer.json, tokenizer.model or "
           "encoder.json + vocab.bpe), or --model_name_or_path a folder with one");
  const std::unique_ptr<Tokenizer> tok = Tokenizer::load(tok_path);
  tasks_ = std::make_unique<TaskEval>(*tok, l.eval_tasks, l.eval_probes, cfg_.vocab_size);
  tasks_->check_fits(seq_len_);
  if (chief_ && tasks_->longest_row() > seq_len_)
    std::printf(
        "Note: some --eval_tasks / --eval_probes rows are %d tokens, longer than --model_max_length %d: "
        "their contexts lose their start (as lm-evaluation-harness truncates)\n",
        tasks_->longest_row(), seq_len_);
}

void Trainer::SaveHook::after_step(StepContext& c) {
  const int64_t every = t.save_every_, step = c.step;
  if (every <= 0 || every > t.total_steps_ || (step + 1) % every != 0) return;
  t.save(step + 1);
  if (c.best_now)
    t.best_checkpoint_ =
        (fs::path(t.config_.checkpoint.output_dir) / ("checkpoint-" + std::to_string(step + 1))).string();
}

// A step whose loss or gradient norm is non-finite, or a spike (spike_guard.h): no update was
// applied. Every rank decides the same (the values are reduced). Returns true after a rollback,
// with the step to go on from.
bool Trainer::handle_spike(int64_t step, const StepResult& r, int64_t* resume_at) {
  const std::string at = str_cat("step ", step + 1, ": ", r.spike.what);
  const SpikePolicy p = spike_->policy();
  if (p == SpikePolicy::none || p == SpikePolicy::stop)
    throw JobError(str_cat(at, "; the update was not applied (the weights are unchanged) and the run stops",
                           p == SpikePolicy::stop ? " (--spike_policy stop)" : "",
                           "; continue from the newest checkpoint with --resume_from_checkpoint latest, after "
                           "lowering --learning_rate or checking the data, or pass --spike_policy skip or rollback"));
  if (p == SpikePolicy::rollback) {
    *resume_at = rollback(step);
    if (*resume_at >= 0) {
      rollbacks_in_a_row_ = *resume_at == rollback_target_ ? rollbacks_in_a_row_ + 1 : 1;
      rollback_target_ = *resume_at;
      if (rollbacks_in_a_row_ > config_.optim.spike_max_rollbacks)
        throw JobError(str_cat(at, "; that makes ", rollbacks_in_a_row_, " rollbacks in a row to step ", *resume_at,
                               " (--spike_max_rollbacks ", config_.optim.spike_max_rollbacks,
                               "): a spike that returns after rolling back comes from the LR schedule or the state "
                               "rather than the data, so the run stops. The newest checkpoint is intact: resume from "
                               "it with --resume_from_checkpoint latest after lowering --learning_rate"));
      if (chief_)
        std::printf(
            "ztrain: %s; rolled back to step %lld and skipping the data of steps %lld-%lld "
            "(--spike_policy rollback; %lld rollbacks so far)\n",
            at.c_str(), (long long)*resume_at, (long long)*resume_at + 1, (long long)step + 1,
            (long long)spike_->rollbacks());
      return true;
    }
    if (chief_) std::printf("ztrain: %s; no checkpoint to roll back to yet: the update is skipped\n", at.c_str());
  }
  spike_->count_skip();
  if (chief_ && p == SpikePolicy::skip)
    std::printf("ztrain: %s; the update is skipped (--spike_policy skip; %lld skipped so far)\n", at.c_str(),
                (long long)spike_->skipped());
  return false;
}

// --spike_policy rollback: every component returns to the newest save (the flash snapshot in
// shared memory when there is one, else the newest checkpoint) and the data of the steps from
// there to the spike is skipped. The spike counters and the data offset are not rolled back.
// Returns the restored step, or -1 when nothing was saved yet.
int64_t Trainer::rollback(int64_t step) {
  std::unique_ptr<StateReader> reader;
  if (flash_) reader = flash_->last_snapshot();
  if (!reader) {
    std::string dir, save_id;
    if (chief_) dir = checkpoint_find_latest(config_.checkpoint.output_dir, &save_id);
    dir = dist::broadcast_string(world_, dir, 0);
    save_id = dist::broadcast_string(world_, save_id, 0);
    if (dir.empty()) return -1;
    // A checkpoint of an earlier data stage (a long-context resume) is not this stage's save.
    const int64_t saved_step = checkpoint_step_of(dir);
    if (stages_.size() > 1 && saved_step >= 0 && saved_step <= stages_.back().step) return -1;
    reader = std::make_unique<CheckpointReader>(dir, cfg_, false, save_id);
  }
  const SpikeGuard::Counters kept = spike_->counters();
  std::vector<DataStage> stages = stages_;
  RunState rs(config_, seqs_per_step_, seq_len_, *sched_, 0, train_id_, run_tag_, &stages);
  for (Stateful* c : components(rs)) c->load_state(*reader);  // saved in the global layout
  parallel_->sync_after_load();  // a pipeline's tied copy of the embedding, as after a resume
  const int64_t to = rs.cursor.step();
  ZT_CHECK(!rs.cursor.switched() && stages == stages_, reader->source(),
           " belongs to an earlier data stage (another --model_max_length or batch); a rollback stays within "
           "this stage: save a checkpoint in it first (--save_steps) or use --spike_policy skip");
  spike_->set_counters(kept);
  spike_->count_rollback(to, step + 1);
  loader_.reset();  // restarts at the restored step, past the skipped data
  loader_config_.step_offset = spike_->data_offset_steps();
  if (chan_) chan_->reset();  // the window's steps were undone
  start_loader(to);
  return to;
}

}  // namespace zt::train_internal
