// test_deepspeed.cpp: DeepSpeed JSON configs applied to TrainArgs (auto filling, HF's mismatch
// error, DeepSpeed's batch identity, warnings and type errors) and DeepSpeed's LR schedules
// against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/error.h"
#include "flags.h"
#include "optim/schedule.h"
#include "deepspeed_config.h"
#include "run_device.h"
#include "test_util.h"

namespace zt {
namespace {

using json = nlohmann::json;

// The message of the zt::Error that f throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> apply(TrainArgs& a, int ws, const char* text) {
  return apply_deepspeed_json(a, ws, json::parse(text));
}

// ---- the seed's config, unchanged ----

TEST(DeepSpeedConfig, SeedZero2NoOffloadRunsUnchanged) {
  TrainArgs a;
  a.deepspeed = std::string(ZT_SOURCE_DIR) + "/configs/ds_zero2_no_offload.json";
  testing::internal::CaptureStderr();
  apply_deepspeed_config(a, 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");  // every key is understood or quietly inert
  EXPECT_EQ(a.zero_stage, 2);
  EXPECT_EQ(a.allgather_bucket_size, 100000000);
  EXPECT_EQ(a.reduce_bucket_size, 100000000);  // explicit: replaces the per-stage default (0)
  EXPECT_TRUE(a.overlap_comm);
  EXPECT_TRUE(a.reduce_scatter);
  EXPECT_TRUE(a.contiguous_gradients);
  EXPECT_EQ(a.steps_per_print, 2000);
  EXPECT_FALSE(a.wall_clock_breakdown);
  // "auto" everywhere else: HF's values (defaults here).
  EXPECT_EQ(a.per_device_train_batch_size, 8);
  EXPECT_EQ(a.gradient_accumulation_steps, 1);
  EXPECT_EQ(a.train_batch_size, 8);
  EXPECT_DOUBLE_EQ(a.max_grad_norm, 1.0);
  EXPECT_EQ(a.lr_scheduler_type, "linear");
}

TEST(DeepSpeedConfig, SeedConfigWithFlagsAndRanks) {
  TrainArgs a;
  a.deepspeed = std::string(ZT_SOURCE_DIR) + "/configs/ds_zero2_no_offload.json";
  a.per_device_train_batch_size = 4;
  a.gradient_accumulation_steps = 2;
  a.max_grad_norm = 0.5;
  a.explicit_flags = {"per_device_train_batch_size", "gradient_accumulation_steps", "max_grad_norm", "deepspeed"};
  apply_deepspeed_config(a, 4, false);
  EXPECT_EQ(a.per_device_train_batch_size, 4);
  EXPECT_EQ(a.gradient_accumulation_steps, 2);
  EXPECT_EQ(a.train_batch_size, 32);  // 4 x 2 x 4 ranks
  EXPECT_DOUBLE_EQ(a.max_grad_norm, 0.5);
}

TEST(DeepSpeedConfig, NoPathIsANoOp) {
  TrainArgs a;
  apply_deepspeed_config(a, 1);
  EXPECT_EQ(a.train_batch_size, 0);
  a.deepspeed = "/nonexistent/ds.json";
  EXPECT_NE(error_of([&] { apply_deepspeed_config(a, 1); }).find("cannot open"), std::string::npos);
}

// ---- auto and explicit values ----

// No cap anywhere (0) leaves the choice to the engine (DDP 25 MiB, ZeRO 5e8); "auto" keeps it.
TEST(DeepSpeedConfig, BucketSizeDefaultsToTheEngines) {
  TrainArgs a;
  EXPECT_EQ(a.reduce_bucket_size, 0);
  apply(a, 2, R"({"zero_optimization": {"stage": 0, "reduce_bucket_size": "auto"}})");
  EXPECT_EQ(a.reduce_bucket_size, 0);
  apply(a, 2, R"({"zero_optimization": {"stage": 0, "reduce_bucket_size": 2e6}})");
  EXPECT_EQ(a.reduce_bucket_size, 2000000);
}

TEST(DeepSpeedConfig, AutoTakesTheFlags) {
  TrainArgs a;
  a.learning_rate = 3e-4;
  a.adam_beta2 = 0.95;
  a.weight_decay = 0.1;
  a.warmup_steps = 20;
  a.max_steps = 200;
  a.explicit_flags = {"learning_rate", "adam_beta2", "weight_decay", "warmup_steps", "max_steps"};
  auto w = apply(a, 2, R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}}})");
  EXPECT_TRUE(w.empty());
  EXPECT_DOUBLE_EQ(a.learning_rate, 3e-4);
  EXPECT_DOUBLE_EQ(a.adam_beta1, 0.9);
  EXPECT_DOUBLE_EQ(a.adam_beta2, 0.95);
  EXPECT_DOUBLE_EQ(a.weight_decay, 0.1);
  EXPECT_EQ(a.train_batch_size, 16);  // 8 x 1 x 2
  EXPECT_EQ(a.lr_scheduler_type, "WarmupDecayLR");
  EXPECT_DOUBLE_EQ(a.warmup_max_lr, -1);
  EXPECT_EQ(a.total_num_steps, -1);
  optim::Schedule s = schedule_from_args(a, 200);
  EXPECT_EQ(s.kind, optim::ScheduleKind::warmup_decay_lr);
  EXPECT_DOUBLE_EQ(s.base_lr, 3e-4);
  EXPECT_EQ(s.warmup_steps, 20);
  EXPECT_EQ(s.total_steps, 200);
  EXPECT_TRUE(s.warmup_log);
  EXPECT_DOUBLE_EQ(s.warmup_min_lr, 0);
}

