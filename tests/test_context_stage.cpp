// test_context_stage.cpp: long-context stages (train/context_stage.h, issue 22 item 5). In file
// order a stage at a new sequence length or batch continues the token stream exactly where the
// last stage stopped (no token repeated or skipped, across the file's end too, with data skipped
// by rollbacks counted); the data cursor carries the stage list through a checkpoint and loads a
// checkpoint of another geometry only when asked to; --rope_scaling rewrites the config as HF
// users do and is refused where it cannot apply.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "data/token_data.h"
#include "models/config.h"
#include "train/context_stage.h"

namespace zt {
namespace {
namespace fs = std::filesystem;
using train_internal::next_data_stage;
using train_internal::StageSwitch;

// Token i of the file is i % vocab: a window's first input names where it starts.
std::string stage_counting_file(int n, int vocab) {
  std::string p = (fs::temp_directory_path() / ("zt_stage_" + std::to_string(n) + ".bin")).string();
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = uint16_t(i % vocab);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.size() * 2));
  return p;
}

std::string stage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class StageJsonReader final : public StateReader {
 public:
  explicit StageJsonReader(nlohmann::json doc) : doc_(std::move(doc)) {}
  void get_tensor(const StatePiece&) override { FAIL() << "no tensors here"; }
  const nlohmann::json* find_json(const std::string& key) const override {
    const nlohmann::json::json_pointer ptr(JsonStateWriter::json_pointer(key));
    return doc_.contains(ptr) ? &doc_[ptr] : nullptr;
  }
  std::string source() const override { return "checkpoint-x"; }

 private:
  nlohmann::json doc_;
};

// The tokens one stage's loader hands out for steps [from, to), in order (rows of T inputs).
std::vector<int32_t> stage_inputs(const TokenFile& f, LoaderConfig c, int64_t from, int64_t to) {
  std::vector<int32_t> out;
  DataLoader dl(f, c, from);
  for (int64_t s = from; s < to; ++s)
    for (int m = 0; m < c.accumulation; ++m) {
      const MicroBatch& mb = dl.next();
      out.insert(out.end(), mb.inputs.begin(), mb.inputs.end());
    }
  return out;
}

TEST(ContextStage, StreamWindowsWrapAtTheFilesEnd) {
  // 100 tokens, T 16: 6 windows per pass from token 0 (the last at 80 needs token 96).
  EXPECT_EQ(stream_window_start(100, 16, 0, 5), 80);
  EXPECT_EQ(stream_window_start(100, 16, 0, 6), 0);
  EXPECT_EQ(stream_window_start(100, 16, 0, 13), 16);
  // From token 40: windows at 40, 56, 72 (ends at 88 + 1), then 0, 16, ...
  EXPECT_EQ(stream_window_start(100, 16, 40, 2), 72);
  EXPECT_EQ(stream_window_start(100, 16, 40, 3), 0);
  EXPECT_EQ(stream_window_start(100, 16, 40, 9), 0);
  EXPECT_EQ(stream_window_start(100, 16, 90, 0), 0);  // no whole window left before the end
}

// Stage 1 at T 16 for 7 steps, stage 2 at T 32 (and another batch) for 9: in file order the two
// stages' inputs are one unbroken run of the file's tokens, as an uninterrupted stream would be.
TEST(ContextStage, AStageContinuesTheTokenStreamExactly) {
  const int V = 60000;
  TokenFile f(stage_counting_file(5000, V), V);
  LoaderConfig one;
  one.B = 2, one.T = 16, one.accumulation = 2, one.shuffle = false;
  for (int64_t offset : {0, 3}) {  // 3 steps of data skipped by a rollback in stage 1
    one.step_offset = offset;
    const std::vector<int32_t> first = stage_inputs(f, one, 0, 7);
    StageSwitch sw;
    sw.step = 7, sw.offset_steps = offset, sw.T = 32, sw.per_step = 3, sw.shuffle = false;
    sw.file_tokens = f.size();
    const std::vector<DataStage> stages = next_data_stage({{0, 16, 4, 0, 0}}, sw);
    ASSERT_EQ(stages.size(), 2u);
    const DataStage& s = stages.back();
    EXPECT_EQ(s.first_token, (7 + offset) * 4 * 16);
    LoaderConfig two = one;
    two.T = 32, two.B = 3, two.accumulation = 1;
    two.stage_first_sequence = s.first_sequence, two.stage_first_token = s.first_token;
    const std::vector<int32_t> second = stage_inputs(f, two, 7, 16);
    // Stage 1 starts at offset * 64 tokens, and together the stages run on without a gap.
    std::vector<int32_t> all = first;
    all.insert(all.end(), second.begin(), second.end());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], int32_t(offset * 64 + int64_t(i))) << i;
  }
}

// A stage that reaches the file's end wraps to token 0 at its own length; a third stage goes on
// from wherever the second stopped.
TEST(ContextStage, StagesChainAndWrap) {
  const int V = 60000;
  TokenFile f(stage_counting_file(1000, V), V);
  LoaderConfig c;
  c.B = 1, c.T = 64, c.shuffle = false;
  StageSwitch sw;
  sw.step = 10, sw.T = 128, sw.per_step = 1, sw.shuffle = false, sw.file_tokens = f.size();
  std::vector<DataStage> stages = next_data_stage({{0, 64, 1, 0, 0}}, sw);
  EXPECT_EQ(stages.back().first_token, 640);
  c.T = 128, c.stage_first_sequence = stages.back().first_sequence, c.stage_first_token = 640;
  const std::vector<int32_t> t = stage_inputs(f, c, 10, 13);  // 640, 768, then 896 + 129 > 1000: wrap
  EXPECT_EQ(t[0], 640);
  EXPECT_EQ(t[128], 768);
  EXPECT_EQ(t[256], 0);
  sw.step = 13, sw.T = 256;
  stages = next_data_stage(stages, sw);
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages.back().first_token, 128);
  EXPECT_EQ(stages.back().first_sequence, 13);
  // A stage that begins where the last one began consumed nothing: it is replaced.
  sw.T = 32;
  EXPECT_EQ(next_data_stage(stages, sw).size(), 3u);
}

