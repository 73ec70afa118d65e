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
  // The loss scale multiplies the gradients (fp16); the loss itself is reported unscaled.
  const double loss_scale = scaler_ ? scaler_->scale_exact() : 1.0;
  parallel_->begin_step();
  // LoRA's dropout masks: a function of the seed, the data rank and the step (and the pass within
  // it), so a resumed run draws the masks the uninterrupted one would have, and the tensor-parallel
  // ranks of one batch share them (the same input to a column layer, the same mask).
  model_->runtime().set_dropout_seed(uint64_t(config_.model.seed) * 0x9E3779B97F4A7C15ull ^
                                     uint64_t(grid_->dp_cp().rank()) << 48 ^ uint64_t(step) << 8);
  fail_for_test(step);
  const float corrupt = test_corruption(step);
  const MicroBatch& first = loader_->next();
  const float scale = grad_scale(first, loss_scale);
  const int64_t k = parallel_->engine().optimizer().curvature_interval();
  const bool curvature = k > 0 && step % k == k - 1;  // Sophia's reference: iterations k-1, 2k-1, ...
  StepBatches batches(*loader_, first, step, parallel_->pipelined() || curvature ? &held_batches_ : nullptr,
                      parallel_->pipelined() ? nullptr : chan_.get());
  parallel::StepLoss loss = parallel_->forward_backward(batches, scale, corrupt);
  parallel_->finish_grads(loss);  // the loss summed over the ranks too
  StepResult r;
  r.loss = loss.count > 0 ? loss.sum / loss.count : 0.0;  // a step of prompt-only rows trains nothing
  ZT_PROFILE("optimizer");
  r.grad_norm = parallel_->grad_norm() / loss_scale;
  if (!update_allowed(r)) return r;
  if (flash_) flash_->wait_copied();  // the update changes what a flash snapshot is copying
  parallel_->clip(r.grad_norm, config_.optim.max_grad_norm, 1.0 / loss_scale);
  parallel_->step(lr_for(step));
  if (curvature) curvature_pass(step, loss_scale, scale);
  return r;
}

namespace {
// The micro-batches of the step just taken, from their held copies.
class HeldBatches final : public parallel::MicroBatchSource {
 public:
  explicit HeldBatches(const std::vector<MicroBatch>& held) : held_(held) {}
  parallel::PipelineMicroBatch next(int micro) override {
    const MicroBatch& mb = held_[size_t(micro)];
    return {mb.inputs.data(), mb.targets.data(), mb.pos()};
  }
  void backward_done(int, const parallel::PipelineMicroBatch&) override {}

 private:
  const std::vector<MicroBatch>& held_;
};
}  // namespace

void Trainer::curvature_pass(int64_t step, double loss_scale, float scale) {
  ZT_PROFILE("curvature");
  HeldBatches batches(held_batches_);
  parallel_->begin_step();
  // A stream of its own per step and rank: the draws are the same on a resumed run.
  const uint64_t seed =
      ((uint64_t(config_.data.seed) * 1000003ull + uint64_t(step)) << 20) + uint64_t(world_.rank()) + 1;
  model_->runtime().set_sampled_targets(seed);
  parallel::StepLoss loss = parallel_->forward_backward(batches, scale, 1.0f);
  model_->runtime().set_sampled_targets(0);
  parallel_->finish_grads(loss);
  const double norm = parallel_->grad_norm() / loss_scale;
  if (!std::isfinite(norm)) return;  // an fp16 overflow: the estimate keeps its last value
  // The reference clips this gradient like a training step's before the estimate.
  parallel_->clip(norm, config_.optim.max_grad_norm, 1.0 / loss_scale);
  parallel_->update_curvature();
}

// The scale of each micro-batch's gradient: the loss scale over the step's counted targets (all
// of them for token files; for SFT, those not ignored, counted over the whole global step by the
// loader, so the first micro-batch carries the count).
float Trainer::grad_scale(const MicroBatch& first, double loss_scale) const {
  if (sft_) return first.step_targets > 0 ? float(loss_scale / double(first.step_targets)) : 0.0f;
  float scale = float(loss_scale / (double(seqs_per_step_) * seq_len_));
  // Local SGD: a group's all-reduce sums its own ranks only, so its gradient is its share of the
  // global batch scaled up to a mean over that share.
  if (parallel_->local_sgd()) scale *= float(grid_->dp_replicate().size());
  return scale;
}