TEST(DeepSpeedConfig, ExplicitValuesReplaceDefaults) {
  TrainArgs a;  // no flags given: DeepSpeed's numbers win over ztrain's defaults
  auto w = apply(a, 1, R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 50, "total_num_steps": 500,
                  "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_type": "linear"}},
    "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 1, "zero_quantized_weights": true,
                          "zero_quantized_gradients": true, "overlap_comm": false, "reduce_bucket_size": 5e7},
    "steps_per_print": 5, "wall_clock_breakdown": true})");
  EXPECT_TRUE(w.empty()) << w[0];
  EXPECT_EQ(a.per_device_train_batch_size, 4);
  EXPECT_EQ(a.gradient_accumulation_steps, 2);
  EXPECT_EQ(a.train_batch_size, 8);
  EXPECT_DOUBLE_EQ(a.max_grad_norm, 0.5);
  EXPECT_DOUBLE_EQ(a.learning_rate, 1e-3);
  EXPECT_DOUBLE_EQ(a.adam_beta1, 0.8);
  EXPECT_DOUBLE_EQ(a.adam_beta2, 0.95);
  EXPECT_DOUBLE_EQ(a.adam_epsilon, 1e-6);
  EXPECT_DOUBLE_EQ(a.weight_decay, 0.01);
  EXPECT_EQ(a.zero_stage, 3);
  EXPECT_TRUE(a.zero_quantized_weights);
  EXPECT_TRUE(a.zero_quantized_gradients);
  EXPECT_FALSE(a.overlap_comm);
  EXPECT_EQ(a.reduce_bucket_size, 50000000);
  EXPECT_EQ(a.steps_per_print, 5);
  EXPECT_TRUE(a.wall_clock_breakdown);
  optim::Schedule s = schedule_from_args(a, 1000);
  EXPECT_EQ(s.kind, optim::ScheduleKind::warmup_cosine_lr);
  EXPECT_DOUBLE_EQ(s.base_lr, 1e-3);  // the optimizer's lr
  EXPECT_EQ(s.warmup_steps, 50);
  EXPECT_EQ(s.total_steps, 500);  // the scheduler's own length, not the run's
  EXPECT_FALSE(s.warmup_log);
  EXPECT_DOUBLE_EQ(s.warmup_min_ratio, 0.1);
  EXPECT_DOUBLE_EQ(s.cos_min_ratio, 0.01);
}

TEST(DeepSpeedConfig, SchedulerDefaultsAreDeepSpeeds) {
  TrainArgs a;
  apply(a, 1, R"({"scheduler": {"type": "WarmupLR"}})");
  EXPECT_DOUBLE_EQ(a.warmup_steps, 1000);  // DeepSpeed's warmup_num_steps default
  EXPECT_EQ(a.warmup_type, "log");
  TrainArgs b;  // a warmup flag given on the command line wins over that default
  b.warmup_steps = 7;
  b.explicit_flags = {"warmup_steps"};
  apply(b, 1, R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.01}}})");
  EXPECT_DOUBLE_EQ(b.warmup_steps, 7);
  EXPECT_EQ(schedule_from_args(b, 100).warmup_steps, 7);
  EXPECT_DOUBLE_EQ(schedule_from_args(b, 100).base_lr, 0.01);  // warmup_max_lr, not learning_rate
}

