// checkpoint.cpp: see checkpoint.h.
#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

void fsync_path(const fs::path& p, bool dir) {
  int fd = ::open(p.c_str(), dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void save_optimizer(const fs::path& path, const Transformer& model, const optim::AdamW& opt) {
  std::vector<StTensorOut> t;
  for (const ParamInfo& p : model.params().list()) {
    t.push_back({"exp_avg." + p.name, p.shape, opt.exp_avg() + p.offset});
    t.push_back({"exp_avg_sq." + p.name, p.shape, opt.exp_avg_sq() + p.offset});
  }
  safetensors_write(path.string(), t, DType::f32, {{"format", "ztrain-adamw"}, {"step", std::to_string(opt.steps())}});
}

void load_optimizer(const fs::path& path, const Transformer& model, optim::AdamW& opt) {
  SafetensorsFile f(path.string());
  for (const ParamInfo& p : model.params().list())
    for (auto [prefix, dst] : {std::pair{"exp_avg.", opt.exp_avg()}, std::pair{"exp_avg_sq.", opt.exp_avg_sq()}}) {
      const StEntry* e = f.find(prefix + p.name);
      ZT_CHECK(e && e->shape == p.shape && e->dtype == "F32", path.string(), ": optimizer state for \"", p.name,
               "\" is missing or has the wrong shape; the checkpoint belongs to a different model");
      f.read_f32(*e, dst + p.offset);
    }
  auto it = f.metadata().find("step");
  int64_t steps = -1;
  const std::string& v = it == f.metadata().end() ? std::string() : it->second;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), steps);
  ZT_CHECK(!v.empty() && ec == std::errc() && end == v.data() + v.size() && steps >= 0, path.string(),
           ": optimizer metadata \"step\" is missing or not a non-negative integer; the checkpoint is damaged");
  opt.set_steps(steps);
}

}  // namespace

