// train_log.cpp: see train_log.h.
#include "observe/train_log.h"
#include "kernels/isa.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include <cmath>
#include <ctime>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng_state.h"
#include "data/loader.h"
#include "observe/jsonl_log.h"
#include "observe/plot_png.h"
#include "observe/tfevents.h"

namespace zt {
namespace {

std::string hms(double s) {
  char b[32];
  int h = int(s / 3600), m = int(s / 60) % 60;
  std::snprintf(b, sizeof b, "%d:%02d:%05.2f", h, m, s - 3600.0 * h - 60.0 * m);
  return b;
}

}  // namespace

TrainLog::TrainLog(const TrainLogOptions& a, const Transformer& model, int64_t total_steps, int64_t steps_per_epoch,
                   int T, int64_t resume_step, int world_size)
    : options_(a),
      model_(model),
      total_steps_(total_steps),
      steps_per_epoch_(steps_per_epoch),
      T_(T),
      world_(world_size) {
  tokens_per_step_ = double(a.micro_batch) * a.accumulation * world_size * T;
  flops_per_token_ = model.flops_per_token(T);
  // On resume keep the lines up to the checkpoint's step, so each step appears once.
  jsonl_ = std::make_unique<JsonlLog>(a.output_dir + "/metrics.jsonl", resume_step);
  ZT_CHECK(a.report_to == "tensorboard" || a.report_to == "none", "--report_to \"", a.report_to,
           "\" is not supported; use tensorboard or none");
  if (a.report_to == "tensorboard") {
    tb_dir_ = a.logging_dir;
    if (tb_dir_.empty() && !a.run_name.empty()) {
      // TensorBoard lists runs by folder: --run_name (HF's name for the run in wandb / MLflow)
      // names ours. A resume with the same name appends to the same run.
      tb_dir_ = a.output_dir + "/runs/" + a.run_name;
    } else if (tb_dir_.empty()) {  // HF's default: output_dir/runs/<Mon>DD_HH-MM-SS_<host>
      char when[64], host[128] = "localhost";
      std::time_t now = std::time(nullptr);
      std::strftime(when, sizeof when, "%b%d_%H-%M-%S", std::localtime(&now));
      ::gethostname(host, sizeof host - 1);
      tb_dir_ = a.output_dir + "/runs/" + when + "_" + host;
    }
    tensorboard_ = std::make_unique<TfEventsWriter>(tb_dir_);
  }
  ZT_CHECK(a.disable_tqdm == "auto" || a.disable_tqdm == "true" || a.disable_tqdm == "false",
           "--disable_tqdm must be auto, true or false");
  progress_ = a.disable_tqdm == "false" || (a.disable_tqdm == "auto" && ::isatty(2));
}

namespace {
// The loss summed over steps 1..step from log_history's entries (each the mean of the steps since
// the one before), finite ones only.
double rebuilt_loss_sum(const nlohmann::json& history, int64_t step) {
  double sum = 0;
  int64_t prev = 0;
  for (const nlohmann::json& e : history) {
    if (!e.is_object() || !e.contains("step") || !e["step"].is_number_integer()) continue;
    const int64_t s = std::min(e["step"].get<int64_t>(), step);
    if (e.contains("loss") && e["loss"].is_number() && std::isfinite(e["loss"].get<double>()) && s > prev)
      sum += e["loss"].get<double>() * double(s - prev);
    prev = std::max(prev, s);
  }
  return sum;
}
}  // namespace

void TrainLog::load_state(StateReader& r) {
  const nlohmann::json& history = r.get_json("log_history");
  ZT_CHECK(history.is_array(), r.source(), ": \"log_history\" is not an array; the checkpoint is damaged");
  history_ = history;
  step_ = last_logged_ = r.get_int("global_step");
  // Before the NaN filter of step_done, a skipped NaN step saved the sum as null (JSON has no NaN),
  // which made every later checkpoint unloadable: such a sum is rebuilt from the logged means.
  const nlohmann::json* sum = r.find_json("ztrain.loss_sum");
  if (sum && sum->is_number() && std::isfinite(sum->get<double>())) {
    loss_total_ = sum->get<double>();
  } else {
    ZT_CHECK(sum && sum->is_null(), r.source(), ": \"ztrain.loss_sum\" is not a number; the checkpoint is damaged");
    loss_total_ = rebuilt_loss_sum(history_, step_);
    std::fprintf(stderr, "ztrain: warning: %s has no loss sum (a NaN step was logged); rebuilt from log_history\n",
                 r.source().c_str());
  }
  // The last entry of a finished run's history is its summary; a resumed run writes a new one.
  if (!history_.empty() && history_.back().contains("train_runtime")) history_.erase(history_.size() - 1);
}

TrainLog::~TrainLog() = default;

// The live line: redrawn in place on stderr every step (like tqdm), erased before any
// ordinary output so logs and the line never interleave.
void TrainLog::progress(int64_t step, double loss, double grad_norm, double lr, double step_s) {
  ema_step_s_ = ema_step_s_ == 0 ? step_s : 0.8 * ema_step_s_ + 0.2 * step_s;
  if (!progress_) return;
  const double tok_s = tokens_per_step_ / ema_step_s_;
  const double mfu = tok_s * flops_per_token_ / (peak_.gflops * 1e9);
  std::fprintf(
      stderr,
      "\r%5.1f%% step %lld/%lld | loss %.4f | lr %.3g | grad_norm %.3f | %.0f tok/s | MFU %.1f%% | ETA %s\x1b[K",
      100.0 * double(step) / double(total_steps_), (long long)step, (long long)total_steps_, loss, lr, grad_norm, tok_s,
      100 * mfu, hms(ema_step_s_ * double(total_steps_ - step)).c_str());
  std::fflush(stderr);
  progress_shown_ = true;
}

void TrainLog::clear_progress() {
  if (!progress_shown_) return;
  std::fprintf(stderr, "\r\x1b[K");
  std::fflush(stderr);
  progress_shown_ = false;
}

void TrainLog::set_peak(const GemmPeak& p) {
  peak_ = p;
  extra_results_["machine"] = {{"cpu_model", kernels::cpu_model_name()},
                               {"kernel_isa", kernels::isa_current()},
                               {"gemm_isa", kernels::gemm_isa()},
                               {"peak_gflops", p.gflops},
                               {"peak_kind", p.what},
                               {"peak_source", p.source}};
}

void TrainLog::print_header(int64_t num_examples, int64_t seqs_per_step) const {
  std::printf("***** Running training *****\n");
  std::printf("  Num examples = %lld\n", (long long)num_examples);
  std::printf("  Num Epochs = %g\n", double(total_steps_) / double(steps_per_epoch_));
  std::printf("  Instantaneous batch size per device = %d\n", options_.micro_batch);
  std::printf("  Total train batch size (w. parallel, distributed & accumulation) = %lld\n", (long long)seqs_per_step);
  std::printf("  Gradient Accumulation steps = %d\n", options_.accumulation);
  std::printf("  Total optimization steps = %lld\n", (long long)total_steps_);
  std::printf("  Number of trainable parameters = %lld\n", (long long)model_.num_params());
  if (model_.layout().frozen_base) {  // PEFT's print_trainable_parameters(), whose "all" counts base + adapters
    int64_t nf4_params = 0;  // QLoRA's NF4 weights, counted as parameters (PEFT counts 4-bit ones twice their numel)
    const size_t nf4_bytes = model_.nf4_bytes(&nf4_params);
    const int64_t all = model_.num_params() + model_.base_params().total() + nf4_params;
    std::printf("  trainable params: %lld || all params: %lld || trainable%%: %.4f\n", (long long)model_.num_params(),
                (long long)all, 100.0 * double(model_.num_params()) / double(all));
    if (nf4_params > 0)
      std::printf("  QLoRA base: %lld linear weights in %s, %.2f MiB = %.4f bytes each; %lld others fp32\n",
                  (long long)nf4_params, model_.config().lora.int8 ? "int8" : "NF4", double(nf4_bytes) / 1048576.0,
                  double(nf4_bytes) / double(nf4_params), (long long)model_.base_params().total());
  }
  std::printf("  Sequence length = %d, model = %s, threads = %d\n", T_, model_.config().arch_name(),
              options_.threads > 0 ? options_.threads : 0);
  std::printf("  Machine = %s\n", machine_summary().c_str());
  if (peak_.what.rfind("GPU", 0) == 0)  // a GPU's peak does not depend on the host's threads
    std::printf("  MFU peak = %.1f GFLOP/s (%s; %s)\n", peak_.gflops, peak_.what.c_str(), peak_.source.c_str());
  else
    std::printf("  MFU peak = %.1f GFLOP/s (%s, %d threads; %s)\n", peak_.gflops, peak_.what.c_str(),
                omp_get_max_threads(), peak_.source.c_str());
  if (peak_.widened_ratio > 0)
    std::printf(
        "  bf16: this CPU has no bf16 arithmetic (GEMMs oneDNN %s): tensors are kept and communicated in "
        "bf16, GEMMs run in fp32 on operands widened from bf16 (%.0f%% of fp32 sgemm speed, measured) and "
        "attention in fp32; see docs/precision.md\n",
        kernels::gemm_isa().c_str(), 100.0 * peak_.widened_ratio);
  std::fflush(stdout);
}

void TrainLog::step_done(int64_t step, double loss, double grad_norm, double lr, double step_s, bool log,
                         const std::vector<std::pair<const char*, double>>& extra) {
  step_ = step;
  // HF's logging_nan_inf_filter (on by default): a NaN or infinite loss (a step the spike guard
  // or the loss scaler skipped) counts as the mean of the logging window so far (of the run so
  // far when the window has none), so no statistic that is saved (the loss sum in
  // trainer_state.json, log_history's means) is ever NaN. The per-step metrics row keeps the raw
  // value (null in JSON).
  const int64_t in_window = step - 1 - last_logged_;
  const double counted = std::isfinite(loss) ? loss
                         : in_window > 0     ? loss_since_log_ / double(in_window)
                         : step > 1          ? loss_total_ / double(step - 1)
                                             : 0.0;
  loss_total_ += counted;
  loss_since_log_ += counted;
  time_since_log_ += step_s;
  const double tps = tokens_per_step_ / step_s;
  nlohmann::json row{{"step", step},
                     {"loss", loss},
                     {"learning_rate", lr},
                     {"grad_norm", grad_norm},
                     {"step_time_s", step_s},
                     {"tokens_per_second", tps},
                     {"mfu", tps * flops_per_token_ / (peak_.gflops * 1e9)}};
  // A skipped step's inf/NaN norm is logged as null (JSON has no inf).
  if (!std::isfinite(grad_norm)) row["grad_norm"] = nullptr;
  for (auto& [k, v] : extra) row[k] = v;
  if (step_detail_.is_object()) row.update(step_detail_);
  step_detail_ = nullptr;
  jsonl_->append(row.dump());
  if (!log) {
    progress(step, loss, grad_norm, lr, step_s);
    return;
  }
  clear_progress();
  int64_t n = step - last_logged_;
  double mean_loss = loss_since_log_ / double(n);
  double tok_s = tokens_per_step_ * double(n) / time_since_log_;
  double mfu = tok_s * flops_per_token_ / (peak_.gflops * 1e9);
  nlohmann::json e;
  e["epoch"] = epoch_at(step);
  e["grad_norm"] = grad_norm;
  e["learning_rate"] = lr;
  e["loss"] = mean_loss;
  e["step"] = step;
  if (!std::isfinite(grad_norm)) e["grad_norm"] = nullptr;
  std::string more;
  for (auto& [k, v] : extra) {
    e[k] = v;
    more += str_cat(", '", k, "': ", v);
  }
  history_.push_back(e);
  std::printf(
      "{'loss': %.6g, 'grad_norm': %.6g, 'learning_rate': %.6g, 'epoch': %.4g%s}  step %lld/%lld  "
      "%.1f tokens/s  MFU %.1f%%  ETA %s\n",
      mean_loss, grad_norm, lr, epoch_at(step), more.c_str(), (long long)step, (long long)total_steps_, tok_s,
      100 * mfu, hms(time_since_log_ / double(n) * double(total_steps_ - step)).c_str());
  std::fflush(stdout);
  if (tensorboard_) {
    tensorboard_->add_scalar("train/loss", step, mean_loss);
    tensorboard_->add_scalar("train/learning_rate", step, lr);
    tensorboard_->add_scalar("train/grad_norm", step, grad_norm);
    tensorboard_->add_scalar("train/epoch", step, epoch_at(step));
    tensorboard_->add_scalar("train/tokens_per_second", step, tok_s);
    tensorboard_->add_scalar("train/mfu", step, mfu);
    for (auto& [k, v] : extra) tensorboard_->add_scalar(std::string("train/") + k, step, v);
    tensorboard_->flush();
  }
  progress(step, loss, grad_norm, lr, step_s);
  last_logged_ = step;
  loss_since_log_ = 0;
  time_since_log_ = 0;
}

void TrainLog::first_step(double startup_s, double weights_s) const {
  std::printf("start-up: %.3f s from launch to the first step (%.3f s of it reading or initialising weights)\n",
              startup_s, weights_s);
}

void TrainLog::eval_done(int64_t step, const EvalResult& r, const TaskEvalResult* tasks) {
  nlohmann::json e;
  e["epoch"] = epoch_at(step);
  e["eval_loss"] = r.loss;
  e["eval_perplexity"] = r.perplexity;
  e["eval_runtime"] = r.seconds;
  e["eval_samples_per_second"] = double(r.windows) / r.seconds;
  e["eval_tokens"] = r.tokens;
  e["step"] = step;
  if (tasks) {
    for (const auto& [k, v] : tasks->metrics()) e[k] = v;
    e["tasks_runtime"] = tasks->seconds;
  }
  history_.push_back(e);
  last_eval_ = e;
  jsonl_->append(e.dump());
  clear_progress();
  if (tensorboard_) {
    tensorboard_->add_scalar("eval/loss", step, r.loss);
    tensorboard_->add_scalar("eval/perplexity", step, r.perplexity);
    tensorboard_->add_scalar("eval/runtime", step, r.seconds);
    if (tasks)
      for (const auto& [k, v] : tasks->metrics()) tensorboard_->add_scalar(k, step, v);
    tensorboard_->flush();
  }
  std::printf("{'eval_loss': %.6g, 'eval_perplexity': %.6g, 'eval_runtime': %.3f, 'epoch': %.4g}  step %lld\n", r.loss,
              r.perplexity, r.seconds, epoch_at(step), (long long)step);
  if (tasks) {  // the summaries; each probe's values are in metrics.jsonl and TensorBoard
    std::string line;
    for (const auto& [k, v] : tasks->summary()) line += str_cat(line.empty() ? "{" : ", ", "'", k, "': ", v);
    if (!line.empty()) std::printf("%s}  step %lld\n", line.c_str(), (long long)step);
  }
  std::fflush(stdout);
}

void TrainLog::write_trainer_state(const std::string& dir) const {
  write_file_atomic(dir + "/trainer_state.json", trainer_state().dump(2) + "\n");
}

void TrainLog::save_state(StateWriter& w) const {
  w.put_json("best_metric", nullptr);
  w.put_json("best_model_checkpoint", nullptr);
  w.put_json("epoch", epoch_at(step_));
  w.put_json("global_step", step_);
  w.put_json("is_hyper_param_search", false);
  w.put_json("is_local_process_zero", true);
  w.put_json("is_world_process_zero", true);
  w.put_json("log_history", history_);
  w.put_json("logging_steps", options_.logging_steps);
  w.put_json("max_steps", total_steps_);
  w.put_json("num_train_epochs", std::ceil(double(total_steps_) / double(steps_per_epoch_)));
  w.put_json("save_steps", options_.save_steps);
  w.put_json("total_flos", flops_per_token_ * tokens_per_step_ * double(step_));
  w.put_json("train_batch_size", options_.micro_batch);
  w.put_json("trial_name", nullptr);
  w.put_json("trial_params", nullptr);
  w.put_json("ztrain.loss_sum", loss_total_);
}

nlohmann::json TrainLog::trainer_state() const {
  nlohmann::json s;
  JsonStateWriter w(&s);
  save_state(w);
  const int64_t seqs = int64_t(options_.micro_batch) * options_.accumulation * world_;
  DataCursor(seqs, T_, options_.shuffle, step_).save_state(w);
  RngState(options_.seed, options_.data_seed).save_state(w);
  return s;
}

void TrainLog::write_plot() const {
  PlotSeries train{"train loss", {}, 0x1f77b4}, eval{"eval loss", {}, 0xd62728};
  // Named data channels (loss/<name>, observe/channel_losses.h): one curve each, in name order
  // (the log history's keys are sorted), in colours distinct from the train and eval curves.
  static constexpr uint32_t kChannelRgb[] = {0x2ca02c, 0xff7f0e, 0x9467bd, 0x8c564b,
                                             0xe377c2, 0x17becf, 0xbcbd22, 0x7f7f7f};
  std::vector<PlotSeries> channels;
  for (auto& e : history_) {
    if (e.contains("loss")) train.points.push_back({e["step"].get<double>(), e["loss"].get<double>()});
    if (e.contains("eval_loss")) eval.points.push_back({e["step"].get<double>(), e["eval_loss"].get<double>()});
    for (auto kv = e.begin(); kv != e.end(); ++kv) {
      const nlohmann::json& v = kv.value();
      if (kv.key().rfind("loss/", 0) != 0 || !v.is_number()) continue;
      const std::string name = kv.key().substr(5) + " loss";
      auto it = std::find_if(channels.begin(), channels.end(), [&](const PlotSeries& p) { return p.name == name; });
      if (it == channels.end())
        it = channels.insert(channels.end(),
                             PlotSeries{name, {}, kChannelRgb[channels.size() % std::size(kChannelRgb)]});
      it->points.push_back({e["step"].get<double>(), v.get<double>()});
    }
  }
  std::vector<PlotSeries> series{train};
  if (!eval.points.empty()) series.push_back(eval);
  series.insert(series.end(), channels.begin(), channels.end());
  write_loss_plot(options_.output_dir + "/loss.png", series,
                  std::string("ztrain: ") + model_.config().arch_name() + " loss (nats/token) by step");
}

void TrainLog::finish(double train_s, double data_wait_s) {
  clear_progress();
  const double samples = double(step_) * options_.micro_batch * options_.accumulation * world_;
  const double tok_s = tokens_per_step_ * double(step_) / train_s;
  nlohmann::json r;
  r["epoch"] = epoch_at(step_);
  r["total_flos"] = flops_per_token_ * tokens_per_step_ * double(step_);
  r["train_loss"] = loss_total_ / double(step_);
  r["train_runtime"] = train_s;
  r["train_samples_per_second"] = samples / train_s;
  r["train_steps_per_second"] = double(step_) / train_s;
  r["train_tokens_per_second"] = tok_s;
  r["train_mfu"] = tok_s * flops_per_token_ / (peak_.gflops * 1e9);
  r["data_wait_seconds"] = data_wait_s;
  r["data_wait_fraction"] = data_wait_s / train_s;
  MemStats ms = mem_stats();
  nlohmann::json mem;
  for (int c = 0; c < int(MemCategory::count); ++c) mem[mem_category_name(MemCategory(c))] = ms.peak[c];
  mem["accounted_peak"] = ms.total_peak;
  mem["peak_rss"] = peak_rss_bytes();
  nlohmann::json final_entry = r;
  final_entry.erase("train_tokens_per_second");
  final_entry.erase("train_mfu");
  final_entry.erase("data_wait_seconds");
  final_entry.erase("data_wait_fraction");
  r["memory_bytes"] = mem;
  r.update(extra_results_);
  if (!options_.run_name.empty()) r["run_name"] = options_.run_name;  // train_results.json and all_results.json
  final_entry["step"] = step_;
  history_.push_back(final_entry);
  write_trainer_state(options_.output_dir);
  write_file_atomic(options_.output_dir + "/train_results.json", r.dump(2) + "\n");
  nlohmann::json all = r;
  if (!last_eval_.is_null()) {
    nlohmann::json ev = {{"epoch", last_eval_["epoch"]},
                         {"eval_loss", last_eval_["eval_loss"]},
                         {"perplexity", last_eval_["eval_perplexity"]},
                         {"eval_runtime", last_eval_["eval_runtime"]},
                         {"eval_samples_per_second", last_eval_["eval_samples_per_second"]}};
    write_file_atomic(options_.output_dir + "/eval_results.json", ev.dump(2) + "\n");
    all.update(ev);
  }
  write_file_atomic(options_.output_dir + "/all_results.json", all.dump(2) + "\n");

  std::printf("***** train metrics *****\n");
  std::printf("  %-26s = %.4g\n", "epoch", epoch_at(step_));
  std::printf("  %-26s = %.0fGF\n", "total_flos", r["total_flos"].get<double>() / double(1 << 30));
  std::printf("  %-26s = %.4f\n", "train_loss", r["train_loss"].get<double>());
  std::printf("  %-26s = %s\n", "train_mfu", (std::to_string(100 * r["train_mfu"].get<double>()) + "%").c_str());
  std::printf("  %-26s = %s\n", "train_runtime", hms(train_s).c_str());
  std::printf("  %-26s = %.3f\n", "train_samples_per_second", samples / train_s);
  std::printf("  %-26s = %.3f\n", "train_steps_per_second", double(step_) / train_s);
  std::printf("  %-26s = %.1f\n", "train_tokens_per_second", tok_s);
  std::printf("  %-26s = %.3f s (%.3f%% of training time)\n", "data_wait", data_wait_s, 100 * data_wait_s / train_s);
  MemStats m = mem_stats();
  std::printf("***** memory (peak, by category) *****\n");
  for (int c = 0; c < int(MemCategory::count); ++c)
    std::printf("  %-26s = %s\n", mem_category_name(MemCategory(c)), format_bytes(double(m.peak[c])).c_str());
  std::printf("  %-26s = %s\n", "accounted total", format_bytes(double(m.total_peak)).c_str());
  std::printf("  %-26s = %s (%.3f of accounted)\n", "peak resident (VmHWM)",
              format_bytes(double(peak_rss_bytes())).c_str(), double(peak_rss_bytes()) / double(m.total_peak));
  if (!last_eval_.is_null()) {
    std::printf("***** eval metrics *****\n");
    std::printf("  %-26s = %.4f\n", "eval_loss", last_eval_["eval_loss"].get<double>());
    std::printf("  %-26s = %.4f\n", "perplexity", last_eval_["eval_perplexity"].get<double>());
  }
  if (options_.plot) {
    write_plot();
    std::printf("Loss plot: %s/loss.png\n", options_.output_dir.c_str());
  }
  if (tensorboard_) std::printf("TensorBoard: tensorboard --logdir %s\n", tb_dir_.c_str());
  std::printf("Saved model to %s\n", options_.output_dir.c_str());
  std::fflush(stdout);
}

}  // namespace zt