TEST(DeepSpeedConfig, SchedulerValuesAgainstFlags) {
  TrainArgs a;
  a.learning_rate = 1e-4;
  a.warmup_steps = 0.1;  // a ratio: 10 of --max_steps 100
  a.max_steps = 100;
  a.lr_scheduler_type = "cosine";
  a.explicit_flags = {"learning_rate", "warmup_steps", "max_steps", "lr_scheduler_type"};
  auto w = apply(a, 1, R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 1e-4,
                          "warmup_num_steps": 10, "total_num_steps": 100}}})");
  EXPECT_EQ(w, std::vector<std::string>{"--lr_scheduler_type cosine is replaced by the DeepSpeed config's scheduler "
                                        "WarmupDecayLR"});
  EXPECT_EQ(a.total_num_steps, 100);
  EXPECT_EQ(schedule_from_args(a, 100).warmup_steps, 10);
  std::string e = error_of([&] {
    apply(a, 1, R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 3e-4,
                   "warmup_num_steps": 20, "total_num_steps": 50}}})");
  });
  EXPECT_NE(e.find("- ds scheduler.params.total_num_steps=50 vs hf max_steps=100\n"), std::string::npos) << e;
  EXPECT_NE(e.find("- ds scheduler.params.warmup_max_lr=0.0003 vs hf learning_rate=0.0001\n"), std::string::npos) << e;
  EXPECT_NE(e.find("- ds scheduler.params.warmup_num_steps=20 vs hf warmup_steps=10\n"), std::string::npos) << e;
}

TEST(DeepSpeedConfig, FileErrorsNameThePath) {
  TrainArgs a;
  a.deepspeed = testing::TempDir() + "/ds_bad.json";
  FILE* f = std::fopen(a.deepspeed.c_str(), "w");
  ASSERT_TRUE(f);
  std::fputs("{\"zero_optimization\": {\"stage\": 2,}}", f);
  std::fclose(f);
  std::string e = error_of([&] { apply_deepspeed_config(a, 1); });
  EXPECT_NE(e.find("ds_bad.json\" is not valid JSON"), std::string::npos) << e;
}

// ---- errors ----

TEST(DeepSpeedConfig, MismatchesAreCollectedIntoOneError) {
  TrainArgs a;
  a.learning_rate = 1e-4;
  a.explicit_flags = {"per_device_train_batch_size", "learning_rate", "zero_stage"};
  a.zero_stage = 1;
  std::string e = error_of([&] {
    apply(a, 1, R"({"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}},
                   "zero_optimization": {"stage": 2}})");
  });
  EXPECT_EQ(e,
            "Please correct the following DeepSpeed config values that mismatch TrainingArguments values:\n"
            "- ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=8\n"
            "- ds optimizer.params.lr=2e-05 vs hf learning_rate=0.0001\n"
            "- ds zero_optimization.stage=2 vs hf zero_stage=1\n"
            "The easiest method is to set these DeepSpeed config values to 'auto'.");
}

TEST(DeepSpeedConfig, EqualValuesAreNoMismatch) {
  TrainArgs a;
  a.explicit_flags = {"per_device_train_batch_size", "adam_beta1", "learning_rate"};
  EXPECT_NO_THROW(apply(a, 1, R"({"train_micro_batch_size_per_gpu": 8,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 5e-5, "betas": [0.9, 0.98]}}})"));
  EXPECT_DOUBLE_EQ(a.adam_beta2, 0.98);  // beta2 was not given as a flag
  a.adam_beta1 = 0.85;
  EXPECT_NE(error_of([&] {
              apply(a, 1, R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 0.98]}}})");
            }).find("- ds optimizer.params.betas=[0.9,0.98] vs hf adam_beta1+adam_beta2=[0.85, 0.98]"),
            std::string::npos);
}

