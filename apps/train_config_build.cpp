// train_config_build.cpp: see train_config_build.h.
#include "train_config_build.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "auto_fit.h"
#include "checkpoint/hf_model.h"
#include "core/error.h"
#include "data/file_identity.h"
#include "data/sft_data.h"
#include "parallel/buckets.h"
#include "peft_args.h"
#include "parallel/tensor_parallel.h"
#include "plan/memory_fit.h"
#include "plan/planner.h"
#include "precision.h"
#include "run_device.h"
#include "run_identity.h"
#include "train/context_stage.h"
#include "train_args_check.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

ModelConfig load_config(const TrainArgs& a) {
  ZT_CHECK(a.model_name_or_path.empty() != a.model_config_path.empty(),
           "give exactly one of --model_name_or_path (an HF folder) or --model_config_path (a config.json)");
  const ModelConfig cfg =
      config_from_file(!a.model_config_path.empty() ? a.model_config_path : a.model_name_or_path + "/config.json");
  return train_internal::with_rope_scaling(cfg, a.rope_scaling, a.model_max_length);  // a long-context stage's RoPE
}

// The sequence length T: --model_max_length, else min(1024, the model's context).
int seq_len(const TrainArgs& a, const ModelConfig& cfg) {
  return a.model_max_length > 0 ? a.model_max_length : std::min(1024, cfg.max_position);
}

// The files that make the saved folders usable as they are (generate needs a tokenizer):
// the model folder's (or the config's folder's), the tokenizer's from --tokenizer_name.
HfSideFiles side_files(const TrainArgs& a) {
  const std::string model_dir =
      !a.model_name_or_path.empty() ? a.model_name_or_path : fs::path(a.model_config_path).parent_path().string();
  HfSideFiles files = hf_side_files(model_dir.empty() ? "." : model_dir);
  if (a.tokenizer_name.empty()) return files;
  std::error_code ec;
  ZT_CHECK(fs::is_directory(a.tokenizer_name, ec), "--tokenizer_name ", a.tokenizer_name,
           " is not a folder; pass the folder holding tokenizer.json (or tokenizer.model, or encoder.json + "
           "vocab.bpe)");
  HfSideFiles tok = hf_side_files(a.tokenizer_name);
  ZT_CHECK(!tok.empty(), "--tokenizer_name ", a.tokenizer_name, " holds no tokenizer files (tokenizer.json, ...)");
  std::erase_if(files, [](const auto& f) { return f.first != "generation_config.json"; });
  std::erase_if(tok, [](const auto& f) { return f.first == "generation_config.json"; });
  files.insert(files.end(), tok.begin(), tok.end());
  return files;
}

parallel::DataParallelOptions engine_options(const TrainArgs& a) {
  parallel::DataParallelOptions o;
  o.stage = a.zero_stage;
  o.reduce_bucket_size = a.reduce_bucket_size;  // 0: the engine resolves the stage's default
  o.overlap_comm = a.overlap_comm;
  o.hpz_partition_size = a.zero_hpz_partition_size;
  o.quantized_weights = a.zero_quantized_weights;
  o.quantized_gradients = a.zero_quantized_gradients;
  o.optim = a.optim;
  o.offload_optimizer = a.offload_optimizer;
  parallel::DiskOffload& d = o.disk_offload;
  d.optimizer = a.offload_optimizer == "nvme";
  d.params = a.offload_param == "nvme";
  d.nvme_path = a.nvme_path;
  d.aio = a.aio;
  d.buffer_count = a.offload_buffer_count;
  d.param_buffer_count = a.offload_param_buffer_count;
  d.param_buffer_size = a.offload_param_buffer_size;
  d.max_in_cpu = a.offload_param_max_in_cpu;
  d.sub_group_size = a.offload_sub_group_size;
  o.comm_dtype = comm_dtype_from_args(a);
  o.local_sgd = a.local_sgd_steps > 0;
  o.optim_config.beta1 = a.adam_beta1;
  o.optim_config.beta2 = a.adam_beta2;
  o.optim_config.eps = a.adam_epsilon;
  o.optim_config.weight_decay = a.weight_decay;
  o.optim_config.args = optim::parse_optim_args(a.optim_args);
  ZT_CHECK(a.optim_state_dtype == "fp32" || a.optim_state_dtype == "bf16", "--optim_state_dtype ",
           quote(a.optim_state_dtype), " is not known; use fp32 or bf16");
  o.optim_config.state_dtype = a.optim_state_dtype == "bf16" ? DType::bf16 : DType::f32;
  return o;
}

