// trainer.cpp: `ztrain train`. One optimizer step = G micro-batches of forward +
// backward (gradients accumulate in place), global-norm clipping, the LR schedule and
// AdamW. The loss is the mean over every target token of the step, whatever G is,
// because each micro-batch's gradient is scaled by 1 / (tokens in the step).
// Writes HF-style outputs: trainer_state.json, train_results.json, the model folder.
// Under mpirun every rank runs this with its slice of each global batch (data/loader.h):
// the step's gradient is scaled by 1 / (tokens of the whole global step) and reduced by
// the data-parallel engine (src/parallel/data_parallel.h: DDP or ZeRO-1/2/3); the loss and
// token count are summed over ranks; only rank 0 writes logs, checkpoints and the model.
#include <omp.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
#include "dist/communicator.h"
#include "parallel/buckets.h"
#include "parallel/data_parallel.h"
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

// Model-state bytes per rank by the ZeRO paper (fp32 AdamW: 4 + 4 + 8 bytes per
// parameter; stage 1 shards the moments over the sharding group, stage 2 also the
// gradients, stage 3 also the parameters).
nlohmann::json zero_paper_bytes(int64_t psi, int stage, int group) {
  const double p = 4.0 * double(psi), g = group;
  return {{"parameters", stage >= 3 ? p / g : p},
          {"gradients", stage >= 2 ? p / g : p},
          {"optimizer_state", stage >= 1 ? 2 * p / g : 2 * p}};
}

// Per-step communication of the engine: measured counters by collective, and the theory.
nlohmann::json comm_report(const parallel::DataParallel& dp, int64_t steps, int accumulation) {
  dist::CommStats total;
  for (const dist::Communicator* c : dp.comms()) {
    dist::CommStats s = c->stats();
    for (size_t k = 0; k < dist::kNumCollectives; ++k) total.by_kind[k].add(s.by_kind[k]);
  }
  nlohmann::json j, per;
  double bus = 0;
  for (size_t k = 0; k < dist::kNumCollectives; ++k) {
    const dist::CollectiveStats& c = total.by_kind[k];
    if (c.calls == 0) continue;
    per[dist::collective_name(dist::Collective(k))] = {{"calls_per_step", double(c.calls) / steps},
                                                       {"payload_bytes_per_step", c.bytes / steps},
                                                       {"bus_bytes_per_step", c.bus_bytes / steps},
                                                       {"seconds", c.seconds},
                                                       {"wait_seconds", c.wait_seconds}};
    bus += c.bus_bytes;
  }
  j["by_collective"] = per;
  j["bus_bytes_per_step"] = bus / steps;
  j["planned_bus_bytes_per_step"] = dp.planned_bus_bytes(accumulation);
  j["paper_bus_bytes_per_step"] = dp.paper_bus_bytes(accumulation);
  return j;
}

}  // namespace

static void train_ranks(const TrainArgs& a, dist::Communicator* world_ptr);

void train_run(const TrainArgs& a) {
  // The world outlives the run so that an error on one rank ends the whole job here with
  // the rank named (abort_job), before destructors reach MPI_Finalize, which would wait
  // for the other ranks, stuck in their next collective.
  std::unique_ptr<dist::Communicator> world = dist::make_world();
  try {
    train_ranks(a, world.get());
  } catch (const std::exception& e) {
    if (world->size() > 1) dist::abort_job(e.what());
    throw;
  }
}

