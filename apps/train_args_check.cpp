// train_args_check.cpp: see train_args_check.h.
#include "train_args_check.h"

#include <unistd.h>

#include "checkpoint/hf_model.h"
#include "core/error.h"
#include "data/blend.h"
#include "optim/spike_guard.h"
#include "parallel/context_parallel.h"

namespace zt {

namespace {

// HF Trainer's strategy flags, checked as TrainingArguments checks them.
void check_hf_strategies(const TrainArgs& a) {
  auto given = [&](const char* f) { return a.explicit_flags.count(f) > 0; };
  for (const auto& [flag, v] :
       {std::pair{"--eval_strategy", a.eval_strategy}, {"--logging_strategy", a.logging_strategy}})
    ZT_CHECK(v.empty() || v == "no" || v == "steps" || v == "epoch", flag, " ", quote(v),
             " is not supported; use no, steps or epoch");
  ZT_CHECK(a.do_train, "--do_train false: `ztrain train` always trains; to evaluate only, run `ztrain eval`");
  ZT_CHECK(a.save_safetensors,
           "--save_safetensors false: ztrain writes safetensors only (HF's default); drop the flag");
  const bool eval_given = !a.eval_strategy.empty() && a.eval_strategy != "no";
  ZT_CHECK(!eval_given || !a.validation_file.empty(), "--eval_strategy ", a.eval_strategy,
           " needs --validation_file (the data to evaluate)");
  ZT_CHECK(!(given("do_eval") && a.do_eval) || !a.validation_file.empty(), "--do_eval needs --validation_file");
  ZT_CHECK(a.per_device_eval_batch_size <= a.per_device_train_batch_size, "--per_device_eval_batch_size ",
           a.per_device_eval_batch_size, " exceeds --per_device_train_batch_size ", a.per_device_train_batch_size,
           ": evaluation runs in the activations planned for training; lower it");
  const std::string& m = a.metric_for_best_model;
  ZT_CHECK(m == "loss" || m == "eval_loss" || m == "perplexity" || m == "eval_perplexity", "--metric_for_best_model ",
           quote(m), " is not a metric ztrain evaluates; use loss (eval_loss) or perplexity");
  if (!a.load_best_model_at_end) return;
  // TrainingArguments' rules: checkpoints exactly where evaluations happen.
  ZT_CHECK(eval_given, "--load_best_model_at_end needs --eval_strategy steps or epoch (and --validation_file)");
  ZT_CHECK(a.save_strategy == a.eval_strategy,
           "--load_best_model_at_end requires the save and eval strategy to match, "
           "got --save_strategy ",
           a.save_strategy, " and --eval_strategy ", a.eval_strategy);
  const int64_t eval_steps = a.eval_steps > 0 ? a.eval_steps : int64_t(a.logging_steps);  // HF's fallback
  ZT_CHECK(a.save_strategy != "steps" || (eval_steps > 0 && a.save_steps % eval_steps == 0),
           "--load_best_model_at_end requires --save_steps (", a.save_steps, ") to be a multiple of --eval_steps (",
           eval_steps, ")");
}

// Flags that only act together with another: given without it, they are refused rather than
// parsed and ignored (docs/flags.md#flags-that-need-another).
void check_flag_dependencies(const TrainArgs& a) {
  const bool eval = !a.validation_file.empty();
  // Whether any evaluation happens (the Trainer's rule: --do_eval as given, else not --eval_strategy no).
  const bool evaluations = eval && (a.explicit_flags.count("do_eval") ? a.do_eval : a.eval_strategy != "no");
  const bool spikes = a.spike_policy != "none";
  const char* scored_at =
      "an evaluation to be scored at (--validation_file, with evaluation not switched off by --eval_strategy no or "
      "--do_eval false)";
  const ChannelSpec channels = parse_channels(a.train_file, a.train_file_weights);
  const std::string& f = a.train_file;
  const bool sft = channels.named ? channels.sft : f.size() > 6 && f.compare(f.size() - 6, 6, ".jsonl") == 0;
  const struct {
    const char* flag;
    bool ok;
    const char* needs;
  } rules[] = {
      {"eval_steps", eval, "--validation_file (the data to evaluate)"},
      {"eval_steps", a.eval_strategy.empty() || a.eval_strategy == "steps", "--eval_strategy steps"},
      {"max_eval_samples", eval, "--validation_file (the data to evaluate)"},
      {"per_device_eval_batch_size", eval, "--validation_file (the data to evaluate)"},
      {"metric_for_best_model", eval, "--validation_file (the data to evaluate)"},
      {"greater_is_better", eval, "--validation_file (the data to evaluate)"},
      {"eval_tasks", evaluations, scored_at},
      {"eval_probes", evaluations, scored_at},
      {"eos_token_id", a.packing || sft, "--packing (it separates the packed documents)"},  // SFT: refused later
      {"spike_window", spikes, "--spike_policy skip, rollback or stop"},
      {"spike_zscore", spikes, "--spike_policy skip, rollback or stop"},
      {"spike_max_rollbacks", a.spike_policy == "rollback", "--spike_policy rollback"},
      {"resume_allow_changes", !a.resume_from_checkpoint.empty(), "--resume_from_checkpoint (it relaxes a resume)"},
      {"save_steps", a.save_strategy == "steps", "--save_strategy steps (the default)"},
      {"save_total_limit", a.save_strategy != "no", "checkpoints: drop --save_strategy no"},
      {"local_sgd_group_size", a.local_sgd_steps > 0, "--local_sgd_steps"},
      {"local_sgd_outer_lr", a.local_sgd_steps > 0, "--local_sgd_steps"},
      {"local_sgd_outer_momentum", a.local_sgd_steps > 0, "--local_sgd_steps"},
      {"logging_dir", a.report_to != "none", "--report_to tensorboard (the default)"},
      {"data_seed", !a.no_shuffle, "shuffling (it seeds the data order): drop --no_shuffle"},
  };
  for (const auto& r : rules)
    ZT_CHECK(r.ok || !a.explicit_flags.count(r.flag), "--", r.flag, " has no effect without ", r.needs,
             "; add that or drop the flag");
}

// --run_name becomes a folder under output_dir/runs: one plain name, nothing that climbs out.
void check_run_name(const std::string& n) {
  bool plain = !n.empty() && n != "." && n != "..";
  for (char c : n) plain = plain && c != '/' && c != '\\' && (unsigned char)c >= 0x20 && c != 0x7f;
  ZT_CHECK(plain, "--run_name ", quote(n),
           " must be one folder name (no '/', '\\' or control characters, not . or ..): it names the TensorBoard "
           "run folder output_dir/runs/<run_name>");
}

}  // namespace

AllowedChanges allowed_changes(const std::string& list) {
  AllowedChanges c;
  for (size_t b = 0; b <= list.size() && !list.empty();) {
    const size_t e = std::min(list.find(',', b), list.size());
    const std::string item = list.substr(b, e - b);
    ZT_CHECK(item == "model" || item == "data", "--resume_allow_changes ", quote(item),
             " is not one of model, data; give a comma-separated list such as model,data");
    (item == "model" ? c.model : c.data) = true;
    b = e + 1;
  }
  return c;
}

// Every file or folder the command reads, with the flag that names it: --overwrite_output_dir
// must not delete one of them.
std::vector<std::pair<std::string, std::string>> input_paths(const TrainArgs& a) {
  std::vector<std::pair<std::string, std::string>> r = {{"--model_name_or_path", a.model_name_or_path},
                                                        {"--model_config_path", a.model_config_path},
                                                        {"--validation_file", a.validation_file},
                                                        {"--tokenizer_name", a.tokenizer_name},
                                                        {"--chat_template_path", a.chat_template_path},
                                                        {"--deepspeed", a.deepspeed},
                                                        {"--cache_dir", a.cache_dir}};
  for (const DataChannel& c : parse_channels(a.train_file, a.train_file_weights).channels)
    r.push_back({"--train_file", c.path});
  return r;
}

// Argument checks that need nothing but the arguments: they fail before any work.
void check_args(const TrainArgs& a) {
  check_flag_dependencies(a);
  ZT_CHECK(a.per_device_train_batch_size > 0, "--per_device_train_batch_size must be positive");
  ZT_CHECK(a.gradient_accumulation_steps > 0, "--gradient_accumulation_steps must be positive");
  ZT_CHECK(!a.train_file.empty(),
           "--train_file is required (a token file such as nanoGPT's train.bin, or SFT records in a .jsonl file)");
  ZT_CHECK(a.save_strategy == "no" || a.save_strategy == "steps" || a.save_strategy == "epoch", "--save_strategy \"",
           a.save_strategy, "\" is not supported; use steps, epoch or no");
  check_hf_strategies(a);
  if (a.explicit_flags.count("run_name")) check_run_name(a.run_name);
  ZT_CHECK(a.save_dtype == "float32" || a.save_dtype == "bfloat16", "--save_dtype must be float32 or bfloat16");
  schedule_from_args(a, 0);  // the scheduler's name and --lr_scheduler_kwargs
  spike_policy_from(a.spike_policy);
  hf_parse_size(a.max_shard_size, "--max_shard_size");
  allowed_changes(a.resume_allow_changes);
  ZT_CHECK(!parse_channels(a.train_file, a.train_file_weights).named || a.pipeline_parallel_size == 1,
           "--train_file with named channels does not compose with pipeline stages yet (the per-channel losses "
           "live on the last stage); use one file or no --pipeline-model-parallel-size");
  ZT_CHECK(!a.flash_checkpoint || !a.load_best_model_at_end,
           "--flash_checkpoint with --load_best_model_at_end is not supported yet (pruning in the background "
           "could remove the best checkpoint); drop one of them");
}

// --context-parallel-size against the world, the sequence and the features it does not compose
// with yet (docs/parallelism-cp.md).
void check_cp_args(const TrainArgs& a, int world, int T) {
  const int cp = a.context_parallel_size;
  if (cp == 1) return;
  const int model_ranks = cp * a.tensor_model_parallel_size * a.pipeline_parallel_size;
  ZT_CHECK(world % model_ranks == 0, "--context-parallel-size ", cp, " does not divide the ", world, " ranks",
           model_ranks == cp ? "" : " (with tensor / pipeline parallelism)", "; the ranks must be a multiple of it");
  parallel::check_cp_composes(T, cp, a.packing, !a.validation_file.empty(), a.pipeline_parallel_size);
  ZT_CHECK(a.zero_hpz_partition_size <= 1 && a.local_sgd_steps == 0, "--context-parallel-size ", cp,
           " does not compose with --zero_hpz_partition_size or --local_sgd_steps yet");
  ZT_CHECK(a.max_memory.empty() && !a.auto_find_batch_size, "--context-parallel-size ", cp,
           ": --max_memory / --auto_find_batch_size do not model context parallelism yet; set the batch yourself");
}

// Local SGD's group size: given, or the ranks of a host (hosts named by gethostname, each the
// same number of consecutive ranks, as mpirun's --map-by ppr:N:node places them).
int local_sgd_group(dist::Communicator& world, int given) {
  const int n = world.size();
  if (given > 0) {
    ZT_CHECK(n % given == 0, "--local_sgd_group_size ", given, " must divide the number of ranks (", n, ")");
    return given;
  }
  char mine[64] = {};
  gethostname(mine, sizeof mine - 1);
  std::vector<char> all(size_t(n) * sizeof mine);
  world.all_gather(mine, all.data(), sizeof mine);
  auto host = [&](int r) { return std::string(all.data() + size_t(r) * sizeof mine); };
  int g = 1;
  while (g < n && host(g) == host(0)) ++g;
  bool ok = n % g == 0;
  for (int r = 0; ok && r < n; ++r) ok = host(r) == host(r - r % g) && (r % g != 0 || r == 0 || host(r) != host(r - 1));
  ZT_CHECK(ok, "--local_sgd_steps groups ranks by host, but the hosts do not each hold ", g,
           " consecutive ranks; place them so (mpirun --map-by ppr:N:node) or set --local_sgd_group_size");
  return g;
}

// The run's process grid: pipeline stages outermost (--pipeline-model-parallel-size), tensor
// parallel runs of neighbouring ranks innermost (--tensor-model-parallel-size; a TP group lies
// inside one stage), the rest data parallel (sharded, or hybrid when ZeRO's hpz_partition_size or
// local SGD's groups group the ranks); no context parallelism yet. (check_pipeline_args,
// check_tp_args and check_data_parallel_options have already checked the divisions.)
dist::ParallelDims grid_dims(const TrainArgs& a, int world) {
  dist::ParallelDims d;
  d.tp = a.tensor_model_parallel_size;
  d.pp = a.pipeline_parallel_size;
  d.cp = a.context_parallel_size;
  const int dp = world / (d.tp * d.pp * d.cp);
  d.dp_shard = a.zero_hpz_partition_size > 1 ? a.zero_hpz_partition_size : dp;
  if (a.local_sgd_steps > 0) d.dp_shard = a.local_sgd_group_size;  // resolved, divides the world
  d.dp_replicate = dp / d.dp_shard;
  d.ep = a.expert_model_parallel_size;
  return d;
}

// Tensor / sequence parallelism's flags against the world and the features that do not
// compose with it yet: one line each, naming the numbers (the model's heads are checked
// by parallel::tensor_parallel_cut when the arguments are resolved).
void check_tp_args(const TrainArgs& a, int world) {
  const int tp = a.tensor_model_parallel_size;
  ZT_CHECK(!a.sequence_parallel || tp > 1,
           "--sequence-parallel needs tensor parallelism (--tensor-model-parallel-size > 1); it splits the TP "
           "group's tokens");
  if (tp == 1) return;
  ZT_CHECK(world % tp == 0, "--tensor-model-parallel-size ", tp, " does not divide the ", world,
           " ranks; the ranks must be a multiple of it");
  const int pp = a.pipeline_parallel_size, dp = world / (tp * pp);
  ZT_CHECK(world % (tp * pp) == 0, "--tensor-model-parallel-size ", tp, " x --pipeline-model-parallel-size ", pp, " = ",
           tp * pp, " does not divide the ", world, " ranks; give mpirun -np a multiple of ", tp * pp);
  ZT_CHECK(a.max_memory.empty() && !a.auto_find_batch_size, "--tensor-model-parallel-size ", tp,
           ": --max_memory / --auto_find_batch_size do not model tensor parallelism yet; set the batch yourself");
  ZT_CHECK(a.zero_hpz_partition_size <= 1 || dp % a.zero_hpz_partition_size == 0, "--zero_hpz_partition_size ",
           a.zero_hpz_partition_size, " must divide the ", dp, " data-parallel ranks (", world,
           " ranks / tensor parallel ", tp, " / pipeline stages ", pp, ")");
}

// The pipeline flags against each other and the world (one error line each); the schedule.
parallel::PipeSchedule check_pipeline_args(const TrainArgs& a, int world, const ModelConfig& cfg) {
  const int P = a.pipeline_parallel_size, K = a.layers_per_virtual_stage, L = cfg.n_layer;
  ZT_CHECK(world % P == 0, "--pipeline-model-parallel-size ", P, " does not divide the ", world,
           " ranks; give mpirun -np a multiple of it");
  ZT_CHECK(P <= L, "--pipeline-model-parallel-size ", P, " exceeds the model's ", L,
           " layers; every stage needs at least one layer");
  if (P == 1) {
    for (const char* f :
         {"num-layers-per-virtual-pipeline-stage", "pipeline_schedule", "pipeline_layers", "pipeline_balance"})
      ZT_CHECK(!a.explicit_flags.count(f), "--", f,
               " needs pipeline stages: add --pipeline-model-parallel-size 2 or more");
    return parallel::PipeSchedule::one_f_one_b;
  }
  const parallel::PipeSchedule kind =
      a.pipeline_schedule.empty() ? (K > 0 ? parallel::PipeSchedule::interleaved : parallel::PipeSchedule::one_f_one_b)
                                  : parallel::parse_schedule(a.pipeline_schedule);
  ZT_CHECK(
      kind != parallel::PipeSchedule::interleaved || K > 0,
      "--pipeline_schedule interleaved needs --num-layers-per-virtual-pipeline-stage (the layers per model chunk)");
  ZT_CHECK(K == 0 || kind == parallel::PipeSchedule::interleaved, "--num-layers-per-virtual-pipeline-stage ", K,
           " makes virtual stages, which only --pipeline_schedule interleaved runs (not ", a.pipeline_schedule, ")");
  ZT_CHECK(K == 0 || L % (P * K) == 0, "--num-layers-per-virtual-pipeline-stage ", K,
           " x --pipeline-model-parallel-size ", P, " = ", P * K, " does not divide the model's ", L, " layers");
  const int v = K > 0 ? L / (P * K) : 1;
  parallel::check_schedule({kind, P, a.gradient_accumulation_steps, v});
  ZT_CHECK(a.pipeline_balance == "time" || a.pipeline_balance == "memory", "--pipeline_balance ",
           quote(a.pipeline_balance), " is not time or memory");
  ZT_CHECK(!a.auto_find_batch_size,
           "--auto_find_batch_size does not plan pipeline stages yet; give the batch with "
           "--per_device_train_batch_size");
  return kind;
}

}  // namespace zt