TEST(DeepSpeedConfig, TrainBatchSizeIdentity) {
  {  // micro + accumulation fixed: the identity must hold (DeepSpeed's assertion text)
    TrainArgs a;
    std::string e = error_of([&] {
      apply(a, 4, R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})");
    });
    EXPECT_NE(e.find("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size "
                     "64 != 4 * 2 * 4"),
              std::string::npos)
        << e;
  }
  {  // train_batch_size + micro: accumulation derived, as DeepSpeed does
    TrainArgs a;
    apply(a, 4, R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})");
    EXPECT_EQ(a.gradient_accumulation_steps, 4);
    EXPECT_EQ(a.train_batch_size, 64);
  }
  {  // train_batch_size + accumulation: micro derived
    TrainArgs a;
    apply(a, 2, R"({"train_batch_size": 48, "gradient_accumulation_steps": 3})");
    EXPECT_EQ(a.per_device_train_batch_size, 8);
  }
  {  // train_batch_size alone: accumulation 1
    TrainArgs a;
    apply(a, 2, R"({"train_batch_size": 12})");
    EXPECT_EQ(a.per_device_train_batch_size, 6);
    EXPECT_EQ(a.gradient_accumulation_steps, 1);
  }
  {  // not divisible: DeepSpeed's floor division, then its assertion
    TrainArgs a;
    EXPECT_NE(error_of([&] {
                apply(a, 1, R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})");
              }).find("10 != 4 * 2 * 1"),
              std::string::npos);
  }
  {  // flags involved: HF's mismatch line
    TrainArgs a;
    a.per_device_train_batch_size = 2;
    a.explicit_flags = {"per_device_train_batch_size"};
    EXPECT_NE(error_of([&] {
                apply(a, 1, R"({"train_batch_size": 16, "gradient_accumulation_steps": 1})");
              }).find("- ds train_batch_size=16 vs hf train_batch_size (calculated)=2"),
              std::string::npos);
  }
}

TEST(DeepSpeedConfig, WrongTypesNameTheKey) {
  TrainArgs a;
  EXPECT_EQ(error_of([&] { apply(a, 1, R"({"zero_optimization": {"stage": "2"}})"); }),
            "DeepSpeed config key zero_optimization.stage must be an integer, got \"2\"");
  EXPECT_EQ(error_of([&] { apply(a, 1, R"({"zero_optimization": {"overlap_comm": "yes"}})"); }),
            "DeepSpeed config key zero_optimization.overlap_comm must be true or false, got \"yes\"");
  EXPECT_EQ(error_of([&] { apply(a, 1, R"({"train_micro_batch_size_per_gpu": 2.5})"); }),
            "DeepSpeed config key train_micro_batch_size_per_gpu must be an integer or \"auto\", got 2.5");
  EXPECT_EQ(error_of([&] { apply(a, 1, R"({"gradient_clipping": [1]})"); }),
            "DeepSpeed config key gradient_clipping must be a number or \"auto\", got [1]");
  EXPECT_EQ(error_of([&] { apply(a, 1, R"({"zero_optimization": 2})"); }),
            "DeepSpeed config key zero_optimization must be an object, got 2");
  EXPECT_EQ(error_of([&] { apply(a, 1, R"({"zero_optimization": {"stage": 4}})"); }),
            "DeepSpeed config key zero_optimization.stage must be between 0 and 3, got 4");
  EXPECT_EQ(error_of([&] { apply(a, 1, R"({"fp16": {"loss_scale": "dynamic"}})"); }),
            "DeepSpeed config key fp16.loss_scale must be a number or \"auto\", got \"dynamic\"");
  EXPECT_NE(error_of([&] { apply(a, 1, "[1, 2]"); }).find("must be a JSON object"), std::string::npos);
}

TEST(DeepSpeedConfig, UnsupportedFeaturesAreErrors) {
  TrainArgs a;
  // Mixed precision is honoured: enabled true sets it, "auto" follows the flags.
  apply(a, 1, R"({"fp16": {"enabled": true}})");
  EXPECT_TRUE(a.fp16);
  TrainArgs b;
  apply(b, 1, R"({"bf16": {"enabled": true}})");
  EXPECT_TRUE(b.bf16);
  a = TrainArgs();
  EXPECT_NO_THROW(apply(a, 1, R"({"fp16": {"enabled": false}, "bf16": {"enabled": "auto"}})"));
  EXPECT_FALSE(a.fp16 || a.bf16);
  // A value that contradicts a flag given on the command line is HF's mismatch error.
  TrainArgs c;
  c.explicit_flags = {"fp16"};
  c.fp16 = true;
  EXPECT_NE(error_of([&] { apply(c, 1, R"({"fp16": {"enabled": false}})"); }).find("ds fp16.enabled=false vs hf fp16"),
            std::string::npos);
  EXPECT_NO_THROW(apply(a, 1, R"({"communication_data_type": "bf16"})"));  // the trainer reduces in bf16
  EXPECT_NE(error_of([&] { apply(a, 1, R"({"optimizer": {"type": "Lamb"}})"); }).find("\"Lamb\" is not supported"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { apply(a, 1, R"({"scheduler": {"type": "OneCycle"}})"); }).find("\"OneCycle\" is not supported"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              apply(a, 1, R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.1}}})");
            }).find("L2 regularisation"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              apply(a, 3, R"({"zero_optimization": {"zero_hpz_partition_size": 2}})");
            }).find("must divide the number of data-parallel ranks (3)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              apply(a, 1, R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "exp"}}})");
            }).find("must be \"log\" or \"linear\""),
            std::string::npos);
}

