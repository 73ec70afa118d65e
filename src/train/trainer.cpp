// trainer.cpp: `ztrain train`. One optimizer step = G micro-batches of forward +
// backward (gradients accumulate in place), global-norm clipping, the LR schedule and the
// optimizer. The loss is the mean over every target token of the step, whatever G is,
// because each micro-batch's gradient is scaled by 1 / (tokens in the step).
// Writes HF-style outputs: trainer_state.json, train_results.json, the model folder.
// Under mpirun every rank runs this with its slice of each global batch (data/loader.h):
// the step's gradient is scaled by 1 / (tokens of the whole global step) and reduced by
// the data-parallel engine, the strategy object of the loop (src/parallel/data_parallel.h:
// DDP or ZeRO-1/2/3); the loss and token count are summed over the data-parallel ranks;
// only rank 0 writes logs, checkpoints and the model. The ranks form a process grid
// (dist/parallel_dims.h: pp x dp x cp x tp); everything data-parallel (engine, loss
// reduction, loader) takes the grid's dp communicator, never the world.
// This file: the set-up from the resolved TrainConfig (data, model and engine, resume); the step
// loop is trainer_loop.cpp, its hooks trainer_hooks.cpp, the class trainer_impl.h.
#include "train/trainer_impl.h"

#include <omp.h>

#include "checkpoint/peft_files.h"
#include "train/context_stage.h"
#include "plan/gemm_peak.h"
#include "parallel/offload_engine.h"
#include "plan/memory_estimate.h"

