// main.cpp: the ztrain command line. Subcommands parse their flags, call the library
// and turn its errors into one line on stderr and a non-zero exit code.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/isa.h"
#include "data/sft_data.h"
#include "commands.h"
#include "deepspeed_config.h"
#include "dist/communicator.h"
#include "flags.h"
#include "hf_compat.h"
#include "hf_training_args.h"
#include "signals.h"
#include "auto_parallel.h"
#include "train_config_build.h"
#include "train_args.h"

namespace zt::app {

bool wants_help(const Args& args, const std::string& help) {
  for (auto& s : args)
    if (s == "--help" || s == "-h") {
      std::fputs(help.c_str(), stdout);
      return true;
    }
  return false;
}

// An error message on one line, whatever it holds, so scripts and logs see it whole.
std::string one_line(std::string msg) {
  for (size_t i = 0; (i = msg.find('\n', i)) != std::string::npos;) msg.replace(i, 1, "; ");
  return msg;
}

}  // namespace zt::app

namespace {

const char* kUsage =
    "ztrain: train GPT-2 and Llama-family language models on CPUs and NVIDIA GPUs\n"
    "usage: ztrain <command> [flags]\n"
    "commands:\n"
    "  train     train or fine-tune a model (HF Trainer flag names); ztrain train --help\n"
    "  tokenize  text / JSONL / folders -> token shards (train.bin, validation.bin)\n"
    "  tokenizer-train  learn a byte-level BPE tokenizer (tokenizer.json) from text\n"
    "  eval      loss and perplexity of a model folder on a token file\n"
    "  generate  sample text from a model folder with a KV cache\n"
    "  launch    run a command on N ranks with mpirun: ztrain launch --nproc_per_node N -- train ...\n"
    "  health-check     pre-flight check of every rank's GEMM and links (DLRover's node check)\n"
    "  bench-comm       time the collectives over message sizes (algbw / busbw, like nccl-tests)\n"
    "  bench-disk       the disk's read / write bandwidth through offload's io_uring path\n"
    "  estimate-memory  per-rank memory of a model under DDP / ZeRO-1/2/3 / hybrid sharding\n"
    "  plan             rank the dp x tp x pp / ZeRO / micro-batch / recomputation layouts of N ranks\n"
    "  info             the CPU, kernel levels (ZT_ISA), GEMM ISA and GEMM peaks ztrain uses here\n"
    "  plot      several runs' loss curves in one PNG: ztrain plot --runs out/a,out/b --output cmp.png\n"
    "  merge-adapter    a PEFT LoRA adapter merged into its base model, written as an HF folder\n"
    "  version   version, git commit, build type, CPU kernel levels and backends (also --version)\n"
    "  help      this text\n";

}  // namespace