bool is_jsonl(const std::string& path) { return path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0; }

Interval interval_of(const std::string& s) {
  return s == "steps" ? Interval::steps : s == "epoch" ? Interval::epoch : Interval::no;
}

// --device and the offload keys (run_device.h), before memory is planned: ZeRO-Offload's stage 1-2
// configs run as stage 0 on one GPU.
DeviceKind choose_device(TrainArgs& a, dist::Communicator& world, const ModelConfig& cfg) {
  std::string note;
  const DeviceKind device = run_device(a, world.size(), cfg, &note);
  const std::string offload = apply_offload(a, device);
  if (world.rank() == 0)
    for (const std::string* n : std::initializer_list<const std::string*>{&note, &offload})
      if (!n->empty()) std::printf("ztrain: note: %s\n", n->c_str());
  return device;
}

// --max_memory / --auto_find_batch_size. Every rank must choose the same layout, so the limit is
// the smallest any rank sees (a collective, after the ranks agreed on the arguments). Returns the
// limit for this host (-1: none); auto_find_batch_size may change the batch and the recomputation.
int64_t fit_memory(TrainArgs& a, dist::Communicator& world, const ModelConfig& cfg, nn::ActPlan* plan) {
  if (a.max_memory.empty() && !a.auto_find_batch_size) return -1;
  std::string source;
  int64_t limit = memory_limit_per_rank(a, &source);
  int64_t lim = limit < 0 ? INT64_MAX : limit;
  if (world.size() > 1) world.all_reduce(&lim, 1, dist::ReduceOp::min);
  const int64_t host_limit = lim == INT64_MAX ? -1 : lim * parallel::ranks_on_this_host();
  if (!a.auto_find_batch_size) return host_limit;
  const std::string line =
      auto_find_batch_size(a, cfg, seq_len(a, cfg), world.size(), lim == INT64_MAX ? -1 : lim, source);
  *plan = act_plan_from_args(a, cfg);  // it may have chosen a recomputation mode
  if (world.rank() == 0) std::printf("%s\n", line.c_str());
  return host_limit;
}