static void train_ranks(const TrainArgs& args, dist::Communicator* world_ptr) {
  const auto t_start = Clock::now();
  TrainArgs a = args;
  apply_deepspeed_config(a, world_ptr->size(), /*print_warnings=*/world_ptr->rank() == 0);
  if (a.threads > 0) omp_set_num_threads(a.threads);
  ZT_CHECK(a.per_device_train_batch_size > 0, "--per_device_train_batch_size must be positive");
  ZT_CHECK(a.gradient_accumulation_steps > 0, "--gradient_accumulation_steps must be positive");
  ZT_CHECK(!a.train_file.empty(), "--train_file is required (a uint16 token file such as nanoGPT's train.bin)");
  ZT_CHECK(a.save_strategy == "no" || a.save_strategy == "steps", "--save_strategy \"", a.save_strategy,
           "\" is not supported; use \"steps\" or \"no\"");
  ZT_CHECK(a.save_dtype == "float32" || a.save_dtype == "bfloat16", "--save_dtype must be float32 or bfloat16");
  optim::schedule_kind_from_string(a.lr_scheduler_type);  // an unknown name fails before any work

  ModelConfig cfg = load_config(a);
  const int B = a.per_device_train_batch_size, G = a.gradient_accumulation_steps;
  const int T = a.model_max_length > 0 ? a.model_max_length : std::min(1024, cfg.max_position);
  ZT_CHECK(T <= cfg.max_position, "--model_max_length ", T, " exceeds the model's context of ", cfg.max_position,
           " positions (n_positions / max_position_embeddings); lower it");
  TokenFile data(a.train_file, cfg.vocab_size);
  WindowSampler sampler(data, T, !a.no_shuffle, uint64_t(a.seed));
  // Data parallelism: MPI under mpirun, else the size-1 local communicator (same code).
  dist::Communicator* world = world_ptr;
  const int rank = world->rank(), nranks = world->size();
  const bool chief = rank == 0;  // the only rank that prints and writes files
  parallel::DataParallelOptions dpo;
  dpo.stage = a.zero_stage;
  dpo.reduce_bucket_size = parallel::reduce_bucket_elements(a.reduce_bucket_size, a.zero_stage);
  dpo.overlap_comm = a.overlap_comm;
  dpo.hpz_partition_size = a.zero_hpz_partition_size;
  dpo.quantized_weights = a.zero_quantized_weights;
  dpo.quantized_gradients = a.zero_quantized_gradients;
  dpo.adam.beta1 = a.adam_beta1;
  dpo.adam.beta2 = a.adam_beta2;
  dpo.adam.eps = a.adam_epsilon;
  dpo.adam.weight_decay = a.weight_decay;
  parallel::check_data_parallel_options(dpo, nranks);
  const int64_t seqs_per_step = int64_t(B) * G * nranks;
  ZT_CHECK(a.train_batch_size <= 0 || a.train_batch_size == seqs_per_step, "train_batch_size ", a.train_batch_size,
           " does not equal micro batch ", B, " x accumulation ", G, " x ranks ", nranks, " = ", seqs_per_step);
  ZT_CHECK(sampler.num_windows() >= seqs_per_step, a.train_file, " has ", data.size(), " tokens, only ",
           sampler.num_windows(), " sequences of ", T, "+1 tokens, fewer than one optimizer step needs (",
           seqs_per_step, " = batch ", B, " x accumulation ", G, " x ranks ", nranks,
           "); use more data or a smaller batch");
  std::unique_ptr<TokenFile> val;
  if (!a.validation_file.empty()) val = std::make_unique<TokenFile>(a.validation_file, cfg.vocab_size);
  if (chief) prepare_output_dir(a);

  Transformer model(cfg);
  const auto t_weights = Clock::now();
  if (!a.model_name_or_path.empty())
    model.load_safetensors(a.model_name_or_path + "/model.safetensors");
  else
    model.init_random(uint64_t(a.seed));
  const double weights_s = seconds_since(t_weights);

  const int64_t steps_per_epoch = std::max<int64_t>(1, sampler.num_windows() / seqs_per_step);
  const int64_t total_steps =
      a.max_steps > 0 ? a.max_steps : int64_t(std::ceil(a.num_train_epochs * double(steps_per_epoch)));
  ZT_CHECK(total_steps > 0, "nothing to train: set --max_steps or --num_train_epochs > 0");
  const optim::Schedule sched = schedule_from_args(a, total_steps);
  const int64_t log_every = a.logging_steps >= 1
                                ? int64_t(a.logging_steps)
                                : std::max<int64_t>(1, int64_t(std::ceil(a.logging_steps * double(total_steps))));

  const bool will_save = a.save_strategy == "steps" && a.save_steps > 0 && a.save_steps <= total_steps;
  // DDP's engine keeps the flat buffers, so a checkpoint loads straight into them. A
  // sharded engine takes its shard from the model's flat parameters when it is created,
  // so a checkpoint is loaded first (into the flat model and a flat AdamW whose moments
  // the engine then shards): a checkpoint of either format (one file per state, or ZeRO
  // shards named by parameter) resumes under any N or stage.
  std::unique_ptr<parallel::DataParallel> dp;
  if (a.zero_stage == 0) dp = parallel::DataParallel::create(model, *world, dpo);
  std::unique_ptr<optim::AdamW> flat_opt;

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
    if (dp) {
      resumed = checkpoint_load(dir, model, *dp->flat_optimizer());
    } else {
      flat_opt = std::make_unique<optim::AdamW>(model.num_params(), std::vector<optim::ParamRange>{}, dpo.adam);
      resumed = checkpoint_load(dir, model, *flat_opt);
    }
    start_step = resumed.at("global_step").get<int64_t>();
    const auto& zs = resumed.at("ztrain");
    ZT_CHECK(zs.at("sequences_per_step").get<int64_t>() == seqs_per_step && zs.at("sequence_length").get<int>() == T,
             dir, " was saved with ", zs.at("sequences_per_step"), " sequences of ", zs.at("sequence_length"),
             " tokens per step; resume with the same batch size, accumulation and --model_max_length");
    ZT_CHECK(
        zs.at("seed").get<int64_t>() == a.seed && zs.at("shuffle").get<bool>() == !a.no_shuffle, dir,
        " was saved with a different --seed or --no_shuffle; resume with the same ones to continue its data order");
    if (chief) std::printf("Resuming from %s at step %lld\n", dir.c_str(), (long long)start_step);
  }
  if (!dp) {
    // The engine takes the parameters over (stages 1-3 keep only this rank's shard) before
    // the activations are planned: the flat buffers it frees never coexist with them.
    dp = parallel::DataParallel::create(model, *world, dpo);
    if (flat_opt) dp->import_optimizer(*flat_opt);
    flat_opt.reset();
  }
  model.plan(B, T, /*training=*/true);
  LoaderConfig lc;
  lc.B = B;
  lc.T = T;
  lc.accumulation = G;
  lc.rank = rank;
  lc.world = nranks;
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
  std::unique_ptr<TrainLog> log;
  if (chief) {
    log = std::make_unique<TrainLog>(a, cfg, model, total_steps, steps_per_epoch, T, start_step, nranks);
    if (start_step > 0) log->restore(resumed);
    log->print_header(sampler.num_windows(), seqs_per_step);
    if (nranks > 1) std::printf("  Data parallel: %s\n", dp->describe().dump().c_str());
  }
  const double startup_s = seconds_since(t_start);
  const double tokens_per_step = double(seqs_per_step) * T;
  const float grad_scale = float(1.0 / tokens_per_step);

  // ZT_TEST_FAIL_AT=rank:step makes that rank throw at the start of that step (0-based),
  // so tests can check that the job ends at once naming the rank (abort_job in main).
  int fail_rank = -1;
  long long fail_step = -1;
  if (const char* f = std::getenv("ZT_TEST_FAIL_AT")) std::sscanf(f, "%d:%lld", &fail_rank, &fail_step);
  const auto t_train = Clock::now();
  nlohmann::json model_states;
  for (int64_t step = start_step; step < total_steps; ++step) {
    const auto t_step = Clock::now();
    dp->begin_step();
    if (fail_step == step && rank == fail_rank)  // test hook: a rank failing mid-training
      throw Error(str_cat("ZT_TEST_FAIL_AT=", fail_rank, ":", fail_step, ": deliberate failure at step ", step));
    double sums[2] = {0, 0};  // loss sum, counted tokens (summed over ranks below)
    for (int micro = 0; micro < G; ++micro) {
      const MicroBatch& mb = loader.next();
      ZT_ASSERT(mb.step == step && mb.micro == micro);
      int64_t c = 0;
      dp->set_last_micro(micro == G - 1);
      sums[0] += model.forward_backward(mb.inputs.data(), mb.targets.data(), grad_scale, &c, mb.pos());
      sums[1] += double(c);
    }
    dp->end_backward();
    if (nranks > 1) world->all_reduce(sums, 2);
    const double loss = sums[0] / sums[1];
    ZT_CHECK(std::isfinite(loss), "loss became ", loss, " at step ", step + 1,
             "; lower --learning_rate or check the data");
    ZT_PROFILE("optimizer");
    const double norm = dp->grad_norm();
    dp->clip(norm, a.max_grad_norm);
    dp->step(sched.lr_at(step));
    if (step == start_step) {
      // What this rank holds for training after one step, by category (ZeRO's model states).
      const MemStats ms = mem_stats();
      for (MemCategory c : {MemCategory::parameters, MemCategory::gradients, MemCategory::optimizer_state,
                            MemCategory::temporary, MemCategory::activations})
        model_states[mem_category_name(c)] = ms.current[size_t(c)];
    }
    // HF logs the learning rate the scheduler holds after its step, i.e. the next one.
    if (log) {
      log->step_done(step + 1, loss, norm, sched.lr_at(step + 1), seconds_since(t_step),
                     step + 1 == total_steps || (step + 1) % log_every == 0);
      if (step == start_step) log->first_step(startup_s, weights_s);
    }
    // ZeRO-3's forward gathers parameters: every rank evaluates then; else rank 0 alone.
    if (val && ((a.eval_steps > 0 && (step + 1) % a.eval_steps == 0) || step + 1 == total_steps) &&
        (chief || a.zero_stage == 3)) {
      EvalResult r = evaluate(model, *val, B, T, a.max_eval_samples, a.packing ? lc.eos_id : -1);
      if (log) log->eval_done(step + 1, r);
    }
    if (will_save && (step + 1) % a.save_steps == 0) {
      if (a.zero_stage == 0) {
        if (chief) checkpoint_save(a.output_dir, step + 1, model, *dp->flat_optimizer(), log->trainer_state());
      } else {
        // Sharded: each shard owner writes its own pieces; no rank holds the full state.
        if (chief) checkpoint_sharded_begin(a.output_dir, step + 1);
        world->barrier();
        int shard = -1, num_shards = 0;
        int64_t opt_steps = 0;
        std::vector<CheckpointPiece> pieces = dp->checkpoint_pieces(&shard, &num_shards, &opt_steps);
        if (shard >= 0) checkpoint_write_shard(a.output_dir, step + 1, model, shard, num_shards, pieces, opt_steps);
        world->barrier();
        if (chief) checkpoint_sharded_finish(a.output_dir, step + 1, model, log->trainer_state());
      }
      if (chief) checkpoint_prune(a.output_dir, a.save_total_limit);
    }
  }
  const double train_s = seconds_since(t_train);
  const int64_t steps_run = std::max<int64_t>(1, total_steps - start_step);
  nlohmann::json dist_report = dp->describe();
  dist_report["communication"] = comm_report(*dp, steps_run, G);
  dist_report["model_state_bytes"] = model_states;
  const int group = a.zero_hpz_partition_size > 1 ? a.zero_hpz_partition_size : nranks;
  dist_report["zero_paper_model_state_bytes"] = zero_paper_bytes(model.num_params(), a.zero_stage, group);
  dist_report["peak_rss_bytes"] = peak_rss_bytes();
  dp->export_params();  // a collective: ZeRO-3 gathers the shards
  if (!chief) return;
  model.save_hf(a.output_dir, a.save_dtype == "float32" ? "F32" : "BF16");
  if (nranks > 1 || a.zero_stage > 0) {
    const auto& cr = dist_report["communication"];
    std::printf("***** data parallel (per rank per step) *****\n");
    std::printf(
        "  bus bytes measured %.0f, planned %.0f, ZeRO paper %.0f (gradient + parameter traffic; the\n"
        "  loss / norm scalar all-reduces run on the world communicator and are not counted)\n",
        cr["bus_bytes_per_step"].get<double>(), cr["planned_bus_bytes_per_step"].get<double>(),
        cr["paper_bus_bytes_per_step"].get<double>());
    for (auto& [k, v] : cr["by_collective"].items())
      std::printf("  %-15s calls %.2f payload %.0f bus %.0f bytes; run: blocked %.3f s of %.3f s in flight\n",
                  k.c_str(), v["calls_per_step"].get<double>(), v["payload_bytes_per_step"].get<double>(),
                  v["bus_bytes_per_step"].get<double>(), v["wait_seconds"].get<double>(), v["seconds"].get<double>());
    const auto& zp = dist_report["zero_paper_model_state_bytes"];
    for (const char* k : {"parameters", "gradients", "optimizer_state"})
      std::printf("  %-15s %s held (ZeRO paper: %s)\n", k, format_bytes(model_states.value(k, 0.0)).c_str(),
                  format_bytes(zp[k].get<double>()).c_str());
  }
  log->add_results({{"data_parallel", dist_report}});
  log->finish(train_s, loader.wait_seconds());
  prof::report();
}

}  // namespace zt