namespace zt {

void apply_moe_args(const TrainArgs& a, ModelConfig* cfg) {
  MoeConfig& m = cfg->moe;
  if (!m.on()) {
    for (const char* flag : {"moe_capacity_factor", "router_z_loss_coef", "expert-model-parallel-size"})
      ZT_CHECK(!a.explicit_flags.count(flag), "--", flag, " applies to mixture-of-experts models (mixtral, qwen2_moe, ",
               "qwen3_moe); ", cfg->model_type, " has no experts");
    return;
  }
  const int ep = a.expert_model_parallel_size;
  ZT_CHECK(m.num_experts % ep == 0, "--expert-model-parallel-size ", ep, " does not divide the model's ", m.num_experts,
           " experts; use a divisor of ", m.num_experts);
  m.capacity_factor = a.moe_capacity_factor;
  m.z_loss_coef = float(a.router_z_loss_coef);
  const int tp = a.tensor_model_parallel_size;
  ZT_CHECK(ep == 1 || tp <= 1 || m.num_experts % (int64_t(tp) * ep) == 0, "--expert-model-parallel-size ", ep,
           " x --tensor-model-parallel-size ", tp, " does not divide the model's ", m.num_experts,
           " experts (each rank computes E / (tp x ep) of them); use sizes whose product divides ", m.num_experts);
}

}  // namespace zt
