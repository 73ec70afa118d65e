// trainer_loop.cpp: the Trainer's step loop (trainer_impl.h): one optimizer step over the
// micro-batches (or a pipeline schedule), the step's bookkeeping (logging, evaluation, saves), the
// ranks' vote at each step boundary (stops, hangs), spike rollback, and the final reports.
#include "checkpoint/hf_export.h"
#include "plan/memory_estimate.h"
#include "train/context_stage.h"
#include "train/trainer_impl.h"

namespace zt::train_internal {
namespace fs = std::filesystem;

namespace {
// The step's micro-batches from the loader, as the parallel model asks for them. The first was
// read by train_step (an SFT step's counted targets set the gradient scale); under a pipeline each
// is copied, since the loader's ring reuses its buffers before the schedule is done.
class StepBatches final : public parallel::MicroBatchSource {
 public:
  StepBatches(DataLoader& loader, const MicroBatch& first, int64_t step, std::vector<MicroBatch>* held,
              ChannelLosses* channels)
      : loader_(loader), first_(first), step_(step), held_(held), channels_(channels) {}
  parallel::PipelineMicroBatch next(int micro) override {
    const MicroBatch* mb = micro == 0 ? &first_ : &loader_.next();
    ZT_ASSERT(mb->step == step_ && mb->micro == micro);
    if (held_) {
      if (held_->size() <= size_t(micro)) held_->resize(size_t(micro) + 1);
      (*held_)[size_t(micro)] = *mb;
      mb = &(*held_)[size_t(micro)];
    }
    current_ = mb;
    return {mb->inputs.data(), mb->targets.data(), mb->pos()};
  }
  void backward_done(int, const parallel::PipelineMicroBatch& local) override {
    if (channels_) channels_->add(current_->channels, local.targets);
  }

