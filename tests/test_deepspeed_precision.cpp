// test_deepspeed_precision.cpp: a DeepSpeed config's fp16 / bf16 / communication_data_type /
// activation_checkpointing sections parsed into TrainArgs::ds_precision (defaults and rules of
// DeepSpeed 0.19.6: precision_config.py, activation_checkpointing/config.py, config.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "optim/loss_scaler.h"
#include "deepspeed_config.h"

namespace zt {
namespace {

using json = nlohmann::json;
using Enabled = DeepSpeedPrecision::Enabled;

std::string error_of(TrainArgs& a, const char* text) {
  try {
    apply_deepspeed_json(a, 1, json::parse(text));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> apply(TrainArgs& a, const char* text) { return apply_deepspeed_json(a, 1, json::parse(text)); }

TEST(DeepSpeedPrecision, DefaultsAreDeepSpeeds) {
  TrainArgs a;
  EXPECT_TRUE(apply(a, "{}").empty());
  const DeepSpeedPrecision& d = a.ds_precision;
  EXPECT_EQ(d.fp16, Enabled::absent);
  EXPECT_EQ(d.bf16, Enabled::absent);
  EXPECT_EQ(d.loss_scaler.loss_scale, 0);  // dynamic
  EXPECT_EQ(d.loss_scaler.initial_scale_power, 16);
  EXPECT_EQ(d.loss_scaler.loss_scale_window, 1000);
  EXPECT_EQ(d.loss_scaler.hysteresis, 2);
  EXPECT_FALSE(d.loss_scaler.consecutive_hysteresis);
  EXPECT_EQ(d.loss_scaler.min_loss_scale, 1);
  EXPECT_TRUE(d.bf16_check_grad_overflow);
  EXPECT_EQ(d.communication_data_type, "");
  EXPECT_FALSE(d.activation_checkpointing);
  EXPECT_EQ(d.number_checkpoints, 0);
}

TEST(DeepSpeedPrecision, Fp16KeysFillTheLossScaler) {
  TrainArgs a;
  EXPECT_TRUE(apply(a, R"({"fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 12,
      "loss_scale_window": 500, "hysteresis": 4, "consecutive_hysteresis": true, "min_loss_scale": 1e-10,
      "auto_cast": false}})")
                  .empty());
  const optim::LossScalerConfig& ls = a.ds_precision.loss_scaler;
  EXPECT_EQ(a.ds_precision.fp16, Enabled::auto_value);
  EXPECT_EQ(ls.initial_scale_power, 12);
  EXPECT_EQ(ls.loss_scale_window, 500);
  EXPECT_EQ(ls.hysteresis, 4);
  EXPECT_TRUE(ls.consecutive_hysteresis);
  EXPECT_EQ(ls.min_loss_scale, 1e-10);  // configs in the wild write it (DeepSpeed 0.19.6 wants an int)
  // A fixed scale; "auto" keeps DeepSpeed's default, as DeepSpeed drops "auto" values.
  apply(a, R"({"fp16": {"enabled": false, "loss_scale": 128, "hysteresis": "auto"}})");
  EXPECT_EQ(a.ds_precision.fp16, Enabled::off);
  EXPECT_FALSE(a.ds_precision.loss_scaler.dynamic());
  EXPECT_EQ(a.ds_precision.loss_scaler.loss_scale, 128);
  EXPECT_EQ(a.ds_precision.loss_scaler.hysteresis, 2);
  // Each apply starts from DeepSpeed's defaults: nothing of the previous config stays.
  apply(a, "{}");
  EXPECT_EQ(a.ds_precision.fp16, Enabled::absent);
  EXPECT_EQ(a.ds_precision.loss_scaler.loss_scale, 0);
}

TEST(DeepSpeedPrecision, BadFp16ValuesAreErrors) {
  TrainArgs a;
  EXPECT_EQ(error_of(a, R"({"fp16": {"loss_scale": -1}})"),
            "DeepSpeed config key fp16.loss_scale must be at least 0, got -1.0");
  EXPECT_EQ(error_of(a, R"({"fp16": {"hysteresis": 1.5}})"),
            "DeepSpeed config key fp16.hysteresis must be an integer or \"auto\", got 1.5");
  EXPECT_EQ(error_of(a, R"({"fp16": {"consecutive_hysteresis": 1}})"),
            "DeepSpeed config key fp16.consecutive_hysteresis must be true or false or \"auto\", got 1");
  EXPECT_EQ(error_of(a, R"({"fp16": {"initial_scale_power": 300}})"),
            "DeepSpeed config key fp16.initial_scale_power must be between 0 and 127, got 300");
  // DeepSpeed checks the window and the minimum only when dynamic scaling is on.
  EXPECT_EQ(error_of(a, R"({"fp16": {"enabled": false, "loss_scale_window": 0}})"), "");
  EXPECT_NE(
      error_of(a, R"({"fp16": {"enabled": true, "loss_scale_window": 0}})").find("fp16.loss_scale_window must be > 0"),
      std::string::npos);
  EXPECT_NE(error_of(a, R"({"fp16": {"enabled": true, "hysteresis": 0}})").find("fp16.hysteresis must be at least 1"),
            std::string::npos);
  EXPECT_NE(error_of(a, R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})").find("both true"),
            std::string::npos);
  EXPECT_NE(error_of(a, R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": false}})").find("legacy name"),
            std::string::npos);
  EXPECT_NE(error_of(a, R"({"amp": {"enabled": true}})").find("amp.enabled is true"), std::string::npos);
}

TEST(DeepSpeedPrecision, Bf16AndCommunicationDataType) {
  TrainArgs a;
  EXPECT_TRUE(apply(a, R"({"bf16": {"enabled": "auto", "check_grad_overflow": false, "immediate_grad_update": true},
                           "communication_data_type": "FP32"})")
                  .empty());
  EXPECT_EQ(a.ds_precision.bf16, Enabled::auto_value);
  EXPECT_FALSE(a.ds_precision.bf16_check_grad_overflow);
  EXPECT_EQ(a.ds_precision.communication_data_type, "fp32");  // DeepSpeed lower-cases it
  apply(a, R"({"bfloat16": {"enabled": false}})");            // the legacy name
  EXPECT_EQ(a.ds_precision.bf16, Enabled::off);
  apply(a, R"({"communication_data_type": null})");
  EXPECT_EQ(a.ds_precision.communication_data_type, "");
  EXPECT_EQ(error_of(a, R"({"communication_data_type": "int8"})"),
            "DeepSpeed config key communication_data_type must be \"fp32\", \"bf16\" or \"fp16\", got \"int8\"");
  auto w = apply(a, R"({"communication_data_type": "fp32", "bf16": {"bf16_master_weights_and_grads": true}})");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("bf16.bf16_master_weights_and_grads is not used"), std::string::npos);
  apply(a, R"({"communication_data_type": "bf16"})");  // reduced in bf16 (tests/dist/train_dp_test.py)
  EXPECT_EQ(a.ds_precision.communication_data_type, "bf16");
}