void checkpoint_save(const std::string& output_dir, int64_t step, const Transformer& model, const optim::AdamW& opt,
                     const nlohmann::json& trainer_state) {
  fs::path final_dir = fs::path(output_dir) / ("checkpoint-" + std::to_string(step));
  fs::path tmp = final_dir;
  tmp += ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  hf_save_model(model, tmp.string(), DType::f32);
  save_optimizer(tmp / "optimizer.safetensors", model, opt);
  write_file_atomic((tmp / "trainer_state.json").string(), trainer_state.dump(2) + "\n");
  nlohmann::json sums = nlohmann::json::object();
  for (const char* name : {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"}) {
    auto [h, size] = checkpoint_file_digest((tmp / name).string());
    sums[name] = {{"hash64", h}, {"bytes", size}};
  }
  write_file_atomic((tmp / "checksums.json").string(), sums.dump(2) + "\n");
  fsync_path(tmp, true);
  fs::remove_all(final_dir);  // a same-step checkpoint from an earlier, abandoned run
  fs::rename(tmp, final_dir);
  fsync_path(output_dir, true);
}

namespace {

constexpr const char* kShardPrefix = "zero_shard-";

// Loads every zero_shard-* file of dir into the flat parameters and moments; checks that
// the shards are all there and cover every element exactly once.
void load_sharded(const fs::path& d, Transformer& model, optim::AdamW& opt) {
  std::vector<fs::path> files;
  for (auto& e : fs::directory_iterator(d))
    if (e.path().filename().string().rfind(kShardPrefix, 0) == 0) files.push_back(e.path());
  ZT_CHECK(!files.empty(), d.string(), ": no model.safetensors and no ", kShardPrefix,
           "*.safetensors; not a ztrain checkpoint");
  std::sort(files.begin(), files.end());
  int64_t covered[3] = {0, 0, 0};
  int64_t steps = -1;
  for (const fs::path& path : files) {
    SafetensorsFile f(path.string());
    auto meta = [&](const char* k) {
      auto it = f.metadata().find(k);
      return it == f.metadata().end() ? std::string() : it->second;
    };
    ZT_CHECK(meta("format") == "ztrain-zero-shard", path.string(), ": not a ztrain shard file");
    ZT_CHECK(std::to_string(files.size()) == meta("num_shards"), d.string(), " has ", files.size(), " shard files but ",
             path.filename().string(), " says ", meta("num_shards"), "; a shard is missing");
    const std::string st = meta("step");
    auto [end, ec] = std::from_chars(st.data(), st.data() + st.size(), steps);
    ZT_CHECK(!st.empty() && ec == std::errc() && end == st.data() + st.size() && steps >= 0, path.string(),
             ": shard metadata \"step\" is missing or not a non-negative integer; the checkpoint is damaged");
    for (const StEntry& e : f.entries()) {
      const size_t a = e.name.find('.'), b = e.name.rfind('.');
      ZT_CHECK(a != std::string::npos && b > a, path.string(), ": unexpected tensor name \"", e.name, "\"");
      const std::string kind = e.name.substr(0, a), name = e.name.substr(a + 1, b - a - 1);
      const int k = kind == "params" ? 0 : kind == "exp_avg" ? 1 : kind == "exp_avg_sq" ? 2 : -1;
      const ParamInfo* p = model.params().find(name);
      int64_t begin = -1;
      std::from_chars(e.name.data() + b + 1, e.name.data() + e.name.size(), begin);
      ZT_CHECK(k >= 0 && p && begin >= 0 && e.shape.size() == 1 && begin + e.numel() <= p->numel, path.string(),
               ": tensor \"", e.name, "\" does not fit this model; the checkpoint belongs to a different model");
      float* dst = k == 0 ? model.flat_params().as<float>() : k == 1 ? opt.exp_avg() : opt.exp_avg_sq();
      f.read_f32(e, dst + p->offset + begin);
      covered[k] += e.numel();
    }
  }
  for (int k = 0; k < 3; ++k)
    ZT_CHECK(covered[k] == model.num_params(), d.string(), ": the shards hold ", covered[k], " of ", model.num_params(),
             " values of ",
             k == 0   ? "params"
             : k == 1 ? "exp_avg"
                      : "exp_avg_sq",
             "; the checkpoint is incomplete");
  opt.set_steps(steps);
}

}  // namespace

nlohmann::json checkpoint_load(const std::string& dir, Transformer& model, optim::AdamW& opt) {
  checkpoint_verify(dir);
  fs::path d(dir);
  ModelConfig saved = config_from_file((d / "config.json").string());
  ZT_CHECK(saved.arch == model.config().arch && saved.n_layer == model.config().n_layer &&
               saved.n_embd == model.config().n_embd && saved.vocab_size == model.config().vocab_size,
           dir, ": the checkpoint's config.json describes a different model than this run's");
  if (fs::exists(d / "model.safetensors")) {
    hf_load_weights(model, (d / "model.safetensors").string());
    load_optimizer(d / "optimizer.safetensors", model, opt);
  } else {
    load_sharded(d, model, opt);
  }
  return checkpoint_read_trainer_state((d / "trainer_state.json").string());
}

std::string checkpoint_tmp_dir(const std::string& output_dir, int64_t step) {
  return (fs::path(output_dir) / ("checkpoint-" + std::to_string(step) + ".tmp")).string();
}

void checkpoint_sharded_begin(const std::string& output_dir, int64_t step) {
  const std::string tmp = checkpoint_tmp_dir(output_dir, step);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
}

void checkpoint_write_shard(const std::string& output_dir, int64_t step, const Transformer& model, int shard,
                            int num_shards, const std::vector<CheckpointPiece>& pieces, int64_t opt_steps) {
  const auto& list = model.params().list();
  std::vector<StTensorOut> t;
  for (const CheckpointPiece& p : pieces) {
    const std::string suffix = "." + list[p.param].name + "." + std::to_string(p.begin);
    t.push_back({"params" + suffix, {p.count}, p.params});
    t.push_back({"exp_avg" + suffix, {p.count}, p.exp_avg});
    t.push_back({"exp_avg_sq" + suffix, {p.count}, p.exp_avg_sq});
  }
  char name[64];
  std::snprintf(name, sizeof name, "%s%05d-of-%05d.safetensors", kShardPrefix, shard, num_shards);
  const fs::path path = fs::path(checkpoint_tmp_dir(output_dir, step)) / name;
  safetensors_write(path.string(), t, DType::f32,
                    {{"format", "ztrain-zero-shard"},
                     {"step", std::to_string(opt_steps)},
                     {"shard", std::to_string(shard)},
                     {"num_shards", std::to_string(num_shards)}});
  fsync_path(path, false);
}

void checkpoint_sharded_finish(const std::string& output_dir, int64_t step, const Transformer& model,
                               const nlohmann::json& trainer_state) {
  const fs::path tmp = checkpoint_tmp_dir(output_dir, step);
  const fs::path final_dir = fs::path(output_dir) / ("checkpoint-" + std::to_string(step));
  write_file_atomic((tmp / "config.json").string(), config_to_json(model.config(), "float32").dump(2) + "\n");
  write_file_atomic((tmp / "trainer_state.json").string(), trainer_state.dump(2) + "\n");
  nlohmann::json sums = nlohmann::json::object();
  for (auto& e : fs::directory_iterator(tmp)) {
    const std::string name = e.path().filename().string();
    if (name == "checksums.json") continue;
    auto [h, size] = checkpoint_file_digest(e.path().string());
    sums[name] = {{"hash64", h}, {"bytes", size}};
  }
  write_file_atomic((tmp / "checksums.json").string(), sums.dump(2) + "\n");
  fsync_path(tmp, true);
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(output_dir, true);
}

}  // namespace zt
