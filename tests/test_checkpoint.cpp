// test_checkpoint.cpp: the state interface and the checkpointer (core/state.h,
// checkpoint/checkpoint.h) without a model or MPI: pieces written by "ranks" (threads) in one
// layout are read back in another, the one-shard folder is an HF model folder, JSON state
// round-trips through trainer_state.json, the optimizer saves whatever slots it declares, and
// damaged, incomplete or foreign checkpoints are one-line Errors naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <thread>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/rng_state.h"
#include "data/loader.h"
#include "models/config.h"
#include "optim/optimizer.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

ModelConfig tiny_config() {
  return config_from_json(
      {{"model_type", "gpt2"}, {"vocab_size", 16}, {"n_positions", 8}, {"n_embd", 8}, {"n_layer", 1}, {"n_head", 2}},
      "test");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  return "";
}

// Tensors "a" (4 x 5) and "b" (7) with slots "params" and "exp_avg", cut into whatever
// pieces a test gives; the values are a function of (slot, tensor, element).
struct Pieces final : Stateful {
  std::vector<StatePiece> pieces;
  std::vector<std::vector<float>> store;
  void add(const std::string& slot, const std::string& tensor, int64_t begin, int64_t count) {
    store.emplace_back(size_t(count), -1.0f);
    pieces.push_back(
        {tensor, tensor == "a" ? std::vector<int64_t>{4, 5} : std::vector<int64_t>{7}, slot, {begin, count}, nullptr});
  }
  void fill_expected() {
    for (size_t i = 0; i < pieces.size(); ++i)
      for (int64_t k = 0; k < pieces[i].slice.count; ++k) store[i][k] = expected(pieces[i], k);
  }
  static float expected(const StatePiece& p, int64_t k) {
    return float(p.slice.begin + k) + (p.tensor == "b" ? 100.f : 0.f) + (p.slot == "params" ? 0.f : 0.5f);
  }
  void bind() {
    for (size_t i = 0; i < pieces.size(); ++i) pieces[i].data = store[i].data();
  }
  void save_state(StateWriter& w) const override {
    for (const StatePiece& p : pieces) w.put_tensor(p);
  }
  void load_state(StateReader& r) override {
    for (const StatePiece& p : pieces) r.get_tensor(p);
  }
};

// What every checkpoint's trainer_state.json needs besides the data cursor and the RNG.
struct Counters final : Stateful {
  int64_t step = 3;
  double loss_sum = 0;
  void save_state(StateWriter& w) const override {
    w.put_json("global_step", step);
    w.put_json("log_history", nlohmann::json::array());
    w.put_json("ztrain.loss_sum", 12.5);
  }
  void load_state(StateReader& r) override { loss_sum = r.get_number("ztrain.loss_sum"); }
};

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = fs::temp_directory_path() / ("zt_ckpt_" + std::to_string(::getpid()));
    fs::remove_all(out_);
    fs::create_directories(out_);
  }
  void TearDown() override { fs::remove_all(out_); }
  // Saves step 3 with one thread per rank; rank r holds ranks[r] and writes shard r of n.
  void save(std::vector<Pieces>& ranks, const std::string& save_id = "save-1") {
    const int n = int(ranks.size());
    std::barrier sync(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        DataCursor cursor(8, 16, true, 3);
        RngState rng(42);
        Counters counters;
        CheckpointSaveOptions o{out_.string(), 3, {r, n}, r == 0, [&] { sync.arrive_and_wait(); }, save_id, {}};
        checkpoint_save(o, tiny_config(), {&ranks[r], &cursor, &rng, &counters});
      });
    for (auto& t : threads) t.join();
  }
  std::string dir() const { return (out_ / "checkpoint-3").string(); }
  fs::path out_;
};

