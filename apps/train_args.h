// train_args.h: the arguments of `ztrain train` as the command line and the DeepSpeed config give
// them, named after Hugging Face TrainingArguments where HF has the setting (same defaults), plus
// Megatron's and ztrain's own. apps/ resolves them into the library's TrainConfig
// (train_config_build.h); the library never sees them.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>

#include "core/async_file.h"

#include "dist/communicator.h"
#include "optim/loss_scaler.h"
#include "optim/schedule.h"
#include "train/train_config.h"

namespace zt {

// What a DeepSpeed config's fp16 / bf16 / communication_data_type / activation_checkpointing
// sections say (docs/deepspeed.md#precision). apply_deepspeed_config fills it; the trainer
// consumes it together with the command line's precision and recomputation flags. Defaults are
// DeepSpeed's (deepspeed/runtime/precision_config.py, activation_checkpointing/config.py, 0.19.6).
struct DeepSpeedPrecision {
  // A section's "enabled": absent (no such section or key), false, true, or "auto" (HF fills it
  // from the command line: --fp16 / --bf16).
  enum class Enabled { absent, off, on, auto_value };
  Enabled fp16 = Enabled::absent;
  Enabled bf16 = Enabled::absent;        // the "bf16" section, or its legacy name "bfloat16"
  optim::LossScalerConfig loss_scaler;   // fp16.loss_scale, initial_scale_power, loss_scale_window, ...
  bool bf16_check_grad_overflow = true;  // bf16.check_grad_overflow: skip a step whose gradients hold inf/NaN
  // communication_data_type, lower-cased: "fp32" | "bf16" | "fp16"; "" when absent, which in
  // DeepSpeed means the training dtype (engine.communication_data_type: fp16 if fp16 is
  // enabled, else bf16 if bf16 is, else fp32).
  std::string communication_data_type;

  // The activation_checkpointing section. DeepSpeed recomputes what the model's code wraps in
  // deepspeed.checkpointing.checkpoint; HF's Trainer with --gradient_checkpointing wraps every
  // block. The section being present asks for that full recomputation.
  bool activation_checkpointing = false;  // the section is present
  int64_t number_checkpoints = 0;         // number_checkpoints: blocks recomputed; 0 = absent/null (all)
  // Accepted; none changes what ztrain computes (a warning names those set to true): see
  // docs/deepspeed.md#precision.
  bool partition_activations = false, cpu_checkpointing = false, contiguous_memory_optimization = false;
  bool synchronize_checkpoint_boundary = false, profile = false;
};

// A new field is also named in train_args_json (apps/run_identity.cpp): the ranks of a job
// must agree on it, or it is listed there as legitimately per rank.
struct TrainArgs {
  // Model: an HF folder (config.json + model.safetensors) or a config.json for random init.
  std::string model_name_or_path;
  std::string model_config_path;
  std::string train_file;       // token file (nanoGPT train.bin, ztrain shard) or SFT .jsonl, or name=path,...
  std::string validation_file;  // same format; evaluated every eval_steps and at the end
  int64_t eval_steps = 0;       // 0: only at the end (eval_strategy steps: logging_steps, as HF)
  // HF Trainer's strategies (docs/flags.md#hugging-face-trainer-flags). "" = not given: evaluate
  // every eval_steps if set, and at the end.
  std::string eval_strategy;                   // no | steps | epoch (alias --evaluation_strategy)
  std::string logging_strategy = "steps";      // no | steps | epoch
  bool do_train = true;                        // must stay true: `ztrain train` trains (ztrain eval evaluates)
  bool do_eval = false;                        // given true: needs validation_file; given false: no evaluation at all
  int per_device_eval_batch_size = 0;          // windows per eval forward, <= the train batch; 0 = that batch
  bool load_best_model_at_end = false;         // --output_dir gets the best evaluated checkpoint's weights
  std::string metric_for_best_model = "loss";  // loss | eval_loss | perplexity | eval_perplexity
  bool greater_is_better = false;              // not given: HF's default (false for loss and perplexity)
  bool save_safetensors = true;                // ztrain writes only safetensors: false is refused
  int64_t max_eval_samples = 0;                // windows evaluated, 0 = all
  std::string eval_tasks, eval_probes;         // JSONL scored at each evaluation (observe/task_eval.h), "" = none
  std::string output_dir;
  bool overwrite_output_dir = false;