// The layout's memory against --max_memory (or the machine), before anything large is allocated;
// then which kind of data the run reads and the flags that only one kind takes.
void check_memory_and_data(const TrainArgs& a, const TrainConfig& c, int64_t host_limit) {
  const ModelConfig& cfg = c.model.config;
  const int T = c.data.seq_len, dp = c.parallel.dims.dp(), rows = a.per_device_train_batch_size;
  const int64_t limit = a.max_memory.empty() ? -1 : host_limit;
  ZT_CHECK(T <= cfg.max_position, "--model_max_length ", T, " exceeds the model's context of ", cfg.max_position,
           " positions (n_positions / max_position_embeddings); lower it");
  const nn::ActPlan& plan = c.precision.plan;
  // The planner's model of TP / PP / CP (a cp rank holds T / cp rows and shards over dp x cp).
  if (a.tensor_model_parallel_size > 1 || a.pipeline_parallel_size > 1 || a.context_parallel_size > 1)
    parallel::check_model_parallel_memory(
        cfg, T,
        {dp, a.tensor_model_parallel_size, a.pipeline_parallel_size, a.sequence_parallel, a.zero_stage, rows,
         a.gradient_accumulation_steps, plan.recompute == nn::Recompute::full, a.context_parallel_size},
        plan.precision, a.optim, limit);
  else if (a.offload_optimizer != "nvme" && a.offload_param != "nvme") {  // offload sizes its windows itself
    const parallel::TrainingLayout l{rows,
                                     T,
                                     a.zero_stage,
                                     dp,
                                     a.zero_hpz_partition_size,
                                     parallel::reduce_bucket_elements(a.reduce_bucket_size, a.zero_stage),
                                     plan,
                                     int(dtype_size(comm_dtype_from_args(a)))};
    parallel::check_training_memory(cfg, l, limit);
    if (!a.max_host_memory.empty())
      parallel::check_training_memory(
          cfg, l, parse_memory_size(a.max_host_memory, "--max_host_memory"), "--max_host_memory " + a.max_host_memory,
          "offload to disk (--offload_optimizer nvme --nvme_path DIR, with --zero_stage 3 --offload_param nvme "
          "the parameters too; docs/offload.md), or ");
  }
  const bool sft = c.data.sft;
  ZT_CHECK(sft || !is_jsonl(a.validation_file), "--validation_file ", a.validation_file,
           " holds SFT records (.jsonl) but --train_file is a token file; give both in the same form");
  // A flag of one kind of data given with the other would be parsed and ignored: refused instead.
  // (--tokenizer_name is not among them: it also names the tokenizer a token-file run carries.)
  for (const char* f :
       {"chat_template_path", "completion_only_loss", "assistant_only_loss", "cache_dir", "chat_template_max_steps"})
    ZT_CHECK(sft || !a.explicit_flags.count(f), "--", f, " applies to SFT records (a .jsonl --train_file), not to ",
             "the token file ", a.train_file);
  ZT_CHECK(!sft || !a.explicit_flags.count("eos_token_id"),
           "--eos_token_id separates documents in token files; SFT records (.jsonl) are separate examples already");
}

// The settings, once every check passed and every value is final.
void fill_sections(const TrainArgs& a, TrainConfig& c) {
  TrainConfig::Data& d = c.data;
  d.train_file = a.train_file;
  d.validation_file = a.validation_file;
  d.micro_batch = a.per_device_train_batch_size;
  d.accumulation = a.gradient_accumulation_steps;
  d.global_batch = a.train_batch_size;
  d.shuffle = !a.no_shuffle;
  d.seed = data_seed_of(a);
  d.packing = a.packing;
  d.eos_token_id = a.eos_token_id;
  d.prefetch = a.dataloader_prefetch;
  d.allow_change = allowed_changes(a.resume_allow_changes).data;
  d.tokenizer_path = !a.tokenizer_name.empty() ? a.tokenizer_name : a.model_name_or_path;
  d.chat_template_path = a.chat_template_path;
  d.cache_dir = a.cache_dir.empty() ? sft_default_cache_dir() : a.cache_dir;
  d.completion_only_loss = a.completion_only_loss;
  d.assistant_only_loss = a.assistant_only_loss;
  d.chat_template_max_steps = a.chat_template_max_steps;
  c.model.hf_dir = a.model_name_or_path;
  c.model.adapter_dir = a.adapter_name_or_path;
  c.model.seed = a.seed;
  c.model.allow_change = allowed_changes(a.resume_allow_changes).model;
  c.model.rope_scaling_given = !a.rope_scaling.empty();
  TrainConfig::Parallel& p = c.parallel;
  p.sequence_parallel = a.sequence_parallel;
  p.layers_per_virtual_stage = a.layers_per_virtual_stage;
  p.stage_layers = a.pipeline_layers;
  p.balance_by_time = a.pipeline_balance == "time";
  p.engine = engine_options(a);
  if (a.local_sgd_steps > 0) p.local_sgd = {a.local_sgd_steps, a.local_sgd_outer_lr, a.local_sgd_outer_momentum};
  p.straggler_threshold = a.straggler_threshold;
  p.device_memory_text = a.max_device_memory;
  p.host_memory_text = a.max_host_memory;
  if (!a.max_host_memory.empty()) p.host_memory_cap = parse_memory_size(a.max_host_memory, "--max_host_memory");
  if (!a.max_device_memory.empty() && p.device == DeviceKind::cuda)  // a CPU run ignores it
    p.device_memory_cap = parse_memory_size(a.max_device_memory, "--max_device_memory");
  TrainConfig::Optim& o = c.optim;
  o.schedule = schedule_spec(a);
  o.max_grad_norm = a.max_grad_norm;
  o.max_steps = a.max_steps;
  o.epochs = a.num_train_epochs;
  o.spike_policy = spike_policy_from(a.spike_policy);
  o.spike_window = a.spike_window;
  o.spike_zscore = a.spike_zscore;
  o.spike_max_rollbacks = a.spike_max_rollbacks;
  TrainConfig::Precision& pr = c.precision;
  pr.fp16 = a.fp16;
  pr.bf16 = a.bf16;
  if (a.fp16) {
    pr.scaler = a.ds_precision.loss_scaler;
  } else if (a.bf16 && a.ds_precision.bf16_check_grad_overflow) {
    optim::LossScalerConfig fixed;
    fixed.loss_scale = 1;  // bf16 needs no scaling; the scaler only skips and counts
    pr.scaler = fixed;
  }
  pr.peak_gflops = a.peak_gflops;
  pr.peak_cache_dir = a.peak_cache_dir;
}