TEST_F(CheckpointTest, ShardsWrittenInOneLayoutLoadInAnother) {
  std::vector<Pieces> ranks(2);
  for (const char* slot : {"params", "exp_avg"}) {
    ranks[0].add(slot, "a", 0, 12);
    ranks[1].add(slot, "a", 12, 8);
    ranks[1].add(slot, "b", 0, 7);
  }
  for (auto& r : ranks) r.fill_expected(), r.bind();
  save(ranks);
  EXPECT_TRUE(fs::exists(fs::path(dir()) / "state-00000-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(dir()) / "state-00001-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(dir()) / "model.safetensors"));  // no rank holds a tensor whole

  Pieces three;  // three "ranks" worth of slices, straddling the writers' cuts
  for (const char* slot : {"params", "exp_avg"}) {
    three.add(slot, "a", 0, 7);
    three.add(slot, "a", 7, 13);
    three.add(slot, "b", 2, 5);
  }
  three.bind();
  CheckpointReader reader(dir(), tiny_config());
  DataCursor cursor(8, 16, true);
  RngState rng(42);
  Counters counters;
  reader.load({&three, &cursor, &rng, &counters});
  for (size_t i = 0; i < three.pieces.size(); ++i)
    for (int64_t k = 0; k < three.pieces[i].slice.count; ++k)
      ASSERT_EQ(three.store[i][k], Pieces::expected(three.pieces[i], k)) << three.pieces[i].tensor << " " << k;
  EXPECT_EQ(cursor.step(), 3);
  EXPECT_EQ(counters.loss_sum, 12.5);
  EXPECT_EQ(reader.get_int("ztrain.sequences_consumed"), 24);
  EXPECT_EQ(reader.find_json("ztrain.loss_sum.deeper"), nullptr);
  EXPECT_EQ(reader.find_json("no.such.key"), nullptr);

  // The run must match what fixes the data order.
  DataCursor other_batch(16, 16, true);
  EXPECT_NE(error_of([&] { reader.load({&other_batch}); }).find("resume with the same batch size"), std::string::npos);
  DataCursor unshuffled(8, 16, false);
  EXPECT_NE(error_of([&] { reader.load({&unshuffled}); }).find("--no_shuffle"), std::string::npos);
  RngState other_seed(7);
  EXPECT_NE(error_of([&] { reader.load({&other_seed}); }).find("saved with --seed 42"), std::string::npos);
  EXPECT_NE(error_of([&] { reader.get_bool("ztrain.loss_sum"); }).find("\"ztrain.loss_sum\" is missing or not true"),
            std::string::npos);

  // A different model, a tensor the checkpoint lacks, a missing shard.
  Pieces wrong;
  wrong.add("params", "a", 0, 20);
  wrong.pieces[0].shape = {5, 4};
  wrong.bind();
  EXPECT_NE(error_of([&] { reader.load({&wrong}); }).find("belongs to a different model"), std::string::npos);
  wrong.pieces[0].tensor = "c";
  EXPECT_NE(error_of([&] { reader.load({&wrong}); }).find("no params of \"c\""), std::string::npos);
  auto config = tiny_config();
  config.n_layer = 2;
  EXPECT_NE(error_of([&] {
              CheckpointReader r(dir(), config);
            }).find("the model config \"n_layer\" differs: the checkpoint has 1, this run 2; resume with"),
            std::string::npos);
  config = tiny_config();  // every resolved setting counts, not only the ones that change shapes
  config.norm_eps = 1e-3f;
  EXPECT_NE(error_of([&] {
              CheckpointReader r(dir(), config);
            }).find("\"layer_norm_epsilon\" differs: the checkpoint has 1e-05, this run 0.001"),
            std::string::npos);
  EXPECT_NE(CheckpointReader(dir(), config, /*allow_model_changes=*/true).model_change().find("layer_norm_epsilon"),
            std::string::npos);
  fs::remove(fs::path(dir()) / "state-00001-of-00002.safetensors");
  nlohmann::json sums;
  std::ifstream(fs::path(dir()) / "checksums.json") >> sums;
  sums["files"].erase("state-00001-of-00002.safetensors");
  std::ofstream(fs::path(dir()) / "checksums.json") << sums.dump();
  EXPECT_NE(error_of([&] { CheckpointReader r(dir(), tiny_config()); }).find("a shard is missing"), std::string::npos);
}