// Whether the step's update applies. Under mixed precision a non-finite loss is an overflow like
// inf/NaN gradients (the global norm, the same on every rank): the scaler skips the step.
// Otherwise the spike guard judges: NaN / Inf, or a spike under --spike_policy, leave the weights
// as they are, and the caller applies the policy.
bool Trainer::update_allowed(StepResult& r) {
  if (scaler_) {
    const bool overflow = !std::isfinite(r.grad_norm) || !std::isfinite(r.loss);
    r.skipped = scaler_->update(overflow);  // throws when the scale cannot go lower
    if (r.skipped) return false;
  }
  r.spike = spike_->judge(r.loss, r.grad_norm);
  if (r.spike.bad) return false;
  spike_->accept(r.loss, r.grad_norm);
  return true;
}

// Test hook (ZT_TEST_FAIL_AT, set by apps/): that rank throws at the start of that step.
void Trainer::fail_for_test(int64_t step) const {
  if (config_.test.fail_step == step && world_.rank() == config_.test.fail_rank)
    throw Error(str_cat("ZT_TEST_FAIL_AT=", config_.test.fail_rank, ":", config_.test.fail_step,
                        ": deliberate failure at step ", step));
}

// Test hook (ZT_TEST_SPIKE_AT): the factor the step's loss and gradients are multiplied by, a
// corrupted data window (1: none; not under a pipeline).
float Trainer::test_corruption(int64_t step) const {
  const int64_t key = step + 1 + (config_.test.spike_by_state ? 0 : spike_->data_offset_steps());
  return config_.test.spike_step == key ? float(config_.test.spike_factor) : 1.0f;
}

// One way for every layout: shard owners write their pieces (no rank holds the full state
// under ZeRO), the chief the JSON state and the checksums.
void Trainer::save(int64_t step) {
  RunState rs(config_, seqs_per_step_, seq_len_, *sched_, step, train_id_, run_tag_, &stages_);
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
  checkpoint_save({config_.checkpoint.output_dir, step, parallel_->checkpoint_shard(), chief_,
                   [&] { world_.barrier(); }, save_id, side_files_},
                  cfg_, {parts.begin(), parts.end()});
  if (chief_)
    checkpoint_prune(config_.checkpoint.output_dir, config_.checkpoint.save_total_limit,
                     config_.checkpoint.load_best_model_at_end ? best_checkpoint_ : "");
}

// At every step boundary the ranks agree, by one MAX all-reduce over the world (microseconds;
// docs/fault-tolerance.md): whether any rank was asked to stop (graceful preemption: all ranks stop
// after the same step even when the signal reached only one), and whatever the hooks vote on (a
// flash checkpoint's shard still being written on some rank; every rank's work time in the step,
// which the straggler check judges). Returns the stop signal, or 0.
int Trainer::step_vote(const StepContext& c) {
  size_t n = 1;
  for (const auto& h : hooks_) n += h->vote_slots();
  std::vector<double> v(n, 0.0);
  v[0] = stop_requested();
  for (size_t at = 1, i = 0; i < hooks_.size(); at += hooks_[i++]->vote_slots()) hooks_[i]->vote_put(c, &v[at]);
  if (world_.size() > 1) world_.all_reduce(v.data(), v.size(), dist::ReduceOp::max);
  for (size_t at = 1, i = 0; i < hooks_.size(); at += hooks_[i++]->vote_slots()) hooks_[i]->vote_get(c, &v[at]);
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
      (fs::path(config_.checkpoint.output_dir) / ("checkpoint-" + std::to_string(step))).string().c_str());
  std::fflush(stdout);
}