namespace zt::app {

int cmd_train(const Args& args) {
  using namespace limits;
  zt::TrainArgs a;
  zt::app::FlagSet f("train");
  f.add("model_name_or_path", &a.model_name_or_path, "HF model folder (config.json + model.safetensors)");
  f.add("model_config_path", &a.model_config_path, "config.json for a randomly initialised model");
  f.add("train_file", &a.train_file,
        "token file (nanoGPT train.bin, ztrain shard) or SFT records (.jsonl); or named channels "
        "name1=path1,name2=path2 (token files, or .jsonl files), each channel's loss logged as loss/<name>");
  f.add("train_file_weights", &a.train_file_weights,
        "mixing weights of --train_file's channels: w1,w2 in their order or name1=w1,name2=w2 (default: by size)");
  f.add("validation_file", &a.validation_file, "token file or SFT .jsonl for eval_loss / perplexity");
  f.add("eval_steps", &a.eval_steps, "evaluate every N steps, 0 = at the end only (0)", range::closed(0, kMaxSteps));
  // HF Trainer flags users paste in (docs/flags.md#hugging-face-trainer-flags).
  f.add("do_train", &a.do_train, "accepted (HF); `ztrain train` always trains, false is refused");
  f.add("do_eval", &a.do_eval, "evaluate --validation_file at the end; false: no evaluation at all");
  f.add("eval_strategy", &a.eval_strategy, "no | steps (every --eval_steps, else --logging_steps) | epoch");
  f.add("evaluation_strategy", &a.eval_strategy, "HF's older name of --eval_strategy");
  f.add("logging_strategy", &a.logging_strategy, "no | steps (every --logging_steps) | epoch (steps)");
  f.add("per_device_eval_batch_size", &a.per_device_eval_batch_size,
        "sequences per evaluation forward, at most the train batch (the train batch)", range::closed(1, kMaxBatch));
  f.add("load_best_model_at_end", &a.load_best_model_at_end,
        "--output_dir gets the best evaluated checkpoint's weights (save and eval strategies must match)");
  f.add("metric_for_best_model", &a.metric_for_best_model, "loss | eval_loss | perplexity (loss)");
  f.add("greater_is_better", &a.greater_is_better, "a larger metric is better (false for loss and perplexity)");
  f.add("save_safetensors", &a.save_safetensors, "accepted (HF); ztrain writes safetensors only, false is refused");
  f.add("max_eval_samples", &a.max_eval_samples, "sequences evaluated, 0 = all (0)", range::closed(0, kMaxSteps));
  f.add("eval_tasks", &a.eval_tasks,
        "multiple-choice JSONL scored at every evaluation (acc, acc_norm as lm-evaluation-harness); needs "
        "--validation_file and the tokenizer (--tokenizer_name or the model folder)");
  f.add("eval_probes", &a.eval_probes,
        "probe JSONL ({\"prompt\", \"answer\"}): each answer's probability and rank at every evaluation");
  f.add("output_dir", &a.output_dir, "where the model, trainer_state.json and metrics go");
  f.add("overwrite_output_dir", &a.overwrite_output_dir, "allow a non-empty --output_dir");
  f.add("per_device_train_batch_size", &a.per_device_train_batch_size, "sequences per micro-batch (8)",
        range::closed(1, kMaxBatch));
  f.add("gradient_accumulation_steps", &a.gradient_accumulation_steps, "micro-batches per optimizer step (1)",
        range::closed(1, kMaxBatch));
  f.add("model_max_length", &a.model_max_length, "sequence length T (min(1024, model context))",
        range::closed(1, kMaxLength));
  f.add("rope_scaling", &a.rope_scaling,
        "RoPE scaling as a JSON object with transformers' keys, replacing config.json's (e.g. "
        "'{\"rope_type\": \"linear\", \"factor\": 2}'); with --resume_from_checkpoint and a longer "
        "--model_max_length: a long-context stage (docs/training.md#long-context-stages)");
  f.add("learning_rate", &a.learning_rate, "peak learning rate (5e-5)", range::above(0));
  f.add("optim", &a.optim,
        "optimizer, HF's names: adamw_torch | adamw | adamw_torch_fused | adafactor | adamw_8bit | adamw_bnb_8bit | "
        "lion_32bit | lion | sgd | sophia | sophiag | muon (adamw_torch; docs/optimizers.md)");
  f.add("optim_args", &a.optim_args,
        "the optimizer's own settings as HF's \"key=value,key2=value2\" (e.g. sgd momentum=0.9; adafactor "
        "scale_parameter, relative_step, beta1; muon ns_steps; sophia rho; docs/optimizers.md) (none)");
  f.add("optim_state_dtype", &a.optim_state_dtype,
        "fp32 | bf16: the optimizer's moments in bf16, stochastically rounded (torchtitan's / Megatron's "
        "--exp-avg-dtype; adamw_torch, lion_32bit, sgd, sophia) (fp32)");
  f.add("adafactor", &a.adafactor, "HF's deprecated spelling of --optim adafactor");
  f.add("use_peft", &a.use_peft,
        "train LoRA adapters on a frozen base (TRL's flag; the output folder gets adapter_config.json + "
        "adapter_model.safetensors in PEFT's format; docs/peft.md)");
  f.add("lora_r", &a.lora_r, "LoRA rank r (16)", range::closed(0, 65536));
  f.add("lora_alpha", &a.lora_alpha, "LoRA alpha: the update is scaled by alpha / r (32)", range::above(0));
  f.add("lora_dropout", &a.lora_dropout, "dropout on the adapters' input in training (0.05)", range::closed(0, 0.99));
  f.add("lora_target_modules", &a.lora_target_modules,
        "modules that get adapters: names (q_proj,v_proj; c_attn) or all-linear (PEFT's default per architecture)");
  f.add("use_rslora", &a.use_rslora, "rank-stabilized LoRA: scale alpha / sqrt(r)");
  f.add("use_dora", &a.use_dora, "DoRA: LoRA with PEFT's magnitude vector and weight-norm decomposition (false)");
  f.add("peft_type", &a.peft_type, "lora | ia3: PEFT's IA3, learned vectors scaling the targets (lora)");
  f.add("target_modules", &a.target_modules,
        "IA3's target modules (k_proj,v_proj,down_proj; PEFT's default per architecture)");
  f.add("feedforward_modules", &a.feedforward_modules,
        "IA3's targets whose input is scaled (down_proj; PEFT's default per architecture)");
  f.add("load_in_4bit", &a.load_in_4bit,
        "QLoRA: the frozen base's linear weights in NF4, blockwise as bitsandbytes (with --use_peft; docs/peft.md)");
  f.add(
      "load_in_8bit", &a.load_in_8bit,
      "the frozen base's linear weights in int8, row-wise as bitsandbytes' Int8Params (with --use_peft; docs/peft.md)");
  f.add("bnb_4bit_quant_type", &a.bnb_4bit_quant_type, "nf4 (fp4 is refused) (nf4)");
  f.add("bnb_4bit_use_double_quant", &a.bnb_4bit_use_double_quant,
        "quantize the NF4 block scales to 8 bits as bitsandbytes' double quantization (false)");
  f.add("bnb_4bit_compute_dtype", &a.bnb_4bit_compute_dtype,
        "float32 | bfloat16 | float16: the GEMMs' dtype, which must be the run's (--bf16 / --fp16) (the run's)");
  f.add("adapter_name_or_path", &a.adapter_name_or_path,
        "a PEFT adapter folder the adapters start from (its adapter_config.json sets r, alpha and the targets)");
  f.add("device", &a.device,
        "cpu | cuda | auto: the GPU when one is present and the run is one the GPU path runs (auto; docs/gpu.md)");
  f.add("offload_optimizer", &a.offload_optimizer,
        "none | cpu | nvme: cpu on the GPU keeps fp32 masters and the optimizer state in host memory (docs/gpu.md); "
        "nvme keeps the optimizer state in a file under --nvme_path, streamed through host memory "
        "(DeepSpeed's zero_optimization.offload_optimizer; docs/offload.md) (none)");
  f.add("offload_param", &a.offload_param,
        "none | nvme: with --zero_stage 3 and --offload_optimizer nvme, the fp32 parameters (masters) in that file "
        "too, each unit read ahead of its use (DeepSpeed's offload_param; docs/offload.md) (none)");
  f.add("nvme_path", &a.nvme_path, "the folder of the offload file (DeepSpeed's nvme_path; docs/offload.md)");
  f.add("max_host_memory", &a.max_host_memory,
        "cap on what training holds in host memory, e.g. 8GiB: with offload to nvme the windows are sized under it, "
        "else the run's estimate must fit (docs/offload.md) (none)");
  f.add("aio_block_size", &a.aio.block_size, "bytes per disk request of offload (DeepSpeed's aio.block_size) (1048576)",
        range::at_least(4096));
  f.add("aio_queue_depth", &a.aio.queue_depth, "disk requests of offload in flight (DeepSpeed's aio.queue_depth) (8)",
        range::at_least(1));
  f.add("max_device_memory", &a.max_device_memory,
        "cap on the GPU memory ztrain allocates, e.g. 20GiB; checked against estimate-memory before training (the "
        "GPU's memory)");
  f.add("weight_decay", &a.weight_decay, "AdamW decoupled weight decay on rank>=2 tensors (0)", range::at_least(0));
  f.add("adam_beta1", &a.adam_beta1, "(0.9)", range::below(0, 1));
  f.add("adam_beta2", &a.adam_beta2, "(0.999)", range::below(0, 1));
  f.add("adam_epsilon", &a.adam_epsilon, "(1e-8)", range::above(0));
  f.add("max_grad_norm", &a.max_grad_norm, "global gradient-norm clip, 0 disables (1.0)", range::at_least(0));
  f.add("moe_capacity_factor", &a.moe_capacity_factor,
        "MoE models: each expert takes at most ceil(factor x tokens x top-k / experts) of a micro-batch's tokens, "
        "the rest are dropped and counted (moe_dropped in metrics.jsonl); 0 = dropless (0; docs/moe.md)",
        range::closed(0, 1e6));
  f.add("expert-model-parallel-size", &a.expert_model_parallel_size,
        "MoE models: ranks of the data-parallel group that share each layer's experts (E / size each), tokens "
        "dispatched and combined all-to-all; must divide the experts and the data-parallel ranks (1; docs/moe.md)",
        range::closed(1, 1 << 16));
  f.add("router_z_loss_coef", &a.router_z_loss_coef,
        "MoE models: weight of the router z-loss, the mean of logsumexp(router logits)^2 over all layers' tokens "
        "(ST-MoE) (0; docs/moe.md)",
        range::closed(0, 1e6));
  f.add("lr_scheduler_type", &a.lr_scheduler_type,
        "constant | constant_with_warmup | linear | cosine | cosine_with_restarts | polynomial | inverse_sqrt | "
        "cosine_with_min_lr | warmup_stable_decay | WarmupLR | WarmupDecayLR | WarmupCosineLR (linear)");
  f.add("lr_scheduler_kwargs", &a.lr_scheduler_kwargs,
        "JSON object of the schedule's own arguments, e.g. '{\"num_decay_steps\": 100}' ({})");
  f.add("warmup_ratio", &a.warmup_ratio, "warmup as a fraction of the total steps (0)", range::closed(0, 1));
  f.add("warmup_steps", &a.warmup_steps, "warmup steps; a value < 1 is a ratio (0)", range::closed(0, kMaxSteps));
  f.add("max_steps", &a.max_steps, "optimizer steps; -1 = from --num_train_epochs (-1)",
        range::closed(1, kMaxSteps).or_value(-1));
  f.add("num_train_epochs", &a.num_train_epochs, "passes over the data (3)", range::above(0, 1e6));
  f.add("logging_steps", &a.logging_steps, "log every N steps; < 1 is a ratio (500)", range::above(0, kMaxSteps));
  f.add("save_strategy", &a.save_strategy, "steps | epoch | no (steps)");
  f.add("save_steps", &a.save_steps, "save checkpoint-N/ every N steps (500)", range::closed(1, kMaxSteps));
  f.add("flash_checkpoint", &a.flash_checkpoint,
        "save by copying the state to /dev/shm and writing checkpoint-N/ in the background (false)");
  f.add("spike_policy", &a.spike_policy, "a loss / gradient-norm spike: none | skip | rollback | stop (none)");
  f.add("spike_window", &a.spike_window, "steps whose loss and gradient norm a spike is judged against (100)",
        range::closed(1, 1000000));
  f.add("spike_max_rollbacks", &a.spike_max_rollbacks,
        "rollbacks in a row to the same save before --spike_policy rollback stops the run (5)",
        range::closed(0, 1000000));
  f.add("spike_zscore", &a.spike_zscore, "standard deviations above the window's mean that make a spike (6)",
        range::above(0, 1e9));
  f.add("straggler_threshold", &a.straggler_threshold,
        "flag a rank whose compute in a step exceeds N x the median rank's; 0 = off (1.5)", range::closed(0, 1e9));
  f.add("save_total_limit", &a.save_total_limit, "keep at most N checkpoints, 0 = all (0)",
        range::closed(0, kMaxSteps));
  f.add("resume_from_checkpoint", &a.resume_from_checkpoint, "a checkpoint-N folder, or latest in --output_dir");
  f.add("resume_allow_changes", &a.resume_allow_changes,
        "what a resume may find changed: model, data or model,data (nothing)");
  f.add("save_dtype", &a.save_dtype, "float32 | bfloat16 for saved weights (float32)");
  f.add("bf16", &a.bf16, "bf16 mixed precision: bf16 GEMMs (AVX512-BF16), fp32 masters and optimizer state");
  f.add("fp16", &a.fp16, "fp16 mixed precision with dynamic loss scaling (fp16 rounding on fp32 arithmetic here)");
  f.add("gradient_checkpointing", &a.gradient_checkpointing,
        "recompute each block in backward, keeping only its input (= --recompute-granularity full)");
  f.add("recompute-granularity", &a.recompute_granularity,
        "activation recomputation: full | selective (norms, attention, activation function) (none)");
  f.add("max_memory", &a.max_memory, "memory training may use on this host, e.g. 24GB or 12GiB (what is available)");
  f.add("auto_find_batch_size", &a.auto_find_batch_size,
        "pick the largest micro-batch (halving) and, if needed, recomputation that fit --max_memory");
  f.add("recompute-num-layers", &a.recompute_num_layers, "recompute only the first N blocks (-1: all)",
        range::closed(0, 1 << 20).or_value(-1));
  f.add("max_shard_size", &a.max_shard_size,
        "largest weight file in --output_dir, save_pretrained's units: 50MB, 2GB, 500MiB, bytes (5GB)");
  f.add("tokenizer_name", &a.tokenizer_name,
        "tokenizer folder (or file): carried into --output_dir and checkpoints, and SFT's tokenizer (the model's)");
  f.add("seed", &a.seed, "seed for initialisation, and for shuffling unless --data_seed (42)", range::at_least(0));
  f.add("data_seed", &a.data_seed, "seed of the data order alone (HF's; default: --seed)", range::at_least(0));
  f.add("threads", &a.threads, "compute threads, 0 = all cores (0)", range::closed(0, kMaxThreads));
  f.add("no_shuffle", &a.no_shuffle, "consecutive windows in file order");
  f.add("logging_dir", &a.logging_dir, "TensorBoard folder (output_dir/runs/<date>_<host>)");
  f.add("report_to", &a.report_to, "tensorboard | none (tensorboard)");
  f.add("logging_first_step", &a.logging_first_step, "also log step 1, whatever --logging_strategy says (false)");
  f.add("run_name", &a.run_name,
        "the run's name: TensorBoard folder output_dir/runs/<run_name> (unless --logging_dir), \"run_name\" in "
        "all_results.json (<date>_<host>)");
  f.add("plot", &a.plot, "write output_dir/loss.png with the loss curves at the end");
  f.add("disable_tqdm", &a.disable_tqdm, "auto | true | false: the live progress line on stderr (auto: on a terminal)");
  f.add("packing", &a.packing,
        "pack documents: attention and positions restart after each EOS token (token files) or example (.jsonl)");
  f.add("eos_token_id", &a.eos_token_id, "document separator for --packing (-1: config.json's eos_token_id)",
        range::closed(0, kMaxVocab).or_value(-1));
  f.add("dataloader_prefetch", &a.dataloader_prefetch, "micro-batches the loader thread prepares ahead (3)",
        range::closed(1, 256));
  // Supervised fine-tuning from JSONL (TRL SFTTrainer's names; docs/data.md).
  f.add("chat_template_path", &a.chat_template_path, "SFT: a .jinja chat template or tokenizer_config.json");
  f.add("completion_only_loss", &a.completion_only_loss, "SFT prompt/completion: loss on the completion only (true)");
  f.add("assistant_only_loss", &a.assistant_only_loss, "SFT messages: loss on assistant turns only (false)");
  f.add("cache_dir", &a.cache_dir, "SFT: tokenized-data cache folder ($ZT_CACHE_DIR or ~/.cache/ztrain)");
  f.add("chat_template_max_steps", &a.chat_template_max_steps,
        "SFT: work budget of one chat-template render; a template that needs more fails (1e7)",
        range::closed(1000, 1e12));
  // Data parallelism under mpirun (DeepSpeed's names; docs/distributed.md).
  f.add("zero_stage", &a.zero_stage, "0 = DDP, 1/2/3 = ZeRO stage (0)", range::closed(0, 3));
  f.add("overlap_comm", &a.overlap_comm, "reduce gradient buckets while backward runs (true)");
  f.add("reduce_bucket_size", &a.reduce_bucket_size, "elements per gradient bucket (0: DDP 25 MiB, ZeRO 5e8)",
        range::closed(0, kMaxSteps));
  f.add("allgather_bucket_size", &a.allgather_bucket_size, "accepted for DeepSpeed; ZeRO-1/2 gather per reduce bucket",
        range::closed(1, kMaxSteps));
  f.add("reduce_scatter", &a.reduce_scatter, "accepted for DeepSpeed; ZeRO stages always reduce-scatter");
  f.add("local_sgd_steps", &a.local_sgd_steps,
        "local SGD / DiLoCo: groups (hosts) all-reduce every step and synchronise every H steps (0: off)",
        range::closed(0, 1000000));
  f.add("local_sgd_group_size", &a.local_sgd_group_size, "ranks per local SGD group (0: the ranks of a host)",
        range::closed(0, 4096));
  f.add("local_sgd_outer_lr", &a.local_sgd_outer_lr, "local SGD's outer learning rate (DiLoCo: 0.7)",
        range::closed(0, 10));
  f.add("local_sgd_outer_momentum", &a.local_sgd_outer_momentum, "local SGD's outer Nesterov momentum (0.9)",
        range::closed(0, 1));
  f.add("zero_hpz_partition_size", &a.zero_hpz_partition_size, "shard within groups of G ranks, replicate across (1)",
        range::closed(1, kMaxBatch));
  f.add("zero_quantized_weights", &a.zero_quantized_weights, "ZeRO++ qwZ: int8 parameter all-gather (stage 3)");
  f.add("zero_quantized_gradients", &a.zero_quantized_gradients, "ZeRO++ qgZ: int8 gradient reduce-scatter");
  // Tensor and sequence parallelism (Megatron's names; docs/parallelism-tp.md).
  f.add("tensor-model-parallel-size", &a.tensor_model_parallel_size,
        "tensor-parallel ranks (neighbours); must divide the world and the heads (1)", range::closed(1, 4096));
  f.add("sequence-parallel", &a.sequence_parallel,
        "with tensor parallelism: split the norms' and residuals' tokens across the TP ranks (false)");
  f.add("context-parallel-size", &a.context_parallel_size,
        "context-parallel ranks: each sequence split over them, ring attention (1)", range::closed(1, 4096));
  // Pipeline parallelism under mpirun (Megatron-LM's names; docs/parallelism.md).
  f.add("pipeline-model-parallel-size", &a.pipeline_parallel_size,
        "pipeline stages P, the grid's outermost axis; must divide the ranks (1)", range::closed(1, kMaxBatch));
  f.add("num-layers-per-virtual-pipeline-stage", &a.layers_per_virtual_stage,
        "layers per model chunk: interleaved 1F1B with layers / (P x K) chunks per stage (0: none)",
        range::closed(0, kMaxBatch));
  f.add("pipeline_schedule", &a.pipeline_schedule,
        "gpipe, 1f1b or interleaved (default: 1f1b; interleaved with virtual stages)");
  f.add("pipeline_layers", &a.pipeline_layers,
        "blocks per (virtual) stage, such as 6,6 (default: balanced by --pipeline_balance)");
  f.add("pipeline_balance", &a.pipeline_balance,
        "the default cut balances time (FLOPs per unit, the LM head included) or memory (bytes per unit) (time)");
  f.add("auto_parallel", &a.auto_parallel,
        "choose tp / pp / ZeRO stage / micro-batch / recomputation / threads with the planner (`ztrain plan`), "
        "keeping the global batch; flags given explicitly pin their part (false)");
  f.add("train_batch_size", &a.train_batch_size, "global batch check: micro x accumulation x ranks (0 = unchecked)",
        range::closed(0, kMaxSteps));
  f.add("ddp_timeout", &a.ddp_timeout,
        "seconds a collective waits for a missing rank before the job ends naming it, 0 = never "
        "(ZT_COMM_TIMEOUT_S, else 300)",
        range::closed(0, 1e9));
  f.add("peak_gflops", &a.peak_gflops,
        "GEMM peak MFU is reported against (measured on this machine at the first run, cached in "
        "~/.cache/zplan/gemm_peak.json)",
        range::above(0));
  // DeepSpeed / ZeRO (docs/deepspeed.md). A --deepspeed JSON's values replace defaults but must
  // agree with flags given here; "auto" values take the flags.
  f.add("deepspeed", &a.deepspeed, "DeepSpeed JSON config (HF Trainer's flag; docs/deepspeed.md)");
  HfCompatFlags hf;  // HF flags resolved here: the environment, units, other flags (hf_compat.h)
  add_hf_compat_flags(f, hf);
  f.refuse({std::begin(kHfTrainingArguments), std::end(kHfTrainingArguments)},
           "is a Hugging Face TrainingArguments flag that ztrain does not implement; remove it (docs/flags.md "
           "lists the flags ztrain takes)");
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  a.explicit_flags = f.given();
  apply_hf_compat_flags(hf, f.given(), a);
  if (a.adafactor) {  // HF's deprecated flag; with another --optim it would be a contradiction
    ZT_CHECK(!f.given().count("optim") || a.optim == "adafactor", "--adafactor contradicts --optim ", a.optim,
             "; give one of them");
    a.optim = "adafactor";
  }
  a.peak_cache_dir = a.cache_dir.empty() ? zt::sft_default_cache_dir() : a.cache_dir;
  if (const char* hook = std::getenv("ZT_TEST_FAIL_AT")) {  // tests/dist: a rank failing mid-run
    // rank:step, or rank:step:attempt to fail only in that attempt of `ztrain launch`'s agent.
    long long step = -1;
    int attempt = -1, rank = -1;
    const int n = std::sscanf(hook, "%d:%lld:%d", &rank, &step, &attempt);
    const char* now = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (n >= 2 && (n < 3 || attempt == (now ? std::atoi(now) : 0))) {
      a.test_fail_rank = rank;
      a.test_fail_step = step;
    }
  }
  if (const char* hook = std::getenv("ZT_TEST_SLOW_RANK")) {  // tests/dist/straggler.sh
    char secs[32] = {0};
    if (std::sscanf(hook, "%d:%31s", &a.test_slow_rank, secs) == 2) a.test_slow_seconds = std::strtod(secs, nullptr);
  }
  if (const char* hook = std::getenv("ZT_TEST_FLASH_PAUSE")) a.test_flash_pause = hook;  // tests/cli/flash_ckpt.sh
  if (const char* hook = std::getenv("ZT_TEST_SPIKE_AT")) {                              // tests/cli/spikes.sh
    // step:factor (the data of that step) or step:factor:state (that optimizer step, whatever its
    // data: a spike a rollback cannot avoid).
    long long step = -1;
    char factor[32] = {0};
    if (std::sscanf(hook, "%lld:%31[^:]", &step, factor) == 2)
      a.test_spike_step = step, a.test_spike_factor = std::strtod(factor, nullptr);
    a.test_spike_by_state = std::strstr(hook, ":state") != nullptr;
  }
  install_stop_handlers();  // before any thread starts (MPI's, OpenMP's): they inherit the mask
  // The world outlives the run so that an error on one rank ends the whole job here with
  // the rank named (abort_job), before the world's destructor reaches MPI_Finalize, which
  // would wait for the other ranks, stuck in their next collective.
  std::unique_ptr<dist::Communicator> world = dist::make_world();
  if (a.ddp_timeout >= 0) world->set_timeout(a.ddp_timeout);
  try {
    // Inside the try: a mismatch on one rank must end the job (abort_job) before the world's
    // destructor reaches MPI_Finalize and waits for the ranks that passed.
    check_local_rank(hf);
    if (a.auto_parallel) {  // the planner's layout first: everything below sees it as if given
      const std::string line = zt::apply_auto_parallel(a, *world);
      if (world->rank() == 0) std::printf("%s\n", line.c_str());
    }
    // DeepSpeed's world is the data-parallel one (tensor and context parallelism divide it).
    const int tp = std::max(1, a.tensor_model_parallel_size) * std::max(1, a.context_parallel_size);
    zt::apply_deepspeed_config(a, world->size() % tp == 0 ? world->size() / tp : world->size(),
                               /*print_warnings=*/world->rank() == 0);
    zt::train_run(zt::build_train_config(a, *world), *world);
  } catch (const zt::JobError& e) {
    // Every rank raised this same error: rank 0 reports it and ends the job; the others wait
    // to be ended by that (a grace period in case rank 0 cannot), so it is printed once.
    if (world->size() > 1 && world->rank() > 0) {
      std::this_thread::sleep_for(std::chrono::seconds(30));
      dist::abort_job(one_line(e.what()), /*print=*/false);
    }
    if (world->size() > 1) dist::abort_job(one_line(e.what()));
    throw;
  } catch (const std::exception& e) {
    if (world->size() > 1) dist::abort_job(one_line(e.what()));
    throw;
  }
  return 0;
}

}  // namespace zt::app