  int per_device_train_batch_size = 8;  // B
  int gradient_accumulation_steps = 1;  // micro-batches per optimizer step
  int model_max_length = 0;             // T; 0 = min(1024, model context)
  std::string rope_scaling;             // JSON (transformers' keys) replacing config.json's rope_scaling

  std::string optim = "adamw_torch";  // HF's --optim (optim::optimizer_names()); optim/optimizer.h
  std::string optim_args;             // HF's --optim_args "k=v,..."
  std::string optim_state_dtype = "fp32";
  bool adafactor = false;       // HF's deprecated --adafactor: --optim adafactor
  // LoRA (TRL's ModelConfig / PEFT's LoraConfig names; docs/peft.md); TRL's defaults.
  bool use_peft = false;
  int lora_r = 16;
  double lora_alpha = 32;
  double lora_dropout = 0.05;
  std::string lora_target_modules;  // comma- or space-separated names, or all-linear; "" = PEFT's default
  bool use_rslora = false;
  bool use_dora = false;
  std::string peft_type = "lora";
  // IA3 (PEFT's IA3Config names): its targets and the ones whose input it scales; "" = PEFT's default.
  std::string target_modules, feedforward_modules;
  std::string adapter_name_or_path;  // a PEFT adapter folder to start from (its adapter_config.json)
  // QLoRA (transformers' BitsAndBytesConfig names): the frozen base in NF4.
  bool load_in_4bit = false;
  bool load_in_8bit = false;
  std::string bnb_4bit_quant_type = "nf4";
  bool bnb_4bit_use_double_quant = false;
  std::string bnb_4bit_compute_dtype;  // "" = the run's precision
  std::string device = "auto";  // cpu | cuda | auto (a GPU when present and the run can use it)
  // ZeRO-Offload (DeepSpeed's zero_optimization.offload_optimizer / offload_param .device): none |
  // cpu | nvme. On the GPU, offload_optimizer cpu keeps fp32 masters and the optimizer state in
  // host memory (parallel/gpu_engine.cpp); on the CPU everything is in host memory already.
  std::string offload_optimizer = "none", offload_param = "none";
  // Offload to disk (device nvme; docs/offload.md): the scratch folder, DeepSpeed's buffer keys
  // (offload_optimizer.buffer_count, offload_param.buffer_count / buffer_size / max_in_cpu) and
  // its aio block. --max_host_memory caps what training holds in host memory ("8GiB"; "" = none).
  std::string nvme_path;
  int offload_buffer_count = 4, offload_param_buffer_count = 5;
  int64_t offload_param_buffer_size = 100000000, offload_param_max_in_cpu = 1000000000;
  int64_t offload_sub_group_size = 1000000000;  // zero_optimization.sub_group_size: the largest chunk
  AioOptions aio;
  std::string max_host_memory;
  std::string max_device_memory;  // cap on ztrain's GPU allocations ("20GiB"; "" = the GPU's memory)
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0 disables clipping
  std::string lr_scheduler_type = "linear";
  std::string lr_scheduler_kwargs = "{}";  // HF's: a JSON object of the schedule's own arguments
  double warmup_ratio = 0.0;
  double warmup_steps = 0;  // HF v5: a float < 1 is a ratio of the total steps

