// trainer.cpp: `ztrain train`. One optimizer step = G micro-batches of forward +
// backward (gradients accumulate in place), global-norm clipping, the LR schedule and
// AdamW. The loss is the mean over every target token of the step, whatever G is,
// because each micro-batch's gradient is scaled by 1 / (tokens in the step).
// Writes HF-style outputs: trainer_state.json, train_results.json, the model folder.
#include <omp.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/profile.h"
#include "data/loader.h"
#include "data/token_data.h"
#include "models/transformer.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "train/deepspeed_config.h"
#include "train/evaluate.h"
#include "train/train_args.h"
#include "train/train_log.h"

namespace zt {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void prepare_output_dir(const TrainArgs& a) {
  ZT_CHECK(!a.output_dir.empty(), "--output_dir is required");
  std::error_code ec;
  if (fs::exists(a.output_dir) && !fs::is_empty(a.output_dir, ec) && !a.overwrite_output_dir &&
      a.resume_from_checkpoint.empty())
    throw Error(str_cat("Output directory (", a.output_dir,
                        ") already exists and is not empty. Use --overwrite_output_dir to overcome."));
  fs::create_directories(a.output_dir, ec);
  ZT_CHECK(!ec, "cannot create --output_dir ", a.output_dir, ": ", ec.message());
}

ModelConfig load_config(const TrainArgs& a) {
  ZT_CHECK(a.model_name_or_path.empty() != a.model_config_path.empty(),
           "give exactly one of --model_name_or_path (an HF folder) or --model_config_path (a config.json)");
  if (!a.model_config_path.empty()) return config_from_file(a.model_config_path);
  return config_from_file(a.model_name_or_path + "/config.json");
}

std::vector<optim::ParamRange> param_ranges(const ParamTable& t) {
  std::vector<optim::ParamRange> r;
  for (auto& p : t.list()) {
    if (!r.empty() && r.back().decay == p.decay() && r.back().offset + r.back().numel == p.offset)
      r.back().numel += p.numel;  // merge neighbours: fewer, longer vector loops
    else
      r.push_back({p.offset, p.numel, p.decay()});
  }
  return r;
}

}  // namespace

