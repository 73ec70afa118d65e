// train_config.h: the resolved, typed settings of a training run, and the library's entry point
// train_run. apps/ builds a TrainConfig once (apps/train_config_build.cpp) from the command line's
// Hugging Face and Megatron flags and the DeepSpeed JSON: every flag checked, every default and
// "auto" filled in, every name that is really a choice made an enum. The library never sees a flag
// name, which flags were given, or a DeepSpeed section.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/hf_model.h"
#include "core/device.h"
#include "data/blend.h"
#include "data/file_identity.h"
#include "dist/communicator.h"
#include "dist/parallel_dims.h"
#include "models/config.h"
#include "nn/block.h"
#include "optim/loss_scaler.h"
#include "optim/schedule.h"
#include "observe/train_log.h"
#include "optim/spike_guard.h"
#include "parallel/data_parallel.h"
#include "parallel/local_sgd.h"
#include "parallel/pipeline_schedule.h"

namespace zt {

// HF's IntervalStrategy: when something happens (logging, evaluation, saves).
enum class Interval { no, steps, epoch };

// What --load_best_model_at_end ranks checkpoints by.
enum class BestMetric { loss, perplexity };

// The LR schedule's arguments (HF's --lr_scheduler_type, --learning_rate, warmup and kwargs;
// DeepSpeed's scheduler section), resolved but for the run's length, which the data decides.
struct LrSchedule {
  std::string type = "linear";
  double learning_rate = 5e-5;
  double warmup_ratio = 0.0;
  double warmup_steps = 0;  // HF v5: a float < 1 is a ratio of the total steps
  std::string kwargs = "{}";
  double warmup_min_lr = 0.0, warmup_max_lr = -1.0;  // DeepSpeed's; max < 0: learning_rate
  std::string warmup_type = "log";
  double warmup_min_ratio = 0.0, cos_min_ratio = 1e-4;
  int64_t total_num_steps = -1;  // -1: the run's total optimizer steps
};

// The warmup steps for a run of total steps; empty when that needs the total and it is unknown.
std::optional<int64_t> warmup_steps_of(const LrSchedule& s, int64_t total);
// The schedule of a run of total_steps optimizer steps (<= 0: unknown yet; the arguments are checked).
optim::Schedule make_schedule(const LrSchedule& s, int64_t total_steps);

struct TrainConfig {
  struct Data {
    std::string train_file;       // as given: named in messages
    ChannelSpec channels;         // its channels (one unnamed for a plain file) and their weights
    FileIdentity identity;        // of the train file(s): a resume checks it
    std::string validation_file;  // "" = none
    bool sft = false;             // chat / instruction records (.jsonl), not token files
    int seq_len = 0;              // T
    int micro_batch = 8;          // rows per micro-batch (after auto_find_batch_size)
    int accumulation = 1;         // micro-batches per optimizer step
    int64_t global_batch = 0;     // DeepSpeed's train_batch_size, 0 = not set
    bool shuffle = true;
    int64_t seed = 42;  // the data order's (--data_seed, else --seed)
    bool packing = false;
    int64_t eos_token_id = -1;  // -1: the model config's
    int prefetch = 3;
    bool allow_change = false;  // a resume may find another train file
    // SFT records: the tokenizer (a folder or file), the chat template, the loss masks, the cache.
    std::string tokenizer_path, chat_template_path, cache_dir;
    bool completion_only_loss = true, assistant_only_loss = false;
    int64_t chat_template_max_steps = 10'000'000;
  } data;

  struct Model {
    ModelConfig config;         // resolved (a long-context stage's RoPE included)
    std::string hf_dir;         // an HF folder whose weights start the run; "" = random initialisation
    std::string adapter_dir;    // LoRA (config.lora): a PEFT adapter folder the adapters start from; "" = PEFT's init
    int64_t seed = 42;          // the random initialisation's
    HfSideFiles side_files;     // tokenizer + generation config, carried into saves
    bool allow_change = false;  // a resume may find another model config
    bool rope_scaling_given = false;
  } model;