  int64_t max_steps = -1;  // > 0 overrides num_train_epochs
  double num_train_epochs = 3.0;
  double logging_steps = 500;           // < 1: a ratio of the total steps
  std::string save_strategy = "steps";  // no | steps | epoch
  int64_t save_steps = 500;
  int64_t save_total_limit = 0;        // keep at most N checkpoint-* folders, 0 = all
  std::string resume_from_checkpoint;  // a checkpoint folder, or "latest" in output_dir
  // What a resume may find changed, comma-separated: "model" (the model config) and/or "data"
  // (the train file); "" = nothing (docs/checkpoints.md#resuming).
  std::string resume_allow_changes;
  std::string save_dtype = "float32";  // float32 | bfloat16 for saved model weights
  // Flash checkpoints (docs/fault-tolerance.md): each save copies the state to /dev/shm and
  // persists checkpoint-N in a background thread; latest resumes from a newer snapshot.
  bool flash_checkpoint = false;
  // Loss spikes and NaN (docs/fault-tolerance.md#loss-spikes-and-nan): what a step whose loss or
  // gradient norm lies over spike_zscore standard deviations above the mean of the last
  // spike_window applied steps does: none (not detected) | skip | rollback | stop. A non-finite
  // loss or gradient norm never reaches the weights whatever the policy.
  std::string spike_policy = "none";
  int64_t spike_window = 100;
  double spike_zscore = 6.0;
  // Rollbacks in a row to the same save (no newer save in between) before the run stops: a spike
  // that returns after every rollback comes from the schedule or the state, not from the data.
  int64_t spike_max_rollbacks = 5;
  // A rank whose compute in a step exceeds this many times the median rank's is flagged as a
  // straggler in the log (dist/straggler.h); 0 turns the check off.
  double straggler_threshold = 1.5;

  // Mixed precision (docs/training.md#mixed-precision): HF's --bf16 / --fp16, or a DeepSpeed
  // config's bf16 / fp16 blocks. fp32 masters, gradients and optimizer state either way.
  bool bf16 = false;
  bool fp16 = false;
  // Mixture-of-experts models (docs/moe.md): capacity-limited routing (each expert keeps at most
  // ceil(factor N K / E) of a micro-batch's assignments; 0 = dropless) and the router z-loss's weight.
  double moe_capacity_factor = 0.0;
  double router_z_loss_coef = 0.0;
  // Expert parallelism (Megatron's name): ranks of the data-parallel group sharing each MoE layer's
  // experts, E / size each, tokens exchanged all-to-all (docs/moe.md).
  int expert_model_parallel_size = 1;
  // Activation recomputation: HF's --gradient_checkpointing (= full), Megatron's
  // --recompute-granularity full | selective and --recompute-num-layers (the first N blocks
  // recompute; -1 = all), DeepSpeed's activation_checkpointing block.
  bool gradient_checkpointing = false;
  std::string recompute_granularity;  // "" = none (or full with gradient_checkpointing)
  int recompute_num_layers = -1;
  // Memory: --max_memory caps what training may use on this host ("24GB"; "" = what the
  // machine has available); --auto_find_batch_size (HF's name) picks the micro-batch and, where
  // needed, a recomputation mode that fit it (train/auto_fit.h).
  std::string max_memory;
  bool auto_parallel = false;  // --auto_parallel: the planner's layout (apps/auto_parallel.h)
  bool auto_find_batch_size = false;
  std::string max_shard_size = "5GB";  // save_pretrained's: larger weights go to shards + an index
  std::string tokenizer_name;          // folder whose tokenizer files are carried into saves ("": the model's)
  int64_t seed = 42;
  // HF's --data_seed: the seed of the data order (windows, SFT rows, channel blending), apart from
  // the initialisation's --seed; -1 = seed (HF's None). data_seed_of() resolves it.
  int64_t data_seed = -1;

  // Observability: TensorBoard event files under logging_dir (HF's default output_dir/runs/
  // <date>_<host>), a PNG of the loss curves at the end, a live progress line on a terminal.
  std::string logging_dir;                // "" = output_dir/runs/<date>_<host>
  std::string report_to = "tensorboard";  // tensorboard | none
  bool plot = false;                      // write output_dir/loss.png at the end
  std::string disable_tqdm = "auto";      // auto (progress line when stderr is a terminal) | true | false
  bool logging_first_step = false;        // HF's: also log step 1, whatever the logging strategy
  // HF's --run_name (for wandb / MLflow there): here the TensorBoard run folder's name,
  // output_dir/runs/<run_name> (unless --logging_dir), and "run_name" in all_results.json and
  // train_results.json. "" = HF's folder <date>_<host> and no key.
  std::string run_name;