TEST_F(CheckpointTest, OneShardIsAnHfModelFolder) {
  std::vector<Pieces> ranks(1);
  for (const char* slot : {"params", "exp_avg"}) {
    ranks[0].add(slot, "a", 0, 20);
    ranks[0].add(slot, "b", 0, 7);
  }
  ranks[0].fill_expected(), ranks[0].bind();
  save(ranks);
  SafetensorsFile model((fs::path(dir()) / "model.safetensors").string());
  ASSERT_EQ(model.entries().size(), 2u);
  ASSERT_TRUE(model.find("a") && model.find("a")->shape == (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(model.metadata().at("format"), "pt");
  SafetensorsFile state((fs::path(dir()) / "state-00000-of-00001.safetensors").string());
  EXPECT_EQ(state.entries().size(), 2u);  // exp_avg of a and b; parameters went to model.safetensors
  Pieces back;
  back.add("params", "a", 5, 10);
  back.add("exp_avg", "b", 0, 7);
  back.bind();
  CheckpointReader(dir(), tiny_config()).load({&back});
  for (size_t i = 0; i < back.pieces.size(); ++i)
    for (int64_t k = 0; k < back.pieces[i].slice.count; ++k)
      ASSERT_EQ(back.store[i][k], Pieces::expected(back.pieces[i], k));
  // A checkpoint of the older format is named as such (its checksums.json listed the file).
  const float x = 1;
  safetensors_write((fs::path(dir()) / "optimizer.safetensors").string(), {{"x", {1}, &x}}, DType::f32,
                    {{"save_id", "save-1"}});
  nlohmann::json sums;
  std::ifstream(fs::path(dir()) / "checksums.json") >> sums;
  auto [h, size] = checkpoint_file_digest((fs::path(dir()) / "optimizer.safetensors").string());
  sums["files"]["optimizer.safetensors"] = {{"xxh3_tree", h}, {"bytes", size}};
  std::ofstream(fs::path(dir()) / "checksums.json") << sums.dump();
  EXPECT_NE(error_of([&] { CheckpointReader r(dir(), tiny_config()); }).find("older ztrain"), std::string::npos);
}

// Phi-3's parameters as a model holds them: q, k, v (and gate, up) back to back in one buffer.
// A one-shard checkpoint's model.safetensors stores them fused under transformers' names
// (qkv_proj, gate_up_proj), as the exported folder does; the reader splits them again, and a
// checkpoint of the older layout (the parts under their own names) still loads.
struct Phi3Params final : Stateful {
  std::vector<StatePiece> pieces;
  std::vector<float> flat;
  Phi3Params(int64_t begin, int64_t count) {  // elements [begin, begin + count) of each tensor
    const std::vector<std::pair<std::string, std::vector<int64_t>>> table = {
        {"model.layers.0.self_attn.q_proj.weight", {8, 8}}, {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
        {"model.layers.0.self_attn.v_proj.weight", {4, 8}}, {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
        {"model.layers.0.mlp.gate_proj.weight", {6, 8}},    {"model.layers.0.mlp.up_proj.weight", {6, 8}}};
    int64_t n = 0;
    for (const auto& [name, shape] : table) n += std::min(count, shape[0] * shape[1] - begin);
    flat.assign(size_t(n), -1.f);
    int64_t at = 0;
    for (const auto& [name, shape] : table) {
      const int64_t c = std::min(count, shape[0] * shape[1] - begin);
      pieces.push_back({name, shape, "params", {begin, c}, flat.data() + at});
      at += c;
    }
  }
  void fill() { std::iota(flat.begin(), flat.end(), 0.25f); }
  void save_state(StateWriter& w) const override {
    for (const StatePiece& p : pieces) w.put_tensor(p);
  }
  void load_state(StateReader& r) override {
    for (const StatePiece& p : pieces) r.get_tensor(p);
  }
};

ModelConfig phi3_config() {
  return config_from_json({{"model_type", "phi3"},
                           {"vocab_size", 16},
                           {"hidden_size", 8},
                           {"num_hidden_layers", 1},
                           {"num_attention_heads", 2},
                           {"num_key_value_heads", 1},
                           {"intermediate_size", 6},
                           {"max_position_embeddings", 8}},
                          "test");
}

TEST_F(CheckpointTest, Phi3StoresFusedTensorsAndReadsBothLayouts) {
  const ModelConfig cfg = phi3_config();
  Phi3Params saved(0, 1 << 20);
  saved.fill();
  auto save_with = [&](const ModelConfig& c) {
    DataCursor cursor(8, 16, true, 3);
    RngState rng(42);
    Counters counters;
    checkpoint_save({out_.string(), 3, {0, 1}, true, {}, "save-1", {}}, c, {&saved, &cursor, &rng, &counters});
  };
  save_with(cfg);
  const std::string file = (fs::path(dir()) / "model.safetensors").string();
  {
    SafetensorsFile model(file);
    std::vector<std::string> names;
    for (const StEntry& e : model.entries()) names.push_back(e.name);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"model.layers.0.mlp.gate_up_proj.weight",
                                               "model.layers.0.self_attn.o_proj.weight",
                                               "model.layers.0.self_attn.qkv_proj.weight"}));
    ASSERT_TRUE(model.find("model.layers.0.self_attn.qkv_proj.weight"));
    EXPECT_EQ(model.find("model.layers.0.self_attn.qkv_proj.weight")->shape, (std::vector<int64_t>{16, 8}));
    std::vector<float> qkv(128);
    model.read_f32(*model.find("model.layers.0.self_attn.qkv_proj.weight"), qkv.data());
    EXPECT_TRUE(std::equal(qkv.begin(), qkv.end(), saved.flat.begin()));  // q, then k, then v
  }
  // Slices of every part read back from the fused tensors; then the same from the older layout,
  // written as before (a config without fused tensors) and read with Phi-3's.
  for (const char* layout : {"fused", "parts"}) {
    if (std::string(layout) == "parts") {
      fs::remove_all(dir());
      save_with(tiny_config());
      fs::remove(fs::path(dir()) / "config.json");
      fs::copy_file(fs::path(dir()) / ".." / "cfg.json", fs::path(dir()) / "config.json");
    }
    Phi3Params back(5, 20);
    CheckpointReader(dir(), cfg, false, "save-1").load({&back});
    for (size_t i = 0; i < back.pieces.size(); ++i)
      for (int64_t k = 0; k < back.pieces[i].slice.count; ++k)
        ASSERT_EQ(back.pieces[i].data[k], saved.pieces[i].data[5 + k]) << layout << " " << back.pieces[i].tensor;
    if (std::string(layout) == "fused") fs::copy_file(fs::path(dir()) / "config.json", out_ / "cfg.json");
  }
}

// Two runs writing one folder at once once produced a checkpoint of one run's model and the
// other's optimizer that passed its checksums (the chief hashed whatever files were there).
// Every file records its save's id; a folder mixing two saves is rejected, naming the file,
// and `latest` skips it.
TEST_F(CheckpointTest, MixedSavesAreRejected) {
  std::vector<Pieces> ranks(1);
  for (const char* slot : {"params", "exp_avg"}) {
    ranks[0].add(slot, "a", 0, 20);
    ranks[0].add(slot, "b", 0, 7);
  }
  ranks[0].fill_expected(), ranks[0].bind();
  save(ranks, "0000000000000b0b");
  fs::rename(dir(), out_ / "other");
  save(ranks, "0000000000000a0a");
  CheckpointReader(dir(), tiny_config());  // intact
  // The other save's state file, with the checksum its chief would have computed over it.
  const std::string state = "state-00000-of-00001.safetensors";
  fs::copy_file(out_ / "other" / state, fs::path(dir()) / state, fs::copy_options::overwrite_existing);
  nlohmann::json sums;
  std::ifstream(fs::path(dir()) / "checksums.json") >> sums;
  auto [h, size] = checkpoint_file_digest((fs::path(dir()) / state).string());
  sums["files"][state] = {{"xxh3_tree", h}, {"bytes", size}};
  std::ofstream(fs::path(dir()) / "checksums.json") << sums.dump();
  const std::string err = error_of([&] { CheckpointReader r(dir(), tiny_config()); });
  EXPECT_NE(err.find("mixes files of two saves: \"" + state +
                     "\" has save id 0000000000000b0b but checksums.json "
                     "has 0000000000000a0a"),
            std::string::npos)
      << err;
  EXPECT_EQ(checkpoint_find_latest(out_.string()), "");
}

// Issue 21 item 13: `latest` fell back past a missing or truncated file but not past a stray extra
// shard, which the reader then loaded beside the listed ones. Any file checksums.json does not list
// makes the folder incomplete: an Error naming it when asked for directly, skipped by `latest`.
TEST_F(CheckpointTest, UnlistedFilesMakeTheFolderIncomplete) {
  std::vector<Pieces> ranks(1);
  for (const char* slot : {"params", "exp_avg"}) ranks[0].add(slot, "a", 0, 20);
  ranks[0].fill_expected(), ranks[0].bind();
  save(ranks);  // checkpoint-3: the older intact one `latest` falls back to
  DataCursor cursor(8, 16, true, 5);
  RngState rng(42);
  Counters counters;
  counters.step = 5;
  checkpoint_save({out_.string(), 5, {0, 1}, true, {}, "save-2", {}}, tiny_config(),
                  {&ranks[0], &cursor, &rng, &counters});
  const fs::path newest = out_ / "checkpoint-5";
  ASSERT_EQ(checkpoint_find_latest(out_.string()), newest.string());
  const fs::path state = newest / "state-00000-of-00001.safetensors";
  for (const char* stray : {"state-00001-of-00002.safetensors", "model-00002.safetensors", ".hidden", "sub"}) {
    const fs::path p = newest / stray;
    if (std::string(stray) == "sub")
      fs::create_directory(p);
    else
      fs::copy_file(state, p);
    const std::string err = error_of([&] { CheckpointReader r(newest.string(), tiny_config()); });
    EXPECT_NE(err.find(str_cat("checkpoint-5 is incomplete: \"", stray, "\" is not listed in checksums.json")),
              std::string::npos)
        << err;
    EXPECT_EQ(checkpoint_find_latest(out_.string()), dir()) << stray;
    fs::remove_all(p);
  }
  EXPECT_EQ(checkpoint_find_latest(out_.string()), newest.string());  // intact again
  // A listed file that is gone is still named as missing, and `latest` falls back past it too.
  fs::remove(state);
  EXPECT_NE(error_of([&] { CheckpointReader r(newest.string(), tiny_config()); }).find("is missing"),
            std::string::npos);
  EXPECT_EQ(checkpoint_find_latest(out_.string()), dir());
}

// The optimizer saves every slot it declares by tensor piece, and loads into another layout
// of the same tensors (a state offset per piece, as ZeRO's shards have).
TEST_F(CheckpointTest, OptimizerStateReshards) {
  const int64_t n = 27;  // a (20) then b (7), flat
  auto opt = optim::make_optimizer("adamw_torch", {}, n);
  opt->set_state_spans({{"a", {4, 5}, 0, 20, 0}, {"b", {7}, 0, 7, 20}});
  std::vector<float> p(n), g(n);
  std::iota(p.begin(), p.end(), 1.0f);
  std::iota(g.begin(), g.end(), -3.0f);
  opt->step(optim::flat_pieces(p.data(), g.data(), {{0, 20, true}, {20, 7, false}}), 1e-2);
  opt->step(optim::flat_pieces(p.data(), g.data(), {{0, 20, true}, {20, 7, false}}), 1e-2);
  DataCursor cursor(8, 16, true, 3);
  RngState rng(42);
  Counters counters;
  checkpoint_save({out_.string(), 3, {0, 1}, true, {}, "save-1", {}}, tiny_config(),
                  {opt.get(), &cursor, &rng, &counters});

  // "Rank 1 of 2": b first in its state, then the second half of a.
  auto mine = optim::make_optimizer("adamw", {}, 17);
  mine->set_state_spans({{"b", {7}, 0, 7, 0}, {"a", {4, 5}, 10, 10, 7}});
  CheckpointReader(dir(), tiny_config()).load({mine.get()});
  EXPECT_EQ(mine->steps(), 2);
  for (const std::string& slot : opt->slot_names()) {
    for (int k = 0; k < 7; ++k) ASSERT_EQ(mine->slot(slot)[k], opt->slot(slot)[20 + k]) << slot;
    for (int k = 0; k < 10; ++k) ASSERT_EQ(mine->slot(slot)[7 + k], opt->slot(slot)[10 + k]) << slot;
  }
  EXPECT_NE(error_of([] { optim::make_optimizer("sgdd", {}, 1); }).find("--optim \"sgdd\" is not supported; did you mean sgd?"),
            std::string::npos);
}

}  // namespace
}  // namespace zt