 private:
  DataLoader& loader_;
  const MicroBatch& first_;
  int64_t step_;
  std::vector<MicroBatch>* held_;
  ChannelLosses* channels_;
  const MicroBatch* current_ = nullptr;
};
}  // namespace

// One optimizer step through the parallel model: micro-batches, reductions, clip, update.
StepResult Trainer::train_step(int64_t step) {
  // The loss scale multiplies the gradients (fp16); the loss itself is reported unscaled. The
  // mean is over the step's counted targets: all of them for token files; for SFT, those not
  // ignored (prompt tokens, padding), counted over the whole global step by the loader.
  const double loss_scale = scaler_ ? scaler_->scale_exact() : 1.0;
  float grad_scale = float(loss_scale / (double(seqs_per_step_) * seq_len_));
  // Local SGD: a group's all-reduce sums its own ranks only, so its gradient is its share of the
  // global batch scaled up to a mean over that share.
  if (parallel_->local_sgd()) grad_scale *= float(grid_->dp_replicate().size());
  parallel_->begin_step();
  if (c_.test.fail_step == step && world_.rank() == c_.test.fail_rank)  // test hook, set by apps/
    throw Error(
        str_cat("ZT_TEST_FAIL_AT=", c_.test.fail_rank, ":", c_.test.fail_step, ": deliberate failure at step ", step));
  // Test hook: the data of one step corrupted (its loss and gradients scaled; not under a pipeline).
  const int64_t spike_key = step + 1 + (c_.test.spike_by_state ? 0 : spike_->data_offset_steps());
  const float corrupt = c_.test.spike_step == spike_key ? float(c_.test.spike_factor) : 1.0f;
  const MicroBatch& first = loader_->next();
  if (sft_) grad_scale = first.step_targets > 0 ? float(loss_scale / double(first.step_targets)) : 0.0f;
  StepBatches batches(*loader_, first, step, parallel_->pipelined() ? &held_batches_ : nullptr,
                      parallel_->pipelined() ? nullptr : chan_.get());
  parallel::StepLoss loss = parallel_->forward_backward(batches, grad_scale, corrupt);
  parallel_->finish_grads(loss);  // the loss summed over the ranks too
  StepResult r;
  r.loss = loss.count > 0 ? loss.sum / loss.count : 0.0;  // a step of prompt-only rows trains nothing
  // Under mixed precision a non-finite loss is an overflow like inf/NaN gradients (the global
  // norm, the same on every rank): the scaler skips the step. Otherwise the spike guard judges.
  ZT_PROFILE("optimizer");
  r.grad_norm = parallel_->grad_norm() / loss_scale;
  if (scaler_) {
    const bool overflow = !std::isfinite(r.grad_norm) || !std::isfinite(r.loss);
    r.skipped = scaler_->update(overflow);  // throws when the scale cannot go lower
    if (r.skipped) return r;
  }
  // NaN / Inf, or a spike under --spike_policy: no update; the caller applies the policy.
  r.spike = spike_->judge(r.loss, r.grad_norm);
  if (r.spike.bad) return r;
  spike_->accept(r.loss, r.grad_norm);
  if (flash_) flash_->wait_copied();  // the update changes what a flash snapshot is copying
  parallel_->clip(r.grad_norm, c_.optim.max_grad_norm, 1.0 / loss_scale);
  parallel_->step(lr_for(step));
  return r;
}

void Trainer::after_step(int64_t step, const StepResult& r, double step_s) {
  if (step == start_step_) {
    // What this rank holds for training after one step, by category (ZeRO's model states).
    const MemStats ms = mem_stats();
    for (MemCategory c : {MemCategory::parameters, MemCategory::gradients, MemCategory::optimizer_state,
                          MemCategory::temporary, MemCategory::activations})
      model_states_[mem_category_name(c)] = ms.current[size_t(c)];
  }
  // HF's --logging_first_step logs step 1 too, whatever --logging_strategy says.
  const bool log_now =
      (c_.logging.first_step && step == 0) ||
      (c_.logging.strategy != Interval::no && (step + 1 == total_steps_ || (step + 1) % log_every_ == 0));
  // The loss per channel: a collective over the data-parallel ranks at logging steps.
  const auto* channel_losses = chan_ && log_now ? &chan_->reduce(grid_->dp_cp()) : nullptr;
  // HF logs the learning rate the scheduler holds after its step, i.e. the next one.
  if (log_) {
    std::vector<std::pair<const char*, double>> extra;
    if (scaler_ && c_.precision.fp16) extra.push_back({"loss_scale", scaler_->scale_exact()});
    if (scaler_) extra.push_back({"skipped_steps", double(scaler_->skipped_steps())});
    // Local SGD: bytes this rank sent across groups (hosts) per step so far in this run.
    if (const parallel::LocalSgd* l = parallel_->local_sgd())
      extra.push_back({"bytes_across_hosts_per_step", l->bytes_across() / double(step + 1 - start_step_)});
    if (parallel_->pipelined()) extra.push_back({"pipeline_bubble", parallel_->last_bubble()});
    if (straggler_) {
      extra.push_back({"slowest_rank", double(straggler_->slowest_rank())});
      extra.push_back({"slowest_rank_ratio", straggler_->slowest_ratio()});
    }
    if (spike_->policy() != SpikePolicy::none) {
      extra.push_back({"spike_skipped", double(spike_->skipped())});
      extra.push_back({"spike_rollbacks", double(spike_->rollbacks())});
    }
    if (channel_losses) extra.insert(extra.end(), channel_losses->begin(), channel_losses->end());
    log_->step_done(step + 1, r.loss, r.grad_norm, lr_for(step + 1), step_s, log_now, extra);
    if (straggler_ && log_now) {
      const std::string line = straggler_->window_line(step);
      if (!line.empty()) std::printf("%s\n", line.c_str());
    }
    if (step == start_step_) log_->first_step(startup_s_, weights_s_);
  }
  const bool eval_now = (eval_every_ > 0 && (step + 1) % eval_every_ == 0) || (final_eval_ && step + 1 == total_steps_);
  // Every rank whose forward is a collective evaluates (ParallelModel::begin_eval); the chief logs.
  bool best_now = false;
  if ((val_ || sft_val_rows_) && eval_now) {
    if (parallel_->begin_eval(chief_)) {
      const EvalShard* cs = parallel_->eval_shard();
      EvalResult e = sft_val_rows_ ? evaluate(*model_, *sft_val_rows_, rows_, seq_len_, c_.logging.max_eval_samples, cs)
                                   : evaluate(*model_, *val_, rows_, seq_len_, c_.logging.max_eval_samples,
                                              c_.data.packing ? loader_config_.eos_id : -1, c_.logging.eval_batch, cs);
      if (log_) log_->eval_done(step + 1, e);
      const double v = c_.checkpoint.metric == BestMetric::loss ? e.loss : e.perplexity;
      const bool greater = c_.checkpoint.greater_is_better;
      best_now = best_step_ < 0 || (greater ? v > best_metric_ : v < best_metric_);
      if (best_now) best_metric_ = v, best_step_ = step + 1;
    }
    parallel_->end_eval();
  }
  const bool will_save = save_every_ > 0 && save_every_ <= total_steps_;
  if (will_save && (step + 1) % save_every_ == 0) {
    save(step + 1);
    if (best_now)
      best_checkpoint_ = (fs::path(c_.checkpoint.output_dir) / ("checkpoint-" + std::to_string(step + 1))).string();
  }
}

// One way for every layout: shard owners write their pieces (no rank holds the full state
// under ZeRO), the chief the JSON state and the checksums.
void Trainer::save(int64_t step) {
  RunState rs(c_, seqs_per_step_, seq_len_, *sched_, step, train_id_, run_tag_, &stages_);
  const std::vector<Stateful*> parts = components(rs);
  // One id for every file of this save, the chief's: loading rejects a folder mixing saves.
  const std::string save_id = dist::broadcast_string(world_, chief_ ? random_id() : "", 0);
  last_saved_step_ = step;
  if (flash_) {
    StateCollector c;
    for (const Stateful* p : parts) p->save_state(c);
    flash_->snapshot(step, c, parallel_->checkpoint_shard(), save_id);  // reports its stall (chief)
    return;
  }
  checkpoint_save({c_.checkpoint.output_dir, step, parallel_->checkpoint_shard(), chief_, [&] { world_.barrier(); },
                   save_id, side_files_},
                  cfg_, {parts.begin(), parts.end()});
  if (chief_)
    checkpoint_prune(c_.checkpoint.output_dir, c_.checkpoint.save_total_limit,
                     c_.checkpoint.load_best_model_at_end ? best_checkpoint_ : "");
}

// At every step boundary the ranks agree, by a MAX all-reduce of two integers over the world
// (microseconds; docs/fault-tolerance.md): whether any rank was asked to stop (graceful
// preemption: all ranks stop after the same step even when the signal reached only one), and
// whether a flash checkpoint's shard is still being written on any rank (when none is, the
// chief seals the checkpoint). Returns the stop signal, or 0.
// The same all-reduce carries every rank's work time in the step (slot 2 + rank; the others
// contribute 0), which the straggler monitor judges.
int Trainer::step_vote(int64_t step, double step_s) {
  std::vector<double> v(2 + (straggler_ ? size_t(world_.size()) : 0), 0.0);
  v[0] = stop_requested();
  v[1] = flash_ && flash_->shard_pending() ? 1 : 0;
  if (straggler_) v[2 + size_t(world_.rank())] = straggler_->work_seconds(step_s);
  if (world_.size() > 1) world_.all_reduce(v.data(), v.size(), dist::ReduceOp::max);
  if (flash_) flash_->after_vote(v[1] != 0);
  if (straggler_) straggler_->judge(step, std::vector<double>(v.begin() + 2, v.end()));
  return int(v[0]);
}

// Every rank saves the state after `step` (unless this step was just saved) and the chief
// says where; the caller then returns, and the process exits 0.
void Trainer::stop_saved(int64_t step, int signo) {
  if (last_saved_step_ != step) save(step);
  if (flash_) flash_->finish();  // persisted and sealed; the shared memory is freed
  if (!chief_) return;
  std::fflush(stdout);
  std::printf(
      "ztrain: stopped by %s after step %lld of %lld; saved %s (continue with --resume_from_checkpoint latest)\n",
      stop_signal_name(signo), (long long)step, (long long)total_steps_,
      (fs::path(c_.checkpoint.output_dir) / ("checkpoint-" + std::to_string(step))).string().c_str());
  std::fflush(stdout);
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
      if (rollbacks_in_a_row_ > c_.optim.spike_max_rollbacks)
        throw JobError(str_cat(at, "; that makes ", rollbacks_in_a_row_, " rollbacks in a row to step ", *resume_at,
                               " (--spike_max_rollbacks ", c_.optim.spike_max_rollbacks,
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

// A resume at another sequence length or batch: the next data stage (train/context_stage.h),
// recorded in log_history once the log exists.
void Trainer::begin_data_stage(const std::string& context_change) {
  StageSwitch sw;
  sw.step = start_step_;
  sw.offset_steps = spike_->data_offset_steps();
  sw.T = seq_len_;
  sw.per_step = seqs_per_step_;
  sw.shuffle = c_.data.shuffle;
  sw.allow_data_change = c_.data.allow_change;
  sw.single_token_file = data_ != nullptr;
  sw.file_tokens = data_ ? data_->size() : 0;
  const DataStage from = stages_.back();
  stages_ = next_data_stage(stages_, sw);
  const DataStage& to = stages_.back();
  stage_entry_ = stage_history_entry(from, to, cfg_, context_change);
  if (!chief_) return;
  std::printf(
      "Data stage %zu from step %lld: %d-token sequences (was %d), %lld per step (was %lld), %s%s\n", stages_.size(),
      (long long)to.step, to.T, from.T, (long long)to.per_step, (long long)from.per_step,
      sw.shuffle ? "a fresh shuffled order" : str_cat("the token stream continuing at token ", to.first_token).c_str(),
      context_change.empty() ? "" : str_cat("; ", context_change).c_str());
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
    if (chief_) dir = checkpoint_find_latest(c_.checkpoint.output_dir, &save_id);
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
  RunState rs(c_, seqs_per_step_, seq_len_, *sched_, 0, train_id_, run_tag_, &stages);
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

// The loader from optimizer step `step` over the run's source: the channel blend, the SFT rows or
// the token file.
void Trainer::start_loader(int64_t step) {
  loader_ = blend_ ? std::make_unique<DataLoader>(*blend_, loader_config_, step)
            : sft_ ? std::make_unique<DataLoader>(*sft_rows_[0], loader_config_, step)
                   : std::make_unique<DataLoader>(*data_, loader_config_, step);
}

void Trainer::run() {
  const auto t_train = Clock::now();
  for (int64_t step = start_step_; step < total_steps_; ++step) {
    const auto t_step = Clock::now();
    train_step_set(step + 1);  // named by the collective watchdog (--ddp_timeout)
    if (straggler_) straggler_->step_begins();
    if (c_.test.slow_rank == world_.rank())
      std::this_thread::sleep_for(std::chrono::duration<double>(c_.test.slow_seconds));
    const StepResult r = train_step(step);
    int64_t resume_at = -1;
    if (r.spike.bad && handle_spike(step, r, &resume_at)) {
      step = resume_at - 1;  // rolled back: the loop goes on from the restored step
      continue;
    }
    // Local SGD's outer sync follows every H-th step whether or not the inner update was
    // skipped (an overflow seen by one group only), so every group meets at the same steps.
    parallel_->after_step(step);
    // The vote comes before the step's log, which then names its slowest rank. A stop request
    // after the last step changes nothing: the run finishes as usual.
    const double step_s = seconds_since(t_step);
    const int signo = step_vote(step, step_s);
    after_step(step, r, step_s);
    if (signo && step + 1 < total_steps_) return stop_saved(step + 1, signo);
  }
  finish(seconds_since(t_train));
}

// --load_best_model_at_end: the parameters of the best evaluated checkpoint replace the final
// ones before --output_dir is written (every rank loads its part; the chief decides which).
void Trainer::load_best_model() {
  if (!c_.checkpoint.load_best_model_at_end) return;
  const std::string dir = dist::broadcast_string(world_, chief_ ? best_checkpoint_ : "", 0);
  if (dir.empty() || best_step_ == total_steps_) return;  // the final weights are the best (or none saved)
  if (chief_)
    std::printf("Loading best model from %s (%s %.6g at step %lld).\n", dir.c_str(), c_.checkpoint.metric_name.c_str(),
                best_metric_, (long long)best_step_);
  CheckpointReader reader(dir, cfg_);
  reader.load(parallel_->param_components());
  parallel_->sync_after_load();
}

std::vector<Stateful*> Trainer::components(RunState& rs) {
  std::vector<Stateful*> parts = parallel_->state_components(rs.parts());
  if (scaler_) parts.push_back(scaler_.get());
  if (parallel::LocalSgd* l = parallel_->local_sgd()) parts.push_back(l);
  parts.push_back(spike_.get());
  if (log_) parts.push_back(log_.get());
  return parts;
}

void Trainer::finish(double train_s) {
  if (flash_) flash_->finish();  // the last flash checkpoint persisted; the shared memory freed
  const int64_t steps_run = std::max<int64_t>(1, total_steps_ - start_step_);
  const parallel::DataParallel& engine = parallel_->engine();
  nlohmann::json report = engine.describe();
  report["communication"] = parallel::comm_report(engine, steps_run, accumulation_);
  report["model_state_bytes"] = model_states_;
  const int hpz = c_.parallel.engine.hpz_partition_size, group = hpz > 1 ? hpz : grid_->dp_cp().size();
  report["zero_paper_model_state_bytes"] =
      parallel::zero_paper_bytes(engine.held_params(), c_.parallel.engine.stage, group,
                                 double(parallel_->engine().optimizer().state_bytes_per_param()));
  report["peak_rss_bytes"] = peak_rss_bytes();
  if (device_ == DeviceKind::cuda) {
    // Every GPU allocation of ztrain goes through core/device.h's device_alloc, whose peak this is;
    // the estimate is `ztrain estimate-memory --device cuda`'s for this run (plan/memory_estimate.h).
    const double peak = double(device_allocated_peak());
    const double est = double(parallel::estimate_gpu_memory(cfg_, parallel::memory_inputs(cfg_, rows_, seq_len_, plan_),
                                                            rows_, seq_len_, plan_, c_.parallel.engine.optim,
                                                            c_.parallel.engine.offload_optimizer == "cpu")
                                  .total());
    report["gpu_peak_bytes"] = peak;
    report["gpu_estimate_bytes"] = est;
    if (chief_)
      std::printf("  GPU memory: peak %s, estimate-memory --device cuda %s (peak / estimate %.3f)\n",
                  format_bytes(peak).c_str(), format_bytes(est).c_str(), peak / est);
    if (chief_ && report.contains("offload")) {  // ZeRO-Offload's step and its parts (docs/gpu.md)
      const nlohmann::json& o = report["offload"];
      std::printf(
          "  Offload: step's optimizer phase %.3f s (CPU optimizer %.3f s, waiting for copies %.3f s); "
          "%s host<->device per step, %.3f s at the measured %.1f / %.1f GB/s (down / up)\n",
          o["step_s"].get<double>(), o["cpu_optimizer_s"].get<double>(), o["copy_wait_s"].get<double>(),
          format_bytes(o["bytes_per_step"].get<double>()).c_str(), o["copy_s"].get<double>(),
          o["d2h_GBps"].get<double>(), o["h2d_GBps"].get<double>());
    }
  }
  report.update(parallel_->report(steps_run, cfg_));
  load_best_model();
  const nlohmann::json pipe_report = parallel_->pipeline_report(steps_run, cfg_);
  // One HF folder, streamed to the chief tensor by tensor from the ranks that write checkpoint
  // pieces (any layout): no rank gathers the whole model (hf_export.h).
  hf_export_streamed(world_, parallel_->param_components(), parallel_->checkpoint_shard().index >= 0, cfg_,
                     c_.checkpoint.output_dir, c_.checkpoint.save_dtype, c_.checkpoint.max_shard_bytes);
  if (!chief_) return;
  hf_write_side_files(c_.checkpoint.output_dir, side_files_);
  if (dp_comm_->size() > 1 || c_.parallel.engine.stage > 0) parallel::print_dp_report(report, model_states_);
  if (parallel_->pipelined()) {
    std::printf(
        "  Pipeline bubble (idle / step time, mean over stages, steps after the first): %.4f (per stage %s); "
        "ideal %.4f\n",
        pipe_report["bubble"].get<double>(), pipe_report["bubble_per_stage"].dump().c_str(),
        pipe_report["ideal_bubble"].get<double>());
    std::printf("  Pipeline bytes sent per step by stage: %s (formula: %s)\n",
                pipe_report["send_bytes_per_step"].dump().c_str(),
                pipe_report["formula_bytes_per_step"].dump().c_str());
    log_->add_results({{"pipeline", pipe_report}});
  }
  if (straggler_) log_->add_results({{"stragglers", straggler_->summary()}});
  log_->add_results({{"data_parallel", report}});
  log_->finish(train_s, loader_->wait_seconds());
  prof::report();
}

}  // namespace zt::train_internal