void train_run(const TrainArgs& args) {
  const auto t_start = Clock::now();
  TrainArgs a = args;
  apply_deepspeed_config(a, /*world_size=*/1);
  if (a.threads > 0) omp_set_num_threads(a.threads);
  ZT_CHECK(a.per_device_train_batch_size > 0, "--per_device_train_batch_size must be positive");
  ZT_CHECK(a.gradient_accumulation_steps > 0, "--gradient_accumulation_steps must be positive");
  ZT_CHECK(!a.train_file.empty(), "--train_file is required (a uint16 token file such as nanoGPT's train.bin)");
  ZT_CHECK(a.save_strategy == "no" || a.save_strategy == "steps",
           "--save_strategy \"", a.save_strategy, "\" is not supported; use \"steps\" or \"no\"");
  ZT_CHECK(a.save_dtype == "float32" || a.save_dtype == "bfloat16", "--save_dtype must be float32 or bfloat16");
  optim::schedule_kind_from_string(a.lr_scheduler_type);  // an unknown name fails before any work

  ModelConfig cfg = load_config(a);
  const int B = a.per_device_train_batch_size, G = a.gradient_accumulation_steps;
  const int T = a.model_max_length > 0 ? a.model_max_length : std::min(1024, cfg.max_position);
  ZT_CHECK(T <= cfg.max_position, "--model_max_length ", T, " exceeds the model's context of ", cfg.max_position,
           " positions (n_positions / max_position_embeddings); lower it");
  TokenFile data(a.train_file, cfg.vocab_size);
  WindowSampler sampler(data, T, !a.no_shuffle, uint64_t(a.seed));
  const int64_t seqs_per_step = int64_t(B) * G;
  ZT_CHECK(sampler.num_windows() >= seqs_per_step, a.train_file, " has ", data.size(), " tokens, only ",
           sampler.num_windows(), " sequences of ", T, "+1 tokens, fewer than one optimizer step needs (",
           seqs_per_step, " = batch ", B, " x accumulation ", G, "); use more data or a smaller batch");
  std::unique_ptr<TokenFile> val;
  if (!a.validation_file.empty()) val = std::make_unique<TokenFile>(a.validation_file, cfg.vocab_size);
  prepare_output_dir(a);

  Transformer model(cfg);
  const auto t_weights = Clock::now();
  if (!a.model_name_or_path.empty())
    model.load_safetensors(a.model_name_or_path + "/model.safetensors");
  else
    model.init_random(uint64_t(a.seed));
  const double weights_s = seconds_since(t_weights);
  model.plan(B, T, /*training=*/true);

  const int64_t steps_per_epoch = std::max<int64_t>(1, sampler.num_windows() / seqs_per_step);
  const int64_t total_steps =
      a.max_steps > 0 ? a.max_steps : int64_t(std::ceil(a.num_train_epochs * double(steps_per_epoch)));
  ZT_CHECK(total_steps > 0, "nothing to train: set --max_steps or --num_train_epochs > 0");
  const optim::Schedule sched = schedule_from_args(a, total_steps);
  const int64_t log_every =
      a.logging_steps >= 1 ? int64_t(a.logging_steps)
                           : std::max<int64_t>(1, int64_t(std::ceil(a.logging_steps * double(total_steps))));

  optim::AdamWConfig oc;
  oc.beta1 = a.adam_beta1;
  oc.beta2 = a.adam_beta2;
  oc.eps = a.adam_epsilon;
  oc.weight_decay = a.weight_decay;
  optim::AdamW opt(model.num_params(), param_ranges(model.params()), oc);

  // Resume: model, optimizer and trainer state from a verified checkpoint; the data
  // order is a pure function of (seed, step), so the cursor is the step itself.
  int64_t start_step = 0;
  nlohmann::json resumed;
  if (!a.resume_from_checkpoint.empty()) {
    std::string dir = a.resume_from_checkpoint;
    if (dir == "latest") {
      dir = checkpoint_find_latest(a.output_dir);
      ZT_CHECK(!dir.empty(), "--resume_from_checkpoint latest: no intact checkpoint-N folder in ", a.output_dir);
    }
    resumed = checkpoint_load(dir, model, opt);
    start_step = resumed.at("global_step").get<int64_t>();
    const auto& zs = resumed.at("ztrain");
    ZT_CHECK(zs.at("sequences_per_step").get<int64_t>() == seqs_per_step && zs.at("sequence_length").get<int>() == T,
             dir, " was saved with ", zs.at("sequences_per_step"), " sequences of ", zs.at("sequence_length"),
             " tokens per step; resume with the same batch size, accumulation and --model_max_length");
    ZT_CHECK(zs.at("seed").get<int64_t>() == a.seed && zs.at("shuffle").get<bool>() == !a.no_shuffle, dir,
             " was saved with a different --seed or --no_shuffle; resume with the same ones to continue its data order");
    std::printf("Resuming from %s at step %lld\n", dir.c_str(), (long long)start_step);
  }
  LoaderConfig lc;
  lc.B = B;
  lc.T = T;
  lc.accumulation = G;
  lc.shuffle = !a.no_shuffle;
  lc.seed = uint64_t(a.seed);
  lc.packing = a.packing;
  lc.eos_id = a.eos_token_id;
  if (lc.eos_id < 0 && cfg.raw.contains("eos_token_id") && cfg.raw["eos_token_id"].is_number_integer())
    lc.eos_id = cfg.raw["eos_token_id"].get<int64_t>();
  ZT_CHECK(!a.packing || lc.eos_id >= 0,
           "--packing needs the EOS token id: config.json has no integer eos_token_id; pass --eos_token_id");
  lc.depth = std::max(2, a.dataloader_prefetch + 1);
  DataLoader loader(data, lc, start_step);
  TrainLog log(a, cfg, model, total_steps, steps_per_epoch, T, start_step);
  if (start_step > 0) log.restore(resumed);
  log.print_header(sampler.num_windows(), seqs_per_step);
  const double startup_s = seconds_since(t_start);
  const double tokens_per_step = double(seqs_per_step) * T;
  const float grad_scale = float(1.0 / tokens_per_step);

  const auto t_train = Clock::now();
  for (int64_t step = start_step; step < total_steps; ++step) {
    const auto t_step = Clock::now();
    model.zero_grad();
    double loss_sum = 0;
    int64_t counted = 0;
    for (int micro = 0; micro < G; ++micro) {
      const MicroBatch& mb = loader.next();
      ZT_ASSERT(mb.step == step && mb.micro == micro);
      int64_t c = 0;
      loss_sum += model.forward_backward(mb.inputs.data(), mb.targets.data(), grad_scale, &c, mb.pos());
      counted += c;
    }
    const double loss = loss_sum / double(counted);
    ZT_CHECK(std::isfinite(loss), "loss became ", loss, " at step ", step + 1,
             "; lower --learning_rate or check the data");
    ZT_PROFILE("optimizer");
    const double norm = optim::grad_norm(model.grad_data(), model.num_params());
    optim::clip_grads(model.grad_data(), model.num_params(), norm, a.max_grad_norm);
    opt.step(model.param_data(), model.grad_data(), sched.lr_at(step));
    // HF logs the learning rate the scheduler holds after its step, i.e. the next one.
    log.step_done(step + 1, loss, norm, sched.lr_at(step + 1), seconds_since(t_step), step + 1 == total_steps ||
                                                                             (step + 1) % log_every == 0);
    if (step == start_step) log.first_step(startup_s, weights_s);
    if (val && ((a.eval_steps > 0 && (step + 1) % a.eval_steps == 0) || step + 1 == total_steps))
      log.eval_done(step + 1, evaluate(model, *val, B, T, a.max_eval_samples, a.packing ? lc.eos_id : -1));
    if (a.save_strategy == "steps" && a.save_steps > 0 && (step + 1) % a.save_steps == 0) {
      checkpoint_save(a.output_dir, step + 1, model, opt, log.trainer_state());
      checkpoint_prune(a.output_dir, a.save_total_limit);
    }
  }
  const double train_s = seconds_since(t_train);
  model.save_hf(a.output_dir, a.save_dtype == "float32" ? "F32" : "BF16");
  log.finish(train_s, loader.wait_seconds());
  prof::report();
}

}  // namespace zt