  // Data: document packing (attention does not cross EOS boundaries, positions restart).
  bool packing = false;
  int64_t eos_token_id = -1;    // -1: the model config's eos_token_id
  int dataloader_prefetch = 3;  // micro-batches prepared ahead by the loader thread

  // Named channels' mixing weights (docs/data.md#channels): "w1,w2" or "name1=w1,name2=w2"; "" = by size.
  std::string train_file_weights;
  // Supervised fine-tuning data (docs/data.md#supervised-fine-tuning-data): a train_file or
  // validation_file ending in .jsonl holds chat / instruction records (TRL SFTTrainer's names).
  // (tokenizer_name, above, is also the SFT tokenizer: a folder or file; "" = model_name_or_path)
  std::string chat_template_path;                // a .jinja file or tokenizer_config.json; "" = the tokenizer's
  bool completion_only_loss = true;              // prompt-completion records: loss on the completion only
  bool assistant_only_loss = false;              // messages records: loss on the assistant turns only
  int64_t chat_template_max_steps = 10'000'000;  // work budget of one chat-template render (docs/security.md)
  std::string cache_dir;                         // tokenized-data cache; "" = $ZT_CACHE_DIR or ~/.cache/ztrain

  // Data parallelism over the ranks of mpirun (docs/distributed.md). Set by flags of the same
  // names or by a DeepSpeed JSON config (--deepspeed, HF Trainer's flag; its keys win over the
  // defaults here, "auto" keys take the flag values). Sizes are in elements, like DeepSpeed's.
  std::string deepspeed;                      // path of a DeepSpeed JSON config, "" = none
  int zero_stage = 0;                         // 0 = DDP (replicated), 1/2/3 = ZeRO stages
  bool overlap_comm = true;                   // reduce gradient buckets while backward runs
  int64_t reduce_bucket_size = 0;             // elements; 0 = DDP 25 MiB (PyTorch), ZeRO 5e8 (DeepSpeed)
  int64_t allgather_bucket_size = 500000000;  // DeepSpeed default 5e8 elements
  bool contiguous_gradients = true;
  bool reduce_scatter = true;       // stage 1/2: reduce-scatter gradients instead of all-reduce
  int zero_hpz_partition_size = 1;  // hybrid: shard within groups of this many ranks (1 = all ranks)
  // Local SGD / DiLoCo (parallel/local_sgd.h): groups of ranks (default: the ranks of a host)
  // all-reduce every step and synchronise across groups every local_sgd_steps steps.
  int local_sgd_steps = 0;       // 0: off
  int local_sgd_group_size = 0;  // 0: the ranks on this host
  double local_sgd_outer_lr = 0.7;
  double local_sgd_outer_momentum = 0.9;
  bool zero_quantized_weights = false;    // ZeRO++ qwZ: int8 blockwise parameter all-gather
  bool zero_quantized_gradients = false;  // ZeRO++ qgZ: int8 gradient reduce-scatter
  // Tensor / sequence parallelism (Megatron's flags; docs/parallelism-tp.md): TP peers are
  // neighbouring ranks; the data-parallel degree is the world / tensor_model_parallel_size.
  int tensor_model_parallel_size = 1;
  bool sequence_parallel = false;
  // Context parallelism (Megatron's --context-parallel-size; docs/parallelism-cp.md): each
  // sequence split over this many ranks (ring attention); they act as extra data-parallel ranks
  // for the gradients, so the data-parallel degree is the world / (tp x cp x pp).
  int context_parallel_size = 1;
  // Pipeline parallelism (Megatron-LM's flag names; docs/parallelism.md). The micro-batches of
  // a pipeline step are the gradient accumulation steps.
  int pipeline_parallel_size = 1;         // --pipeline-model-parallel-size P (the grid's outermost axis)
  int layers_per_virtual_stage = 0;       // --num-layers-per-virtual-pipeline-stage K (0: no virtual stages)
  std::string pipeline_schedule;          // gpipe | 1f1b | interleaved; "": 1f1b, interleaved with K
  std::string pipeline_layers;            // blocks per (virtual) stage, "6,6"; "": balanced by cost
  std::string pipeline_balance = "time";  // the default cut's cost: time (FLOPs) or memory (bytes)
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  int64_t train_batch_size = 0;  // DeepSpeed's global batch (0 = not set): micro x accumulation x ranks
  double ddp_timeout = -1;       // HF's name, seconds a collective waits for a missing rank; 0 = never;
                                 // -1 = ZT_COMM_TIMEOUT_S from the environment, else 300