// ---- warnings ----

TEST(DeepSpeedConfig, UnusedKeysAreWarnedByName) {
  TrainArgs a;
  auto w = apply(a, 1, R"({
    "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "none"},
                          "stgae": 1, "stage3_max_live_parameters": 1e9, "stage3_prefetch_bucket_size": "auto",
                          "allgather_partitions": true, "round_robin_gradients": true},
    "activation_checkpointing": {"partition_activations": true},
    "tensorboard": {"enabled": false},
    "flux_capacitor": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "fused": true}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "cos_min_ratio": 0.1}}})");
  std::vector<std::string> want = {
      "DeepSpeed config keys that change nothing on ztrain's CPU training: "
      "activation_checkpointing.partition_activations (splits checkpoints over tensor-parallel ranks; there are "
      "none (--tensor-model-parallel-size 1))",
      "DeepSpeed config key flux_capacitor is not used by ztrain",
      "DeepSpeed config key optimizer.params.fused is not used by ztrain",
      "DeepSpeed config key scheduler.params.cos_min_ratio is not used by WarmupLR",
      "DeepSpeed config key zero_optimization.stage3_max_live_parameters is not used by ztrain (value 1000000000.0)",
      "DeepSpeed config key zero_optimization.stgae is not used by ztrain (did you mean zero_optimization.stage?)",
  };
  EXPECT_EQ(w, want);
  EXPECT_EQ(a.zero_stage, 2);  // the misspelt "stgae" changed nothing
  // The offload keys land in the arguments; the trainer decides on the device (train/run_device.h).
  EXPECT_EQ(a.offload_param, "cpu");
  EXPECT_EQ(a.offload_optimizer, "none");
}

// ZeRO-Offload's keys: the device's note or refusal, and a ZeRO stage 1-2 running as 0 on one GPU.
TEST(DeepSpeedConfig, OffloadKeysByDevice) {
  TrainArgs a;
  apply(a, 1, R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}}})");
  EXPECT_EQ(a.offload_optimizer, "cpu");
  TrainArgs cpu = a;
  EXPECT_NE(apply_offload(cpu, DeviceKind::cpu).find("changes nothing on the CPU"), std::string::npos);
  EXPECT_EQ(cpu.zero_stage, 2);
  TrainArgs gpu = a;
  EXPECT_NE(apply_offload(gpu, DeviceKind::cuda).find("ZeRO stage 2 on one GPU shards nothing"), std::string::npos);
  EXPECT_EQ(gpu.zero_stage, 0);
  EXPECT_EQ(gpu_unsupported_reason(a, 1, ModelConfig{}), "");  // stage 2 + offload: the GPU path
  TrainArgs nvme;
  nvme.offload_optimizer = "nvme";
  EXPECT_THROW(apply_offload(nvme, DeviceKind::cuda), Error);
  TrainArgs param;
  param.offload_param = "cpu";
  EXPECT_THROW(apply_offload(param, DeviceKind::cuda), Error);
  TrainArgs bad;
  bad.offload_optimizer = "disk";
  EXPECT_THROW(apply_offload(bad, DeviceKind::cpu), Error);
  // A flag and the config that disagree: one mismatch line, as for every other key.
  TrainArgs both;
  both.offload_optimizer = "none";
  both.explicit_flags.insert("offload_optimizer");
  EXPECT_THROW(apply(both, 1, R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})"), Error);
}