void fill_outputs(const TrainArgs& a, TrainConfig& c) {
  TrainConfig::Checkpoint& k = c.checkpoint;
  k.output_dir = a.output_dir;
  k.overwrite = a.overwrite_output_dir;
  k.resume_from = a.resume_from_checkpoint;
  k.save = interval_of(a.save_strategy);
  k.save_steps = a.save_steps;
  k.save_total_limit = a.save_total_limit;
  k.save_dtype = a.save_dtype == "float32" ? DType::f32 : DType::bf16;
  k.max_shard_bytes = hf_parse_size(a.max_shard_size, "--max_shard_size");
  k.flash = a.flash_checkpoint;
  k.load_best_model_at_end = a.load_best_model_at_end;
  const std::string& m = a.metric_for_best_model;
  k.metric = m == "loss" || m == "eval_loss" ? BestMetric::loss : BestMetric::perplexity;
  k.metric_name = m;
  k.greater_is_better = a.explicit_flags.count("greater_is_better") ? a.greater_is_better : false;
  k.input_paths = input_paths(a);
  TrainConfig::Logging& l = c.logging;
  TrainLogOptions& o = l.log;
  o.output_dir = a.output_dir;
  o.logging_dir = a.logging_dir;
  o.run_name = a.run_name;
  o.report_to = a.report_to;
  o.disable_tqdm = a.disable_tqdm;
  o.plot = a.plot;
  o.micro_batch = a.per_device_train_batch_size;
  o.accumulation = a.gradient_accumulation_steps;
  o.threads = a.threads;
  o.logging_steps = a.logging_steps;
  o.save_steps = a.save_steps;
  o.shuffle = !a.no_shuffle;
  o.seed = a.seed;
  o.data_seed = data_seed_of(a);
  l.strategy = interval_of(a.logging_strategy);
  l.steps = a.logging_steps;
  l.first_step = a.logging_first_step;
  if (!a.eval_strategy.empty()) l.eval = interval_of(a.eval_strategy);
  l.eval_steps = a.eval_steps;
  if (a.explicit_flags.count("do_eval")) l.do_eval = a.do_eval;
  l.max_eval_samples = a.max_eval_samples;
  l.eval_tasks = a.eval_tasks;
  l.eval_probes = a.eval_probes;
  l.eval_batch = a.per_device_eval_batch_size;
  l.threads = a.threads;
  c.test = {a.test_fail_rank,   a.test_fail_step,  a.test_slow_rank,    a.test_slow_seconds,
            a.test_flash_pause, a.test_spike_step, a.test_spike_factor, a.test_spike_by_state};
}

}  // namespace