// A resume at another sequence length or batch: the next data stage (train/context_stage.h),
// recorded in log_history once the log exists.
void Trainer::begin_data_stage(const std::string& context_change) {
  StageSwitch sw;
  sw.step = start_step_;
  sw.offset_steps = spike_->data_offset_steps();
  sw.T = seq_len_;
  sw.per_step = seqs_per_step_;
  sw.shuffle = config_.data.shuffle;
  sw.allow_data_change = config_.data.allow_change;
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

// The loader from optimizer step `step` over the run's source: the channel blend, the SFT rows or
// the token file.
void Trainer::start_loader(int64_t step) {
  loader_ = blend_ ? std::make_unique<DataLoader>(*blend_, loader_config_, step)
            : sft_ ? std::make_unique<DataLoader>(*sft_rows_[0], loader_config_, step)
                   : std::make_unique<DataLoader>(*data_, loader_config_, step);
}

// The loop: a step, then its hooks (step_hooks.h; trainer_hooks.cpp): a rejected update may roll
// back; the vote at the step boundary comes before the step's log, which then names its slowest
// rank; then logging, evaluation, saves. A stop request after the last step changes nothing.
void Trainer::run() {
  const auto t_train = Clock::now();
  for (int64_t step = start_step_; step < total_steps_; ++step) {
    const auto t_step = Clock::now();
    train_step_set(step + 1);  // named by the collective watchdog (--ddp_timeout)
    for (const auto& h : hooks_) h->before_step(step);
    StepContext c{step, train_step(step)};
    if (c.result.spike.bad && rejected(c)) {
      step = c.resume_at - 1;  // rolled back: the loop goes on from the restored step
      continue;
    }
    // Local SGD's outer sync follows every H-th step whether or not the inner update was
    // skipped (an overflow seen by one group only), so every group meets at the same steps.
    parallel_->after_step(step);
    c.step_s = seconds_since(t_step);
    const int signo = step_vote(c);
    for (const auto& h : hooks_) h->after_step(c);
    if (signo && step + 1 < total_steps_) return stop_saved(step + 1, signo);
  }
  finish(seconds_since(t_train));
}

// --load_best_model_at_end: the parameters of the best evaluated checkpoint replace the final
// ones before --output_dir is written (every rank loads its part; the chief decides which).
void Trainer::load_best_model() {
  if (!config_.checkpoint.load_best_model_at_end) return;
  const std::string dir = dist::broadcast_string(world_, chief_ ? best_checkpoint_ : "", 0);
  if (dir.empty() || best_step_ == total_steps_) return;  // the final weights are the best (or none saved)
  if (chief_)
    std::printf("Loading best model from %s (%s %.6g at step %lld).\n", dir.c_str(),
                config_.checkpoint.metric_name.c_str(), best_metric_, (long long)best_step_);
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
  const int hpz = config_.parallel.engine.hpz_partition_size, group = hpz > 1 ? hpz : grid_->dp_cp().size();
  report["zero_paper_model_state_bytes"] =
      parallel::zero_paper_bytes(engine.held_params(), config_.parallel.engine.stage, group,
                                 double(parallel_->engine().optimizer().state_bytes_per_param()));
  report["peak_rss_bytes"] = peak_rss_bytes();
  if (device_ == DeviceKind::cuda) {
    // Every GPU allocation of ztrain goes through core/device.h's device_alloc, whose peak this is;
    // the estimate is `ztrain estimate-memory --device cuda`'s for this run (plan/memory_estimate.h).
    const double peak = double(device_allocated_peak());
    const double est = double(parallel::estimate_gpu_memory(cfg_, parallel::memory_inputs(cfg_, rows_, seq_len_, plan_),
                                                            rows_, seq_len_, plan_, config_.parallel.engine.optim,
                                                            config_.parallel.engine.offload_optimizer == "cpu")
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
  if (chief_ && report.contains("offload_nvme")) parallel::print_offload_report(report["offload_nvme"]);
  report.update(parallel_->report(steps_run, cfg_));
  load_best_model();
  const nlohmann::json pipe_report = parallel_->pipeline_report(steps_run, cfg_);
  // One HF folder, streamed to the chief tensor by tensor from the ranks that write checkpoint
  // pieces (any layout): no rank gathers the whole model (hf_export.h).
  hf_export_streamed(world_, parallel_->param_components(), parallel_->checkpoint_shard().index >= 0, cfg_,
                     config_.checkpoint.output_dir, config_.checkpoint.save_dtype, config_.checkpoint.max_shard_bytes,
                     config_.model.hf_dir);
  if (!chief_) return;
  hf_write_side_files(config_.checkpoint.output_dir, side_files_);
  if (dp_comm_->size() > 1 || config_.parallel.engine.stage > 0) parallel::print_dp_report(report, model_states_);
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