namespace {

// The library's report of a hang no exception can carry (dist/communicator.h): end the job
// (under mpirun every rank, with this one's message), then this process.
void on_hang(const std::string& msg) {
  if (!zt::dist::abort_job(msg)) std::fprintf(stderr, "ztrain: error: %s\n", msg.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  zt::app::install_signal_handlers();
  zt::dist::set_hang_handler(on_hang);
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    // Before the ISA choice: the version prints even where ZT_ISA names a level this CPU lacks.
    if (cmd == "version" || cmd == "--version") return zt::app::cmd_version(args);
    // The kernels' instruction set: the best this CPU has, or the level ZT_ISA forces
    // (docs/kernels.md#dispatch); an unknown level or one the CPU lacks is an error here.
    const char* isa = std::getenv("ZT_ISA");
    zt::kernels::isa_select(isa ? isa : "");
    if (cmd == "train") return zt::app::cmd_train(args);
    if (cmd == "tokenize") return zt::app::cmd_tokenize(args);
    if (cmd == "tokenizer-train") return zt::app::cmd_tokenizer_train(args);
    if (cmd == "eval") return zt::app::cmd_eval(args);
    if (cmd == "generate") return zt::app::cmd_generate(args);
    if (cmd == "launch") return zt::app::cmd_launch(args);
    if (cmd == "bench-comm") return zt::app::cmd_bench_comm(args);
    if (cmd == "bench-disk") return zt::app::cmd_bench_disk(args);
    if (cmd == "health-check") return zt::app::cmd_health_check(args);
    if (cmd == "estimate-memory") return zt::app::cmd_estimate_memory(args);
    if (cmd == "plan") return zt::app::cmd_plan(args);
    if (cmd == "info") return zt::app::cmd_info(args);
    if (cmd == "plot") return zt::app::cmd_plot(args);
    if (cmd == "merge-adapter") return zt::app::cmd_merge_adapter(args);
    std::fprintf(stderr, "ztrain: error: unknown command \"%s\"; run ztrain help for the list\n", cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    const std::string msg = zt::app::one_line(e.what());
    // Under mpirun the other ranks would wait in their next collective: abort the whole job
    // (prints "[rank R] error: ..."). Without MPI it returns and we exit as usual.
    if (!zt::dist::abort_job(msg)) std::fprintf(stderr, "ztrain: error: %s\n", msg.c_str());
    return 1;
  }
}