namespace zt {
namespace train_internal {
namespace fs = std::filesystem;

Trainer::Trainer(const TrainConfig& config, dist::Communicator& world) : config_(config), world_(world) {
  spike_ =
      std::make_unique<SpikeGuard>(config_.optim.spike_policy, config_.optim.spike_window, config_.optim.spike_zscore);
  grid_ = std::make_unique<dist::ProcessGrid>(world, config_.parallel.dims);
  dp_comm_ = &grid_->dp();
  chief_ = world.rank() == 0;
  {
    ZT_PROFILE("startup: data");
    load_data();
  }
  if (chief_) prepare_output_dir();
  {
    ZT_PROFILE("startup: model and engine");
    build_model_and_engine();
  }
  {
    ZT_PROFILE("startup: resume");
    resume();
  }
  if (flash_) start_flash();
  if (world.size() > 1) {
    std::vector<const dist::Communicator*> comms = {&world_, parallel_->tied_comm()};
    for (size_t g = 0; g < dist::kNumGroups; ++g) comms.push_back(&grid_->group(dist::Group(g)));
    for (const dist::Communicator* c : parallel_->engine().comms()) comms.push_back(c);
    straggler_ = std::make_unique<StragglerMonitor>(comms, world.size(), config_.parallel.straggler_threshold);
  }
  start_loader_and_log();
  add_hooks();
  startup_s_ = seconds_since(t_start_);
}

void Trainer::load_data() {
  if (sft_) {
    load_sft_data();
  } else if (channels_.named) {
    blend_ = std::make_unique<BlendedSource>(channels_, cfg_.vocab_size, seq_len_, config_.data.shuffle,
                                             uint64_t(config_.data.seed));
    train_sequences_ = blend_->num_sequences();
    if (world_.rank() == 0) std::printf("Data channels: %s\n", blend_->describe().c_str());
  } else {
    data_ = std::make_unique<TokenFile>(config_.data.train_file, cfg_.vocab_size);
    sampler_ = std::make_unique<WindowSampler>(*data_, seq_len_, config_.data.shuffle, uint64_t(config_.data.seed));
    train_sequences_ = sampler_->num_windows();
  }
  const int n = dp_comm_->size();
  seqs_per_step_ = int64_t(rows_) * accumulation_ * n;
  ZT_CHECK(config_.data.global_batch <= 0 || config_.data.global_batch == seqs_per_step_, "train_batch_size ",
           config_.data.global_batch, " does not equal micro batch ", rows_, " x accumulation ", accumulation_,
           " x ranks ", n, " = ", seqs_per_step_);
  ZT_CHECK(train_sequences_ >= seqs_per_step_, config_.data.train_file, " has only ", train_sequences_,
           " sequences of ", seq_len_, sft_ ? " tokens (rows of examples)" : "+1 tokens",
           ", fewer than one optimizer step needs (", seqs_per_step_, " = batch ", rows_, " x accumulation ",
           accumulation_, " x ranks ", n, "); use more data or a smaller batch");
  if (!config_.data.validation_file.empty() && !sft_) {
    val_ = std::make_unique<TokenFile>(config_.data.validation_file, cfg_.vocab_size);
    // Checked now, not at the first evaluation after all the training.
    ZT_CHECK(val_->size() > int64_t(seq_len_), "--validation_file ", config_.data.validation_file, " has ",
             val_->size(), " tokens, fewer than one sequence of ", seq_len_,
             "+1; use a longer validation file or a smaller --model_max_length");
  }
  load_eval_tasks();
  plan_steps();
}

// The run's length and HF's strategies as step intervals (an epoch is steps_per_epoch_
// optimizer steps): the schedule, logging, evaluation and saves.
void Trainer::plan_steps() {
  steps_per_epoch_ = std::max<int64_t>(1, train_sequences_ / seqs_per_step_);
  const int64_t max_steps = config_.optim.max_steps;
  total_steps_ = max_steps > 0 ? max_steps : int64_t(std::ceil(config_.optim.epochs * double(steps_per_epoch_)));
  ZT_CHECK(total_steps_ > 0, "nothing to train: set --max_steps or --num_train_epochs > 0");
  sched_ = std::make_unique<optim::Schedule>(make_schedule(config_.optim.schedule, total_steps_));
  const TrainConfig::Logging& l = config_.logging;
  log_every_ =
      l.steps >= 1 ? int64_t(l.steps) : std::max<int64_t>(1, int64_t(std::ceil(l.steps * double(total_steps_))));
  eval_every_ = !l.eval                      ? l.eval_steps
                : *l.eval == Interval::steps ? (l.eval_steps > 0 ? l.eval_steps : log_every_)
                : *l.eval == Interval::epoch ? steps_per_epoch_
                                             : 0;
  final_eval_ = l.do_eval ? *l.do_eval : l.eval != Interval::no;
  if (l.do_eval && !*l.do_eval) eval_every_ = 0;
  const Interval save = config_.checkpoint.save;
  save_every_ = save == Interval::steps   ? config_.checkpoint.save_steps
                : save == Interval::epoch ? steps_per_epoch_
                                          : 0;
  // Local SGD: groups agree on the parameters only right after an outer sync, and a checkpoint
  // holds one copy of them (group 0's, with its inner optimizer state), so saves come at syncs.
  ZT_CHECK(
      config_.parallel.local_sgd.steps == 0 || save_every_ == 0 || save_every_ % config_.parallel.local_sgd.steps == 0,
      "--save_steps ", save_every_, " must be a multiple of --local_sgd_steps ", config_.parallel.local_sgd.steps,
      " (checkpoints are taken when the groups have just synchronised)");
  if (l.strategy == Interval::epoch) log_every_ = steps_per_epoch_;
}

// SFT records: the chief tokenizes (or finds the cache) first, so ranks on one host do not all
// tokenize; then every rank reads the cache. Rows follow --packing and --model_max_length.
void Trainer::load_sft_data() {
  const std::string& tok_path = config_.data.tokenizer_path;
  ZT_CHECK(!tok_path.empty(), "--train_file ", config_.data.train_file,
           " holds SFT records, which need a tokenizer: pass --tokenizer_name (a folder with tokenizer.json or "
           "tokenizer.model, or "
           "--model_name_or_path with one)");
  const std::unique_ptr<Tokenizer> tok = Tokenizer::load(tok_path);
  const ChatTemplateConfig tpl = chat_template_load(tok_path, config_.data.chat_template_path);
  SftOptions opt;
  opt.completion_only_loss = config_.data.completion_only_loss;
  opt.assistant_only_loss = config_.data.assistant_only_loss;
  opt.template_limits.max_steps = config_.data.chat_template_max_steps;
  const ChatFormatter fmt(tpl, opt, tok->eos_id() >= 0 ? tok->decode({tok->eos_id()}) : std::string());
  const std::string& cache = config_.data.cache_dir;
  auto build = [&](const std::string& file, const std::string& flag) {
    return std::make_unique<SftTokens>(sft_tokenize({file, flag, tok_path, cache}, *tok, fmt, tpl, opt));
  };
  const std::vector<DataChannel>& chans = channels_.channels;  // one unnamed for a plain file
  for (int pass = 0; pass < 2; ++pass) {                       // pass 0: the chief builds; pass 1: everyone reads
    if ((pass == 0) == (world_.rank() == 0)) {
      for (const DataChannel& ch : chans)
        sft_train_.push_back(build(ch.path, ch.name.empty() ? "--train_file" : "--train_file channel " + ch.name));
      if (!config_.data.validation_file.empty()) sft_val_ = build(config_.data.validation_file, "--validation_file");
    }
    if (pass == 0) world_.barrier();
  }
  std::vector<const SftTokens*> all{sft_val_.get()};
  for (const auto& d : sft_train_) all.push_back(d.get());
  for (const SftTokens* d : all) {
    if (!d) continue;
    const int32_t mx = d->tokens.empty() ? 0 : *std::max_element(d->tokens.begin(), d->tokens.end());
    ZT_CHECK(mx < cfg_.vocab_size, "the tokenizer ", tok_path, " produced id ", mx, ", >= the model's vocab_size ",
             cfg_.vocab_size, "; use the model's own tokenizer");
  }
  std::vector<SequenceSource*> rows;
  for (size_t c = 0; c < chans.size(); ++c) {  // each channel its own order (seed + channel)
    sft_rows_.push_back(std::make_unique<SftRows>(*sft_train_[c], seq_len_, config_.data.packing, config_.data.shuffle,
                                                  uint64_t(config_.data.seed) + c));
    rows.push_back(sft_rows_.back().get());
  }
  if (sft_val_) {
    sft_val_rows_ = std::make_unique<SftRows>(*sft_val_, seq_len_, config_.data.packing, false, 0);
    ZT_CHECK(sft_val_rows_->num_sequences() > 0 && sft_val_rows_->total_targets() > 0, "--validation_file ",
             config_.data.validation_file, " gives no row with a trained target at --model_max_length ", seq_len_,
             "; check the file (and --completion_only_loss / --assistant_only_loss) or raise --model_max_length");
  }
  if (channels_.named) blend_ = std::make_unique<BlendedSource>(channels_, rows, seq_len_);
  train_sequences_ = blend_ ? blend_->num_sequences() : sft_rows_[0]->num_sequences();
  for (size_t c = 0; c < chans.size() && chief_; ++c) {
    const SftTokens& d = *sft_train_[c];
    const SftRows& r = *sft_rows_[c];
    std::printf(
        "SFT data%s: %lld examples, %lld tokens, %lld trained targets in %lld rows of %d (%s, %s); %s %s in "
        "%.2f s; %lld truncated to %d+1 tokens\n",
        chans[c].name.empty() ? "" : (" (channel " + chans[c].name + ")").c_str(), (long long)d.examples(),
        (long long)d.tokens.size(), (long long)r.total_targets(), (long long)r.num_sequences(), seq_len_,
        config_.data.packing ? "packed" : "one example per row",
        tpl.source.empty() ? "no chat template" : tpl.origin.c_str(), d.from_cache ? "read cache" : "tokenized into",
        d.cache_path.c_str(), d.seconds, (long long)r.truncated(), seq_len_);
  }
  if (chief_ && blend_) std::printf("Data channels: %s\n", blend_->describe().c_str());
}

// The chief locks the folder first (so a second run stops there, naming this one), then
// checks it is empty or may be reused. Only the chief locks: the other ranks write only
// inside a save, between the chief's barriers (docs/checkpoints.md#one-run-per-folder).
void Trainer::prepare_output_dir() {
  ZT_CHECK(!config_.checkpoint.output_dir.empty(), "--output_dir is required");
  // A failed job's ranks may still be exiting (freeing gigabytes) after mpirun has returned, and
  // their lock goes with them: a run started right after waits a few seconds for it, a restart by
  // `ztrain launch`'s agent longer.
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  lock_ =
      std::make_unique<OutputDirLock>(config_.checkpoint.output_dir, restart && std::atoi(restart) > 0 ? 30.0 : 5.0);
  bool empty = true;
  for (auto& e : fs::directory_iterator(config_.checkpoint.output_dir))
    empty &= e.path().filename() == OutputDirLock::kFileName;
  if (!empty && !config_.checkpoint.overwrite && config_.checkpoint.resume_from.empty())
    throw Error(str_cat("Output directory (", config_.checkpoint.output_dir,
                        ") already exists and is not empty. Use --overwrite_output_dir to overcome."));
  // A fresh start over an old run: its checkpoints go, so that neither `latest` nor pruning
  // can pick them up later (HF's Trainer deletes nothing; docs/checkpoints.md says why we do).
  if (config_.checkpoint.overwrite && config_.checkpoint.resume_from.empty())
    checkpoint_remove_all(config_.checkpoint.output_dir, config_.checkpoint.input_paths);
}

// --max_device_memory: this run's estimate must fit under it (the error names the estimate and
// what would shrink it), then device_alloc holds every GPU allocation to it.
void Trainer::cap_device_memory() {
  const int64_t cap = config_.parallel.device_memory_cap;
  if (cap < 0) return;
  const bool offload = config_.parallel.engine.offload_optimizer == "cpu";
  const parallel::MemoryRow r =
      parallel::estimate_gpu_memory(cfg_, parallel::memory_inputs(cfg_, rows_, seq_len_, plan_), rows_, seq_len_, plan_,
                                    config_.parallel.engine.optim, offload);
  ZT_CHECK(r.total() <= cap, "--max_device_memory ", config_.parallel.device_memory_text,
           " is below this run's GPU estimate of ", format_bytes(double(r.total())), " (parameters and compute copy ",
           format_bytes(double(r.params)), ", gradients ", format_bytes(double(r.grads)), ", optimizer state ",
           format_bytes(double(r.optim)), ", activations and temporaries ",
           format_bytes(double(r.activations + r.temporary)),
           "): ", offload ? "" : "--offload_optimizer cpu moves the optimizer state to host memory; ",
           "lower --per_device_train_batch_size or turn on --gradient_checkpointing (ztrain estimate-memory "
           "--device cuda)");
  set_device_memory_cap(size_t(cap));
}

// --max_host_memory with offload to disk: what the engine may hold is the cap less what the rest of
// training holds (the estimator's activations, temporaries and compute copy, and a margin for the
// binary, its runtime libraries, the data loader and the memory-mapped token file).
void Trainer::set_offload_budget(parallel::DiskOffload& d) const {
  const int64_t cap = config_.parallel.host_memory_cap;
  if (cap < 0) return;
  const parallel::ModelMemoryInputs in = parallel::memory_inputs(cfg_, rows_, seq_len_, plan_);
  const int64_t rest = in.activation_bytes + in.temporary_bytes + in.compute_copy_bytes;
  d.host_budget = cap - rest - parallel::kOffloadProcessMargin;
  // A checkpoint save streams the state from the file one tensor at a time (docs/offload.md): the
  // largest tensor's fp32 values are held while it is written, so the budget leaves room for them.
  int64_t largest = 0;
  for (const ParamInfo& p : model_->params().list()) largest = std::max(largest, p.numel);
  const int64_t save_buffer = config_.checkpoint.save != Interval::no ? largest * 4 : 0;
  d.host_budget = *d.host_budget - save_buffer;
  d.budget_source = str_cat("--max_host_memory ", config_.parallel.host_memory_text, " less ",
                            format_bytes(double(rest)), " of activations, temporaries and compute copy, ",
                            format_bytes(double(save_buffer)), " for a checkpoint's largest tensor and ",
                            format_bytes(double(parallel::kOffloadProcessMargin)), " for the process itself");
}

void Trainer::build_model_and_engine() {
  LayerCut cut =
      parallel::tensor_parallel_cut(cfg_, grid_->tp().size(), grid_->tp().rank(), config_.parallel.sequence_parallel);
  parallel::expert_parallel_cut(cfg_, grid_->ep().size(), grid_->ep().rank(), cut);  // this rank's experts only
  // Under ZeRO the model holds no flat buffer: the engine fills what this rank keeps (its shard, or
  // its stage's units) from the random streams (init_values), from the HF files (only those
  // elements), or from nothing on a resume (the checkpoint sets every parameter a rank keeps). So
  // no rank holds the whole model at start.
  // Offload to disk likewise: the engine writes the initial values straight into its file.
  const bool sharded_init = config_.parallel.engine.stage >= 1 || config_.parallel.engine.disk_offload.on();
  model_ = std::make_unique<Transformer>(cfg_, cut, /*hold_params=*/!sharded_init);
  if (cfg_.lora.dora && grid_->tp().size() > 1)  // a row layer's magnitudes start at its whole rows' norms
    model_->set_row_slice_sum([this](float* v, int64_t n) { grid_->tp().all_reduce(v, size_t(n)); });
  const auto t0 = Clock::now();
  const bool fresh = config_.checkpoint.resume_from.empty();
  std::unique_ptr<HfWeights> hf, adapters;
  if (!config_.model.hf_dir.empty()) hf = std::make_unique<HfWeights>(config_.model.hf_dir, cfg_);
  const bool peft = model_->layout().frozen_base;
  if (peft) adapters = load_frozen_base(hf.get());
  // What the trainable parameters start from: the HF folder's weights (LoRA: the adapter folder's).
  HfWeights* start = peft ? adapters.get() : hf.get();
  if (!sharded_init) {
    // Random weights: a tensor-parallel rank makes its slices of the values one process would
    // make, so the run is the same model whatever the layout; HF weights: a TP rank reads its
    // slices from the files. A resume skips random weights (about 1 s for GPT-2 124M): the
    // checkpoint sets every parameter a rank uses, and a slice it does not cover is an error.
    if (start)
      start->read(model_->params(), 0, model_->num_params(), model_->flat_params().as<float>());
    else if (fresh)
      model_->init_values(uint64_t(config_.model.seed), 0, model_->num_params(), model_->flat_params().as<float>());
  }
  // The weights are read or drawn on the host, then the model moves to the GPU whole. The GEMM
  // peak (MFU's reference) is measured first and its scratch (1 GiB for bf16) is gone, and left out
  // of the GPU memory peak, before the model arrives: the peak reported is training's own.
  if (device_ == DeviceKind::cuda) {
    if (chief_) gpu_peak_ = gpu_gemm_peak(config_.precision.peak_gflops, nn::compute_dtype(plan_.precision));
    reset_device_allocated_peak();
    cap_device_memory();
    model_->set_device(DeviceKind::cuda);
  }
  weights_s_ = seconds_since(t0);
  // parallelize() applies TP, CP, the pipeline cut and the DP / ZeRO engine. The engine takes the
  // parameters over (stages 1-3 keep only this rank's shard) before the activations are planned:
  // the flat buffers it frees never coexist with them.
  parallel::ParallelPlan pp;
  pp.rows = rows_;
  pp.seq_len = seq_len_;
  pp.micro_batches = accumulation_;
  pp.sequence_parallel = config_.parallel.sequence_parallel;
  pp.schedule = config_.parallel.schedule;
  pp.layers_per_virtual_stage = config_.parallel.layers_per_virtual_stage;
  pp.stage_layers = config_.parallel.stage_layers;
  pp.balance_by_time = config_.parallel.balance_by_time;
  pp.act_plan = plan_;
  pp.data_parallel = config_.parallel.engine;
  if (pp.data_parallel.disk_offload.on()) set_offload_budget(pp.data_parallel.disk_offload);
  // Sophia's bs: the tokens of one optimizer step over all data-parallel ranks.
  pp.data_parallel.optim_config.tokens_per_step = seqs_per_step_ * seq_len_;
  pp.local_sgd = config_.parallel.local_sgd;
  pp.print = chief_;
  std::unique_ptr<ParamSource> source;  // ZeRO: what each rank reads for the part it keeps
  if (sharded_init) {
    if (!fresh)
      source = std::make_unique<ZeroParams>();  // the checkpoint overwrites every element this rank keeps
    else if (start)
      source = std::make_unique<HfParamSource>(*start, model_->params());
    else
      source = std::make_unique<RandomParams>(*model_, uint64_t(config_.model.seed));
    pp.data_parallel.initial_params = source.get();
  }
  parallel_ = parallel::parallelize(*model_, *grid_, pp);
  if (config_.precision.scaler) scaler_ = std::make_unique<optim::LossScaler>(*config_.precision.scaler);
}

// LoRA: the frozen base (from the folder, or the seed's random weights), on every rank and on a
// resume too (a checkpoint holds only the adapters); returns the adapter folder's weights
// (--adapter_name_or_path), or null for PEFT's initialisation (A uniform, B zero).
std::unique_ptr<HfWeights> Trainer::load_frozen_base(const HfWeights* hf) {
  const uint64_t seed = uint64_t(config_.model.seed);
  if (cfg_.lora.quantized()) {  // QLoRA: weight after weight into NF4 / int8; the fp32 base is never whole
    model_->quantize_base_from([&](int64_t begin, int64_t n, float* dst) {
      if (hf)
        hf->read(model_->base_params(), begin, n, dst);
      else
        model_->init_base_values(seed, begin, n, dst);
    });
  } else if (hf) {
    hf->read(model_->base_params(), 0, model_->base_params().total(), model_->frozen_params().as<float>());
    model_->base_changed();
  } else {
    model_->init_base(seed);
  }
  if (config_.model.adapter_dir.empty()) return nullptr;
  return std::make_unique<HfWeights>(peft_weights_file(config_.model.adapter_dir), cfg_);
}

// Where a resume reads from: the run's flash snapshot (returned; *dir_out cleared) or the
// checkpoint folder *dir_out (for latest: the newest intact one) with its save id.
std::unique_ptr<StateReader> Trainer::resume_source(std::string* dir_out, std::string* save_id_out) {
  // --flash_checkpoint with latest: the run's shared-memory snapshot wins when every rank holds
  // it and it is newer than the newest checkpoint, or is that checkpoint's own save; then no
  // checkpoint is read or verified (a restart skips hashing gigabytes on disk).
  std::unique_ptr<StateReader> snapshot;
  std::string& dir = *dir_out;
  std::string& save_id = *save_id_out;
  int64_t snap_step = -1;
  if (flash_ && config_.checkpoint.resume_from == "latest") {
    const RunRecord rec = chief_ ? run_record_read(config_.checkpoint.output_dir) : RunRecord{};
    const std::string run_id = dist::broadcast_string(world_, rec.run_id, 0);
    std::string snap_id;
    snap_step = flash_->probe(run_id, rec, &snap_id);
    int64_t decision[2] = {0, -1};  // use the snapshot (2: it is the newest checkpoint's save), newest step
    if (chief_ && snap_step >= 0) {
      const CheckpointRef newest = checkpoint_newest_unverified(config_.checkpoint.output_dir, &save_id);
      decision[1] = newest.step;
      if (snap_step > newest.step)
        decision[0] = 1;
      else if (snap_step == newest.step && !snap_id.empty() && save_id == snap_id)
        decision[0] = 2;
      save_id.clear();
    }
    world_.broadcast(decision, sizeof decision, 0);
    if (decision[0] > 0) snapshot = flash_->adopt(decision[1], decision[0] == 2), dir.clear();
  }
  // Otherwise the chief picks the checkpoint (for latest: from run.json, which it rewrites next)
  // and verifies its checksums once, for every rank (a full read of the folder); every rank
  // loads that one. A damaged one named directly fails on the chief, which ends the job.
  if (!snapshot) {
    if (chief_) dir = dir == "latest" ? checkpoint_find_latest(config_.checkpoint.output_dir, &save_id) : dir;
    if (chief_ && !dir.empty() && save_id.empty()) save_id = checkpoint_verify(dir);
    dir = dist::broadcast_string(world_, dir, 0);
    save_id = dist::broadcast_string(world_, save_id, 0);
    // The newest checkpoint was damaged (or another run's): the snapshot may still be newer.
    int64_t disk_step = -1;
    if (snap_step >= 0 && chief_ && !dir.empty())
      disk_step = checkpoint_read_trainer_state((fs::path(dir) / "trainer_state.json").string())["global_step"];
    if (snap_step >= 0) world_.broadcast(&disk_step, sizeof disk_step, 0);
    if (snap_step > disk_step)
      snapshot = flash_->adopt(disk_step, false), dir.clear();
    else if (chief_ && snap_step >= 0)
      std::printf("Flash snapshot of step %lld not used: the checkpoint of step %lld is newer\n", (long long)snap_step,
                  (long long)disk_step);
  }
  if (dir.empty() && !snapshot)
    throw JobError(
        str_cat("--resume_from_checkpoint latest: no intact checkpoint-N folder in ", config_.checkpoint.output_dir));
  return snapshot;
}

// Every component loads its state from a verified checkpoint, each rank the pieces it
// holds, assembled from whatever layout (N, stage) wrote them. The data order is a pure
// function of (seed, step), so the cursor is one number.
void Trainer::resume() {
  if (config_.checkpoint.flash)
    flash_ = std::make_unique<FlashCheckpointer>(
        world_, FlashOptions{config_.checkpoint.output_dir, cfg_, side_files_, config_.checkpoint.save_total_limit,
                             config_.test.flash_pause});
  if (config_.checkpoint.resume_from.empty()) {
    // A fresh start replaces the folder's previous run: its snapshots are garbage.
    if (flash_)
      flash_->forget_run(
          dist::broadcast_string(world_, chief_ ? run_record_read(config_.checkpoint.output_dir).run_id : "", 0));
    if (chief_) start_run(nullptr);
    return;
  }
  std::string dir = config_.checkpoint.resume_from, save_id;
  std::unique_ptr<StateReader> snapshot = resume_source(&dir, &save_id);
  std::string model_change, context_change;
  if (snapshot) {
    resumed_ = std::move(snapshot);
  } else {
    auto reader = std::make_unique<CheckpointReader>(dir, cfg_, config_.model.allow_change, save_id,
                                                     config_.model.rope_scaling_given);
    model_change = reader->model_change();
    context_change = reader->context_change();
    resumed_ = std::move(reader);
  }
  RunState rs(config_, seqs_per_step_, seq_len_, *sched_, 0, train_id_, run_tag_, &stages_);
  for (Stateful* c : components(rs)) c->load_state(*resumed_);  // the log loads when it exists
  parallel_->sync_after_load();
  start_step_ = rs.cursor.step();
  if (rs.cursor.switched()) begin_data_stage(context_change);
  // The step is recorded by several components; they must agree (else the folder mixes saves
  // or was edited), since the data, the LR and the optimizer's bias correction all follow it.
  ZT_CHECK(
      rs.schedule.step() == start_step_ && parallel_->engine().optimizer().steps() == start_step_ - skipped_steps(),
      resumed_->source(), ": its data cursor, LR scheduler and optimizer are at different steps (", start_step_, ", ",
      rs.schedule.step(), ", ", parallel_->engine().optimizer().steps(), " + ", skipped_steps(),
      " skipped); the checkpoint is damaged");
  if (!chief_) return;
  if (!flash_ || flash_->resumed_step() < 0)
    std::printf("Resuming from %s at step %lld\n", dir.c_str(), (long long)start_step_);
  for (const std::string& change : {model_change, rs.data.change()})
    if (!change.empty())
      std::fprintf(stderr, "ztrain: warning: resuming although %s (--resume_allow_changes)\n", change.c_str());
  const nlohmann::json* id = resumed_->find_json("ztrain.run_id");
  const nlohmann::json* attempt = resumed_->find_json("ztrain.attempt");
  const CheckpointRef ref{id && id->is_string() ? id->get<std::string>() : "",
                          attempt && attempt->is_number_integer() ? attempt->get<int64_t>() : 0, start_step_};
  start_run(&ref, dir);
}

// --flash_checkpoint: every rank binds to the run's snapshot file (the chief's run id), reserves
// shared memory for its state and, after a resume from a snapshot, persists it.
void Trainer::start_flash() {
  const std::string run_id = dist::broadcast_string(world_, chief_ ? run_tag_.run_id : "", 0);
  RunState rs(config_, seqs_per_step_, seq_len_, *sched_, start_step_, train_id_, run_tag_, &stages_);
  StateCollector c;
  for (const Stateful* p : components(rs)) p->save_state(c);
  uint64_t bytes = 0;
  for (const StatePiece& p : c.pieces) bytes += (uint64_t(p.slice.count) * 4 + 63) / 64 * 64;
  flash_->start(run_id, bytes);
  if (flash_->resumed_step() >= 0) last_saved_step_ = flash_->resumed_step();
}

// The chief records this start in run.json (a new attempt of a new or the resumed run)
// before the first save, so `latest` and pruning rank this attempt's checkpoints first.
void Trainer::start_run(const CheckpointRef* resumed, const std::string& resumed_dir) {
  const RunRecord rec = run_record_start(config_.checkpoint.output_dir, resumed, resumed_dir);
  if (rec.forked_from)
    std::printf("A fork of run %s (%s): this run is %s\n", rec.forked_from->run_id.c_str(),
                rec.forked_from->checkpoint.c_str(), rec.run_id.c_str());
  run_record_write(config_.checkpoint.output_dir, rec);
  run_tag_.run_id = rec.run_id;
  run_tag_.attempt = rec.attempt;
}

void Trainer::start_loader_and_log() {
  model_->runtime().set_act_plan(plan_);
  model_->plan(rows_, parallel_->local_seq_len(), /*training=*/true, parallel_->activation_slots());
  loader_config_.B = rows_;
  loader_config_.T = seq_len_;
  loader_config_.accumulation = accumulation_;
  loader_config_.rank = dp_comm_->rank();
  loader_config_.world = dp_comm_->size();
  loader_config_.shuffle = config_.data.shuffle;
  loader_config_.seed = uint64_t(config_.data.seed);  // the data order's seed (--data_seed, else --seed)
  loader_config_.packing = config_.data.packing;
  loader_config_.eos_id = config_.data.eos_token_id;
  if (loader_config_.eos_id < 0 && cfg_.raw.contains("eos_token_id") && cfg_.raw["eos_token_id"].is_number_integer())
    loader_config_.eos_id = cfg_.raw["eos_token_id"].get<int64_t>();
  ZT_CHECK(sft_ || !config_.data.packing || loader_config_.eos_id >= 0,
           "--packing needs the EOS token id: config.json has no integer eos_token_id; pass --eos_token_id");
  loader_config_.depth = std::max(2, config_.data.prefetch + 1);
  loader_config_.step_offset = spike_->data_offset_steps();  // data skipped by loss-spike rollbacks
  if (stages_.empty()) stages_.push_back({0, seq_len_, seqs_per_step_, 0, 0});
  loader_config_.stage_first_sequence = stages_.back().first_sequence;
  loader_config_.stage_first_token = stages_.back().first_token;
  if (blend_) {
    if (!sft_) blend_->set_packing(config_.data.packing, loader_config_.eos_id);  // SFT rows bring their own positions
    chan_ = std::make_unique<ChannelLosses>(blend_->names(), rows_, seq_len_ / grid_->cp().size());
    model_->runtime().set_token_losses(chan_->token_losses());
  }
  start_loader(start_step_);
  if (chief_) {
    log_ = std::make_unique<TrainLog>(config_.logging.log, *model_, total_steps_, steps_per_epoch_, seq_len_,
                                      start_step_, dp_comm_->size());
    if (resumed_) log_->load_state(*resumed_);
    if (!stage_entry_.is_null()) log_->add_history(stage_entry_);
    log_->set_peak(device_ == DeviceKind::cuda
                       ? gpu_peak_
                       : gemm_peak_for_run(config_.precision.peak_gflops, nn::compute_dtype(plan_.precision),
                                           omp_get_max_threads(), config_.precision.peak_cache_dir));
    log_->print_header(train_sequences_, seqs_per_step_);
    const optim::Optimizer& opt = parallel_->engine().optimizer();
    std::printf("  Optimizer = %s%s, %.3g bytes of state per parameter held (docs/optimizers.md)\n", opt.name().c_str(),
                opt.slot_dtype() == DType::bf16 ? " (bf16 state)" : "", opt.state_bytes_per_param());
    if (dp_comm_->size() > 1) std::printf("  Data parallel: %s\n", parallel_->engine().describe().dump().c_str());
  }
  resumed_.reset();  // every component has its state: the checkpoint's files close
}
}  // namespace train_internal

void train_run(const TrainConfig& a, dist::Communicator& world) {
  train_internal::Trainer t(a, world);
  t.run();
}

}  // namespace zt