// partition_activations under tensor parallelism: the checkpointed block inputs split over the TP
// ranks, which is ztrain's sequence parallelism; with tp 1 there is nothing to split (warned).
TEST(DeepSpeedPrecision, PartitionActivationsIsSequenceParallelism) {
  TrainArgs a;
  a.tensor_model_parallel_size = 2;
  auto w = apply(a, R"({"activation_checkpointing": {"partition_activations": true}})");
  EXPECT_TRUE(w.empty());
  EXPECT_TRUE(a.sequence_parallel);
  TrainArgs b;
  w = apply(b, R"({"activation_checkpointing": {"partition_activations": true}})");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("there are none (--tensor-model-parallel-size 1)"), std::string::npos);
  EXPECT_FALSE(b.sequence_parallel);
}

TEST(DeepSpeedPrecision, ActivationCheckpointing) {
  TrainArgs a;
  auto w = apply(a, R"({"activation_checkpointing": {"number_checkpoints": 6, "partition_activations": false,
      "cpu_checkpointing": true, "contiguous_memory_optimization": false, "synchronize_checkpoint_boundary": true,
      "profile": false}})");
  const DeepSpeedPrecision& d = a.ds_precision;
  EXPECT_TRUE(d.activation_checkpointing);
  EXPECT_EQ(d.number_checkpoints, 6);
  EXPECT_TRUE(d.cpu_checkpointing);
  EXPECT_TRUE(d.synchronize_checkpoint_boundary);
  EXPECT_FALSE(d.partition_activations);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(a.recompute_granularity, "full");  // the section asks for HF's per-block recomputation
  EXPECT_EQ(a.recompute_num_layers, 6);
  EXPECT_EQ(w[0],
            "DeepSpeed config keys that change nothing on ztrain's CPU training: activation_checkpointing."
            "cpu_checkpointing (moves checkpoints to host memory, where they are already); activation_checkpointing."
            "synchronize_checkpoint_boundary (a CUDA synchronize)");
  apply(a, R"({"activation_checkpointing": {"number_checkpoints": null}})");
  EXPECT_TRUE(a.ds_precision.activation_checkpointing);
  EXPECT_EQ(a.ds_precision.number_checkpoints, 0);
  EXPECT_EQ(error_of(a, R"({"activation_checkpointing": {"number_checkpoints": 0}})"),
            "DeepSpeed config key activation_checkpointing.number_checkpoints must be at least 1, got 0");
  w = apply(a, R"({"activation_checkpointing": {"partitioned_activations": true}})");  // DeepSpeed's own doc typo
  EXPECT_NE(w[0].find("did you mean activation_checkpointing.partition_activations?"), std::string::npos);
}

TEST(DeepSpeedPrecision, ResolvedJson) {
  TrainArgs a;
  apply(a, R"({"fp16": {"enabled": "auto", "hysteresis": 3}, "activation_checkpointing": {"number_checkpoints": 2}})");
  const json j = deepspeed_precision_json(a.ds_precision);
  EXPECT_EQ(j["fp16"], "auto");
  EXPECT_EQ(j["bf16"], "absent");
  EXPECT_EQ(j["loss_scaler"]["hysteresis"], 3);
  EXPECT_EQ(j["activation_checkpointing"]["number_checkpoints"], 2);
  EXPECT_TRUE(deepspeed_precision_json(DeepSpeedPrecision{})["activation_checkpointing"].is_null());
}

}  // namespace
}  // namespace zt