  struct Parallel {
    int world = 1;
    dist::ParallelDims dims;  // the process grid
    bool sequence_parallel = false;
    parallel::PipeSchedule schedule = parallel::PipeSchedule::one_f_one_b;
    int layers_per_virtual_stage = 0;
    std::string stage_layers;  // blocks per (virtual) stage, "" = balanced
    bool balance_by_time = true;
    parallel::DataParallelOptions engine;  // ZeRO stage, buckets, comm dtype, optimizer
    parallel::LocalSgdOptions local_sgd;   // steps 0: off
    DeviceKind device = DeviceKind::cpu;
    double straggler_threshold = 1.5;  // 0: no straggler check
    int64_t device_memory_cap = -1;    // bytes of GPU allocations; -1 = the GPU's memory
    std::string device_memory_text;    // as given, for messages
    // --max_host_memory: bytes training may hold in host memory (offload to disk sizes its windows
    // under it; without offload the estimate must fit); -1 = no cap.
    int64_t host_memory_cap = -1;
    std::string host_memory_text;
  } parallel;

  struct Optim {
    LrSchedule schedule;
    double max_grad_norm = 1.0;  // 0: no clipping
    int64_t max_steps = -1;      // > 0 overrides epochs
    double epochs = 3.0;
    SpikePolicy spike_policy = SpikePolicy::none;
    int64_t spike_window = 100;
    double spike_zscore = 6.0;
    int64_t spike_max_rollbacks = 5;
  } optim;

  struct Precision {
    nn::ActPlan plan;  // compute dtype and recomputation
    bool fp16 = false, bf16 = false;
    // fp16: DeepSpeed's loss scaler; bf16 with check_grad_overflow: a fixed scale of 1 that skips
    // and counts steps with inf/NaN gradients; fp32: none.
    std::optional<optim::LossScalerConfig> scaler;
    double peak_gflops = 0;      // 0: measure
    std::string peak_cache_dir;  // "" = measure every run
  } precision;

  struct Checkpoint {
    std::string output_dir;
    bool overwrite = false;
    std::string resume_from;  // "" = fresh start, "latest", or a folder
    Interval save = Interval::steps;
    int64_t save_steps = 500;
    int64_t save_total_limit = 0;
    DType save_dtype = DType::f32;
    int64_t max_shard_bytes = 0;
    bool flash = false;
    bool load_best_model_at_end = false;
    BestMetric metric = BestMetric::loss;
    std::string metric_name = "loss";  // as given, for messages
    bool greater_is_better = false;
    std::vector<std::pair<std::string, std::string>> input_paths;  // never deleted: (flag, path)
  } checkpoint;

  struct Logging {
    TrainLogOptions log;  // trainer_state.json, TensorBoard, the progress line, the plot
    Interval strategy = Interval::steps;
    double steps = 500;  // < 1: a ratio of the total steps
    bool first_step = false;
    // Evaluation: --eval_strategy (empty: not given), its interval, --do_eval as given (empty: not given).
    std::optional<Interval> eval;
    int64_t eval_steps = 0;
    std::optional<bool> do_eval;
    int64_t max_eval_samples = 0;  // 0 = all
    // JSONL files scored at every evaluation (observe/task_eval.h): multiple-choice questions and
    // probability probes; "" = none. They need the tokenizer (data.tokenizer_path).
    std::string eval_tasks, eval_probes;
    int eval_batch = 0;  // rows per evaluation forward, 0 = the train batch
    int threads = 0;     // 0: all cores
  } logging;

  // Test hooks, set by apps/ from the environment (ZT_TEST_*), kept apart from the settings: what
  // tests/ needs to fail, slow or corrupt a run on purpose.
  struct TestHooks {
    int fail_rank = -1;  // ZT_TEST_FAIL_AT=rank:step: that rank throws at the start of that (0-based) step
    int64_t fail_step = -1;
    int slow_rank = -1;  // ZT_TEST_SLOW_RANK=rank:seconds: that rank sleeps so long at every step's start
    double slow_seconds = 0;
    std::string flash_pause;  // ZT_TEST_FLASH_PAUSE=copy:N | persist:N (checkpoint/flash_checkpoint.h)
    // ZT_TEST_SPIKE_AT=step:factor[:state]: the loss and gradients of the data of that 1-based step
    // (or of that optimizer step, by_state) are multiplied by factor (nan allowed).
    int64_t spike_step = -1;
    double spike_factor = 1;
    bool spike_by_state = false;
  } test;
};

// Runs training on the ranks of `world` (the size-1 local communicator, or MPI's world under
// mpirun); returns normally or throws zt::Error. It never ends the process: the caller (apps/)
// decides how a failure ends the job.
void train_run(const TrainConfig& config, dist::Communicator& world);

}  // namespace zt