// Offload to disk: each key of offload_optimizer / offload_param and of aio lands in the
// arguments or is refused with one line naming it (apps/deepspeed_offload.cpp).
TEST(DeepSpeedConfig, OffloadToDiskKeys) {
  TrainArgs a;
  auto w = apply(a, 1, R"({"zero_optimization": {"stage": 3, "sub_group_size": 5e6,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/scratch", "buffer_count": 6, "pin_memory": true,
                            "pipeline_read": false, "fast_init": false, "ratio": 1},
      "offload_param": {"device": "nvme", "nvme_path": "/scratch", "buffer_count": 4, "buffer_size": 2e8,
                        "max_in_cpu": 3e9, "pin_memory": false}},
      "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 1, "single_submit": true,
              "overlap_events": false, "use_gds": false}})");
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(a.offload_optimizer, "nvme");
  EXPECT_EQ(a.offload_param, "nvme");
  EXPECT_EQ(a.nvme_path, "/scratch");
  EXPECT_EQ(a.offload_buffer_count, 6);
  EXPECT_EQ(a.offload_param_buffer_count, 4);
  EXPECT_EQ(a.offload_param_buffer_size, 200000000);
  EXPECT_EQ(a.offload_param_max_in_cpu, 3000000000);
  EXPECT_EQ(a.offload_sub_group_size, 5000000);
  EXPECT_EQ(a.aio.block_size, 262144);
  EXPECT_EQ(a.aio.queue_depth, 16);
  EXPECT_TRUE(a.aio.single_submit);
  EXPECT_FALSE(a.aio.overlap_events);
  auto refused = [](const char* json, const char* part) {
    TrainArgs b;
    const std::string e = zt::test::error_of([&] { apply(b, 1, json); });
    EXPECT_NE(e.find(part), std::string::npos) << e;
  };
  refused(R"({"aio": {"thread_count": 4}})", "aio.thread_count 4 is not supported");
  refused(R"({"aio": {"use_gds": true}})", "GPUDirect Storage");
  refused(R"({"aio": {"block_size": 1000}})", "aio.block_size");
  refused(R"({"aio": {"queue_dept": 4}})", "did you mean aio.queue_depth");
  refused(R"({"zero_optimization": {"offload_param": {"device": "nvme", "max_in_cpus": 1}}})",
          "did you mean zero_optimization.offload_param.max_in_cpu");
  refused(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu", "ratio": 0.5}}})", "partial offload");
  refused(R"({"zero_optimization": {"offload_optimizer": {"device": "nvme", "nvme_path": "/a"},
                                    "offload_param": {"device": "nvme", "nvme_path": "/b"}}})",
          "differ");
  // --nvme_path given and a config that names another folder: HF's mismatch line.
  TrainArgs flag;
  flag.nvme_path = "/mine";
  flag.explicit_flags.insert("nvme_path");
  const std::string e = zt::test::error_of([&] {
    apply(flag, 1, R"({"zero_optimization": {"offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}})");
  });
  EXPECT_NE(e.find("- ds zero_optimization.offload_optimizer.nvme_path=\"/x\" vs hf nvme_path=/mine"),
            std::string::npos)
      << e;
  // On the CPU nvme is offload to disk (no note); on the GPU it is refused.
  TrainArgs cpu = a;
  EXPECT_EQ(apply_offload(cpu, DeviceKind::cpu), "");
  EXPECT_NE(gpu_unsupported_reason(a, 1, ModelConfig{}).find("runs on the CPU only"), std::string::npos);
}

TEST(DeepSpeedConfig, WarningsGoToStderrOneLineEach) {
  TrainArgs a;
  a.deepspeed = testing::TempDir() + "/ds_warn.json";
  FILE* f = std::fopen(a.deepspeed.c_str(), "w");
  ASSERT_TRUE(f);
  std::fputs(R"({"zero_optimization": {"offload_parm": {}}, "train_batch_size": 8})", f);
  std::fclose(f);
  testing::internal::CaptureStderr();
  apply_deepspeed_config(a, 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "warning: DeepSpeed config key zero_optimization.offload_parm is not used by ztrain (did you mean "
            "zero_optimization.offload_param?)\n");
}

TEST(DeepSpeedConfig, FlagSetRecordsExplicitFlags) {
  int batch = 8;
  double lr = 5e-5;
  bool overlap = true;
  app::FlagSet f("train");
  f.add("per_device_train_batch_size", &batch, "", app::range::closed(1, 1 << 20));
  f.add("learning_rate", &lr, "", app::range::above(0));
  f.add("overlap_comm", &overlap, "");
  f.parse({"--learning_rate=1e-4", "--overlap_comm", "false"});
  EXPECT_EQ(f.given(), (std::set<std::string>{"learning_rate", "overlap_comm"}));
  EXPECT_FALSE(overlap);
}