  // DeepSpeed scheduler parameters (a config's "scheduler" section, docs/deepspeed.md), used
  // when lr_scheduler_type is WarmupLR | WarmupDecayLR | WarmupCosineLR. Defaults are DeepSpeed's.
  double warmup_min_lr = 0.0;
  double warmup_max_lr = -1.0;      // < 0: learning_rate (HF's "auto")
  std::string warmup_type = "log";  // log | linear
  double warmup_min_ratio = 0.0;    // WarmupCosineLR
  double cos_min_ratio = 1e-4;      // WarmupCosineLR
  int64_t total_num_steps = -1;     // scheduler length; -1: the run's total optimizer steps
  DeepSpeedPrecision ds_precision;  // from the --deepspeed config only
  // Names of the flags given on the command line (without "--"): a DeepSpeed config value
  // that disagrees with one of these is an error, while it silently replaces a default.
  std::set<std::string> explicit_flags;

  int threads = 0;  // 0: all cores
  bool no_shuffle = false;
  // The GEMM peak MFU is reported against; 0 = measure this machine's (plan/gemm_peak.h),
  // cached in peak_cache_dir ("" = measure every run, keep nothing).
  double peak_gflops = 0;
  std::string peak_cache_dir;
  // Test hook (apps/ sets it from ZT_TEST_FAIL_AT=rank:step): that rank throws at the start
  // of that step (0-based), so tests can check that the job ends at once naming the rank.
  int test_fail_rank = -1;
  int64_t test_fail_step = -1;
  // Test hook (apps/ sets it from ZT_TEST_SLOW_RANK=rank:seconds): that rank sleeps so long at
  // the start of every step, a straggler for tests/dist/straggler.sh.
  int test_slow_rank = -1;
  double test_slow_seconds = 0;
  // Test hook (apps/ sets it from ZT_TEST_FLASH_PAUSE=copy:N | persist:N): pause there (checkpoint/flash_checkpoint.h).
  std::string test_flash_pause;
  // Test hook (apps/ sets it from ZT_TEST_SPIKE_AT=step:factor): the loss and gradients of the
  // data of that 1-based step are multiplied by factor (nan allowed), a corrupted data window.
  int64_t test_spike_step = -1;
  double test_spike_factor = 1;
  bool test_spike_by_state = false;
};

// The seed of the data order: --data_seed, or --seed when it is not given (HF's rule).
inline int64_t data_seed_of(const TrainArgs& a) { return a.data_seed >= 0 ? a.data_seed : a.seed; }

// The LR schedule's arguments as the library takes them.
LrSchedule schedule_spec(const TrainArgs& a);

// The warmup steps HF derives from --warmup_steps / --warmup_ratio for a run of total steps;
// empty when that needs the total and it is unknown (total <= 0).
std::optional<int64_t> hf_warmup_steps(const TrainArgs& a, int64_t total);

// ds_precision as JSON (the resolved config: run identity, logs): its enabled switches as
// "absent" / false / true / "auto", the loss scaler's keys, communication_data_type ("" =
// absent) and the activation_checkpointing keys (null when the section is absent).
nlohmann::json deepspeed_precision_json(const DeepSpeedPrecision& d);

// The LR schedule of a run of total_steps optimizer steps: --lr_scheduler_type, HF's warmup
// rules (warmup_steps >= 1 is a count, < 1 a ratio, else warmup_ratio) and, for DeepSpeed's
// kinds, the scheduler parameters above (warmup_max_lr, total_num_steps, ...); HF's kinds take
// --lr_scheduler_kwargs. total_steps <= 0: the run's length is not known yet, and only the
// arguments are checked (optim::schedule_apply_kwargs).
optim::Schedule schedule_from_args(const TrainArgs& a, int64_t total_steps);

}  // namespace zt