TrainConfig build_train_config(TrainArgs a, dist::Communicator& world) {
  TrainConfig c;
  if (a.threads > 0) omp_set_num_threads(a.threads);
  check_args(a);
  check_peft_flags(a);
  check_tp_args(a, world.size());
  ModelConfig& cfg = c.model.config;
  cfg = load_config(a);
  apply_peft_args(a, cfg);  // LoRA: the adapters' settings, checked before anything is allocated
  parallel::tensor_parallel_cut(cfg, a.tensor_model_parallel_size, 0, a.sequence_parallel);  // checks
  check_cp_args(a, world.size(), seq_len(a, cfg));
  c.precision.plan = act_plan_from_args(a, cfg);  // a bad combination fails here, before any work
  // Every weight shard present before --output_dir is touched (a missing one is one error).
  if (!a.model_name_or_path.empty()) hf_check_weights(a.model_name_or_path);
  c.model.side_files = side_files(a);
  c.data.channels = parse_channels(a.train_file, a.train_file_weights);
  c.data.identity = channels_identity(c.data.channels);  // a plain file's own identity
  // The job's first collective, before anything sized by the arguments or the config is
  // allocated or exchanged: ranks that disagree stop here, with the difference named.
  check_ranks_agree(world, job_identity(a, cfg, c.data.identity));
  c.parallel.device = choose_device(a, world, cfg);
  const int64_t host_limit = fit_memory(a, world, cfg, &c.precision.plan);
  apply_moe_args(a, &cfg);  // what the experts cannot run with yet is refused
  c.parallel.schedule = check_pipeline_args(a, world.size(), cfg);
  parallel::check_data_parallel_options(engine_options(a),
                                        world.size() / (a.tensor_model_parallel_size * a.pipeline_parallel_size));
  ZT_CHECK(a.offload_optimizer == "nvme" || a.offload_param == "nvme" || !a.explicit_flags.count("nvme_path"),
           "--nvme_path is given but nothing is offloaded to disk: add --offload_optimizer nvme (and, with "
           "--zero_stage 3, --offload_param nvme) or drop it");
  ZT_CHECK((a.offload_optimizer != "nvme" && a.offload_param != "nvme") || !a.flash_checkpoint,
           "--flash_checkpoint copies the state while training goes on, and offload to disk lends that state's "
           "memory back to the next step; use ordinary checkpoints (--save_steps) with offload");
  ZT_CHECK((a.offload_optimizer != "nvme" && a.offload_param != "nvme") || world.size() == 1,
           "offload to disk (nvme) runs in one process for now (", world.size(),
           " ranks here): each rank would stream its own file, which is not implemented");
  ZT_CHECK(a.local_sgd_steps == 0 || (a.tensor_model_parallel_size == 1 && a.pipeline_parallel_size == 1),
           "--local_sgd_steps does not compose with tensor or pipeline parallelism yet; use one of them");
  ZT_CHECK(a.local_sgd_steps == 0 || a.spike_policy == "none", "--spike_policy ", a.spike_policy,
           " judges the gradient norm, which local SGD's groups do not share; "
           "use --spike_policy none with --local_sgd_steps");
  if (a.local_sgd_steps > 0) a.local_sgd_group_size = local_sgd_group(world, a.local_sgd_group_size);
  c.parallel.world = world.size();
  c.parallel.dims = grid_dims(a, world.size());
  c.data.seq_len = seq_len(a, cfg);
  c.data.sft = c.data.channels.named ? c.data.channels.sft : is_jsonl(a.train_file);
  check_memory_and_data(a, c, host_limit);
  fill_sections(a, c);
  fill_outputs(a, c);
  return c;
}

}  // namespace zt