// ---- DeepSpeed's schedules: optimizer step s uses DeepSpeed's formula at iteration s-1 ----

TEST(DeepSpeedSchedule, WarmupLRLogAndLinear) {
  optim::Schedule s;
  s.kind = optim::ScheduleKind::warmup_lr;
  s.base_lr = 0.1;  // warmup_max_lr
  s.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);                          // before the first scheduler.step(): min lr
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.0);                          // log(1)/log(10)
  EXPECT_NEAR(s.lr_at(2), 0.1 * 0.30102999566398120, 1e-15);  // log(2)/log(10)
  EXPECT_NEAR(s.lr_at(5), 0.1 * 0.69897000433601886, 1e-15);  // log(5)/log(10)
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.1);                         // log(10)/log(10)
  EXPECT_DOUBLE_EQ(s.lr_at(11), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(1000), 0.1);
  s.warmup_min_lr = 0.01;
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.01);
  EXPECT_NEAR(s.lr_at(2), 0.01 + 0.09 * 0.30102999566398120, 1e-15);
  s.warmup_min_lr = 0;
  s.warmup_log = false;
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(6), 0.05);  // 5/10
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.09);
  EXPECT_DOUBLE_EQ(s.lr_at(11), 0.1);
  // DeepSpeed warms up over at least 2 iterations: 0 means log(it+1)/log(2).
  s.warmup_log = true;
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(2), 0.1);
  EXPECT_DOUBLE_EQ(optim::deepspeed_lr_at_iteration(s, 1), 0.1);
}

TEST(DeepSpeedSchedule, WarmupDecayLR) {
  optim::Schedule s;
  s.kind = optim::ScheduleKind::warmup_decay_lr;
  s.base_lr = 0.1;
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.warmup_log = false;
  EXPECT_DOUBLE_EQ(s.lr_at(6), 0.05);      // warmup: 5/10
  EXPECT_DOUBLE_EQ(s.lr_at(11), 0.1);      // iteration 10: (110-10)/100
  EXPECT_DOUBLE_EQ(s.lr_at(61), 0.05);     // iteration 60: (110-60)/100
  EXPECT_NEAR(s.lr_at(101), 0.01, 1e-17);  // iteration 100: 10/100
  EXPECT_DOUBLE_EQ(s.lr_at(111), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(500), 0.0);  // clamped at 0
  s.warmup_min_lr = 0.01;
  EXPECT_DOUBLE_EQ(s.lr_at(61), 0.01 + 0.09 * 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(111), 0.01);
}

TEST(DeepSpeedSchedule, WarmupCosineLR) {
  optim::Schedule s;
  s.kind = optim::ScheduleKind::warmup_cosine_lr;
  s.base_lr = 0.1;  // the optimizer's lr
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.warmup_log = false;
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.0;
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);                                       // DeepSpeed's pre-start value
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.1 * 0.1);                                 // ratio 0.1 + 0 * 0.9
  EXPECT_DOUBLE_EQ(s.lr_at(6), 0.1 * 0.55);                                // ratio 0.1 + 0.5 * 0.9
  EXPECT_NEAR(s.lr_at(11), 0.1 * (1 + std::cos(M_PI * 0.01)) / 2, 1e-15);  // real step 1 of 100
  EXPECT_NEAR(s.lr_at(60), 0.05, 1e-15);                                   // real step 50 of 100: cos(pi/2) = 0
  EXPECT_NEAR(s.lr_at(110), 0.0, 1e-15);                                   // real step 100: cos(pi) = -1
  s.cos_min_ratio = 1e-4;                                                  // DeepSpeed's default
  EXPECT_NEAR(s.lr_at(60), 0.1 * (1e-4 + (1 - 1e-4) * 0.5), 1e-15);
  EXPECT_NEAR(s.lr_at(110), 1e-5, 1e-15);
  EXPECT_NEAR(s.lr_at(500), 1e-5, 1e-15);  // held at the end ratio past total_num_steps
  s.warmup_log = true;
  s.warmup_min_ratio = 0;
  EXPECT_NEAR(s.lr_at(2), 0.1 * std::log(2.0) / std::log(10.0), 1e-15);
}