TEST(ContextStage, ShuffledRunsAndOtherSourcesAreRefusedUnlessAsked) {
  StageSwitch sw;
  sw.step = 5, sw.T = 32, sw.per_step = 4, sw.shuffle = true, sw.file_tokens = 1000;
  const std::vector<DataStage> one{{0, 16, 4, 0, 0}};
  EXPECT_NE(stage_error([&] { next_data_stage(one, sw); }).find("Pass --resume_allow_changes data"), std::string::npos);
  sw.allow_data_change = true;
  const DataStage s = next_data_stage(one, sw).back();
  EXPECT_EQ(s.first_token, 0);  // a fresh permutation at the new length
  EXPECT_EQ(s.first_sequence, 20);
  sw.single_token_file = false;
  EXPECT_NE(stage_error([&] { next_data_stage(one, sw); }).find("SFT records or named channels"), std::string::npos);
}

TEST(ContextStage, TheCursorCarriesStagesAndLoadsAnotherGeometryOnlyWhenAsked) {
  std::vector<DataStage> stages{{0, 16, 4, 0, 0}, {5, 32, 2, 10, 320}};
  nlohmann::json doc;
  JsonStateWriter w(&doc);
  DataCursor(2, 32, false, 8, &stages).save_state(w);
  EXPECT_EQ(doc["ztrain"]["data_stages"].size(), 2u);
  StageJsonReader r(doc);
  std::vector<DataStage> loaded;
  DataCursor same(2, 32, false, 0, &loaded);
  same.load_state(r);
  EXPECT_FALSE(same.switched());
  EXPECT_EQ(same.step(), 8);
  EXPECT_EQ(loaded, stages);
  DataCursor longer(4, 64, false, 0, &loaded);  // another geometry: loads, says so, same step
  longer.load_state(r);
  EXPECT_TRUE(longer.switched());
  EXPECT_EQ(longer.step(), 8);
  DataCursor plain(4, 64, false);  // without a stage list (a rollback, the tests above): refused
  EXPECT_NE(stage_error([&] { plain.load_state(r); }).find("resume with the same batch size"), std::string::npos);
  // A run of one stage writes no list, and its checkpoints load as one stage from step 0.
  nlohmann::json single;
  JsonStateWriter ws(&single);
  std::vector<DataStage> just_one{{0, 16, 4, 0, 0}};
  DataCursor(4, 16, false, 3, &just_one).save_state(ws);
  EXPECT_FALSE(single["ztrain"].contains("data_stages"));
  StageJsonReader rs(single);
  DataCursor back(4, 16, false, 0, &loaded);
  back.load_state(rs);
  EXPECT_EQ(loaded, just_one);
  // A damaged list is named, never followed.
  doc["ztrain"]["data_stages"][1]["sequence_length"] = -3;
  StageJsonReader bad(doc);
  EXPECT_NE(stage_error([&] { same.load_state(bad); }).find("\"ztrain.data_stages\" is malformed"), std::string::npos);
}

TEST(ContextStage, RopeScalingRewritesTheConfigAsHfUsersDo) {
  const nlohmann::json llama = {{"model_type", "llama"},       {"vocab_size", 64},          {"hidden_size", 32},
                                {"intermediate_size", 64},     {"num_hidden_layers", 1},    {"num_attention_heads", 4},
                                {"max_position_embeddings", 256}};
  const ModelConfig cfg = config_from_json(llama, "config.json");
  const ModelConfig scaled =
      train_internal::with_rope_scaling(cfg, R"({"rope_type": "linear", "factor": 2.0})", 512);
  EXPECT_EQ(scaled.rope.type, "linear");
  EXPECT_EQ(scaled.rope.factor, 2.0);
  EXPECT_EQ(scaled.max_position, 512);
  EXPECT_EQ(scaled.raw["max_position_embeddings"], 512);  // the exported config.json says so too
  EXPECT_EQ(train_internal::with_rope_scaling(cfg, "", 512).max_position, 256);  // no flag: unchanged
  EXPECT_EQ(train_internal::with_rope_scaling(scaled, "null", 128).rope.type, "default");
  EXPECT_NE(stage_error([&] { train_internal::with_rope_scaling(cfg, "{linear", 512); }).find("is not JSON"),
            std::string::npos);
  EXPECT_NE(stage_error([&] { train_internal::with_rope_scaling(cfg, "[2]", 512); }).find("a JSON object or null"),
            std::string::npos);
  EXPECT_NE(stage_error([&] { train_internal::with_rope_scaling(cfg, R"({"rope_type": "linear"})", 512); })
                .find("needs the key \"factor\""),
            std::string::npos);
  const ModelConfig gpt2 = config_from_json(
      {{"model_type", "gpt2"}, {"vocab_size", 64}, {"n_embd", 32}, {"n_layer", 1}, {"n_head", 4}, {"n_ctx", 64}, {"n_positions", 64}}, "config.json");
  EXPECT_NE(stage_error([&] { train_internal::with_rope_scaling(gpt2, R"({"rope_type": "linear", "factor": 2})", 2048); })
                .find("learned position embeddings"),
            std::string::npos);
}

}  // namespace
}  // namespace zt
