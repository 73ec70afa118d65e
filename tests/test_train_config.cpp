// test_train_config.cpp: `ztrain train`'s arguments resolved into the library's TrainConfig
// (apps/train_config_build.cpp): HF's strategy names become enums, what depended on whether a flag
// was given becomes an optional or a resolved bool, the DeepSpeed precision sections become the
// loss scaler's config, and the checks keep their messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "train_config_build.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

class TrainConfigBuild : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zt_train_config_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "cfg.json")
        << R"({"model_type": "gpt2", "vocab_size": 200, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64})";
    std::vector<uint16_t> tokens(4000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 200);
    std::ofstream(dir_ / "train.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * sizeof(uint16_t)));
    args_.model_config_path = (dir_ / "cfg.json").string();
    args_.train_file = (dir_ / "train.bin").string();
    args_.output_dir = (dir_ / "out").string();
    args_.per_device_train_batch_size = 2;
    args_.model_max_length = 16;
    args_.max_steps = 2;
    args_.device = "cpu";
    world_ = dist::make_world(dist::Backend::local);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TrainConfig build() { return build_train_config(args_, *world_); }
  std::string error_of_build() {
    try {
      build();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  TrainArgs args_;
  std::unique_ptr<dist::Communicator> world_;
};

TEST_F(TrainConfigBuild, DefaultsResolve) {
  const TrainConfig c = build();
  EXPECT_EQ(c.data.seq_len, 16);
  EXPECT_EQ(c.data.micro_batch, 2);
  EXPECT_FALSE(c.data.sft);
  EXPECT_EQ(c.data.seed, 42);  // --data_seed not given: --seed
  EXPECT_EQ(c.model.config.n_layer, 2);
  EXPECT_TRUE(c.model.hf_dir.empty());
  EXPECT_EQ(c.checkpoint.save, Interval::steps);
  EXPECT_EQ(c.checkpoint.save_dtype, DType::f32);
  EXPECT_EQ(c.checkpoint.metric, BestMetric::loss);
  EXPECT_FALSE(c.checkpoint.greater_is_better);
  EXPECT_EQ(c.logging.strategy, Interval::steps);
  EXPECT_FALSE(c.logging.eval.has_value());     // --eval_strategy not given
  EXPECT_FALSE(c.logging.do_eval.has_value());  // --do_eval not given
  EXPECT_EQ(c.optim.spike_policy, SpikePolicy::none);
  EXPECT_FALSE(c.precision.scaler.has_value());  // fp32: no loss scaler
  EXPECT_EQ(c.parallel.device, DeviceKind::cpu);
  EXPECT_EQ(c.parallel.dims.dp(), 1);
  EXPECT_EQ(c.parallel.local_sgd.steps, 0);
  EXPECT_EQ(c.test.fail_rank, -1);
}

TEST_F(TrainConfigBuild, GivenFlagsBecomeOptionalsAndEnums) {
  args_.validation_file = args_.train_file;
  args_.eval_strategy = "epoch";
  args_.logging_strategy = "epoch";
  args_.save_strategy = "no";
  args_.do_eval = false;
  args_.greater_is_better = true;
  args_.metric_for_best_model = "eval_perplexity";
  args_.spike_policy = "skip";
  args_.explicit_flags = {"validation_file", "eval_strategy",     "logging_strategy",      "save_strategy",
                          "do_eval",         "greater_is_better", "metric_for_best_model", "spike_policy"};
  const TrainConfig c = build();
  ASSERT_TRUE(c.logging.eval.has_value());
  EXPECT_EQ(*c.logging.eval, Interval::epoch);
  ASSERT_TRUE(c.logging.do_eval.has_value());
  EXPECT_FALSE(*c.logging.do_eval);
  EXPECT_EQ(c.logging.strategy, Interval::epoch);
  EXPECT_EQ(c.checkpoint.save, Interval::no);
  EXPECT_TRUE(c.checkpoint.greater_is_better);
  EXPECT_EQ(c.checkpoint.metric, BestMetric::perplexity);
  EXPECT_EQ(c.checkpoint.metric_name, "eval_perplexity");  // as given, for messages
  EXPECT_EQ(c.optim.spike_policy, SpikePolicy::skip);
}

TEST_F(TrainConfigBuild, GreaterIsBetterCountsOnlyWhenGiven) {
  args_.greater_is_better = true;  // a value the flag parser did not set: HF's default stands
  EXPECT_FALSE(build().checkpoint.greater_is_better);
}

TEST_F(TrainConfigBuild, PrecisionSectionsBecomeTheLossScaler) {
  args_.fp16 = true;
  args_.ds_precision.loss_scaler.initial_scale_power = 12;
  TrainConfig c = build();
  ASSERT_TRUE(c.precision.scaler.has_value());
  EXPECT_EQ(c.precision.scaler->initial_scale_power, 12);
  EXPECT_EQ(c.precision.plan.precision, nn::Precision::fp16);
  args_.fp16 = false;
  args_.bf16 = true;
  c = build();
  ASSERT_TRUE(c.precision.scaler.has_value());  // bf16.check_grad_overflow: skips and counts only
  EXPECT_EQ(c.precision.scaler->loss_scale, 1);
  args_.ds_precision.bf16_check_grad_overflow = false;
  EXPECT_FALSE(build().precision.scaler.has_value());
}

TEST_F(TrainConfigBuild, ChecksKeepTheirMessages) {
  args_.chat_template_path = "t.jinja";
  args_.explicit_flags = {"chat_template_path"};
  EXPECT_NE(error_of_build().find("--chat_template_path applies to SFT records (a .jsonl --train_file), not to the "
                                  "token file"),
            std::string::npos);
  args_.chat_template_path.clear();
  args_.explicit_flags.clear();
  args_.model_max_length = 128;
  EXPECT_NE(error_of_build().find("--model_max_length 128 exceeds the model's context of 64 positions"),
            std::string::npos);
}

}  // namespace
}  // namespace zt