TEST(DeepSpeedSchedule, KindsByDeepSpeedName) {
  EXPECT_EQ(optim::schedule_kind_from_string("WarmupLR"), optim::ScheduleKind::warmup_lr);
  EXPECT_EQ(optim::schedule_kind_from_string("WarmupDecayLR"), optim::ScheduleKind::warmup_decay_lr);
  EXPECT_EQ(optim::schedule_kind_from_string("WarmupCosineLR"), optim::ScheduleKind::warmup_cosine_lr);
  EXPECT_NE(error_of([] { optim::schedule_kind_from_string("OneCycle"); }).find("WarmupCosineLR"), std::string::npos);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// DeepSpeed's pipeline block: stages = --pipeline-model-parallel-size, the batch identity over
// the data-parallel ranks (world / stages), and keys ztrain cannot honour refused.
TEST(DeepSpeedConfig, PipelineBlock) {
  auto apply = [](TrainArgs& a, int ws, const std::string& text) {
    return apply_deepspeed_json(a, ws, nlohmann::json::parse(text));
  };
  TrainArgs a;
  a.per_device_train_batch_size = 2;
  apply(a, 4, R"({"pipeline": {"stages": 2, "partition": "parameters", "pipe_partitioned": true},
                  "train_batch_size": 8, "gradient_accumulation_steps": 2})");
  EXPECT_EQ(a.pipeline_parallel_size, 2);
  EXPECT_EQ(a.gradient_accumulation_steps, 2);  // 8 = 2 x 2 x (4 ranks / 2 stages)
  TrainArgs b;
  b.pipeline_parallel_size = 2;
  b.explicit_flags.insert("pipeline-model-parallel-size");
  EXPECT_THROW(apply(b, 4, R"({"pipeline": {"stages": 4}})"), Error);  // disagrees with the flag
  for (const char* bad : {R"({"pipeline": {"partition": "uniform"}})", R"({"pipeline": {"seed_layers": true}})",
                          R"({"pipeline": {"activation_checkpoint_interval": 1}})", R"({"pipeline": {"stage": 2}})",
                          R"({"pipeline": {"stages": 3}})"}) {
    TrainArgs c;
    EXPECT_THROW(apply(c, 4, bad), Error) << bad;
  }
  // pipe_partitioned: honoured under TP with SP (each TP rank sends its rows), refused under TP
  // without SP (whole copies cross), nothing to split without TP.
  TrainArgs tp;
  tp.tensor_model_parallel_size = 2;
  const std::string part = R"({"pipeline": {"pipe_partitioned": true}})";
  EXPECT_NE(error_of([&] { apply(tp, 4, part); }).find("add --sequence-parallel or set it to false"),
            std::string::npos);
  tp.sequence_parallel = true;
  EXPECT_NO_THROW(apply(tp, 4, part));
  TrainArgs off;
  off.tensor_model_parallel_size = 2;
  EXPECT_NO_THROW(apply(off, 4, R"({"pipeline": {"pipe_partitioned": false, "grad_partitioned": false}})"));
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {
// optimizer.type beyond Adam: Lion, Muon and (DeepSpeed's torch.optim fallback) SGD, their params
// into --optim_args; bf16.bf16_optimizer_states into --optim_state_dtype.
TEST(DeepSpeedConfig, OptimizerTypesAndBf16States) {
  TrainArgs a;
  apply(a, 1, R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}}})");
  EXPECT_EQ(a.optim, "sgd");
  EXPECT_EQ(a.optim_args, "momentum=0.9,nesterov=true");
  EXPECT_DOUBLE_EQ(a.learning_rate, 0.1);
  TrainArgs l;
  apply(l, 1, R"({"optimizer": {"type": "lion", "params": {"betas": [0.9, 0.99]}}, "bf16": {"enabled": true,
                  "bf16_optimizer_states": true}})");
  EXPECT_EQ(l.optim, "lion_32bit");
  EXPECT_DOUBLE_EQ(l.adam_beta2, 0.99);
  EXPECT_EQ(l.optim_state_dtype, "bf16");
  TrainArgs m;
  m.optim = "adafactor";
  m.explicit_flags = {"optim"};
  EXPECT_NE(error_of([&] { apply(m, 1, R"({"optimizer": {"type": "Muon"}})"); }).find("vs hf optim=adafactor"),
            std::string::npos);
  TrainArgs e;  // Adam's eps means nothing to Lion: a warning, as for any key ztrain does not use
  const std::vector<std::string> w = apply(e, 1, R"({"optimizer": {"type": "Lion", "params": {"eps": 1e-8}}})");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("optimizer.params.eps"), std::string::npos) << w[0];
}
}  // namespace
}  // namespace zt
