// checkpoint.cpp: see checkpoint.h.
#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
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
  safetensors_write(path.string(), t, "F32", {{"format", "ztrain-adamw"}, {"step", std::to_string(opt.steps())}});
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

void checkpoint_save(const std::string& output_dir, int64_t step, const Transformer& model,
                     const optim::AdamW& opt, const nlohmann::json& trainer_state) {
  fs::path final_dir = fs::path(output_dir) / ("checkpoint-" + std::to_string(step));
  fs::path tmp = final_dir;
  tmp += ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  model.save_hf(tmp.string(), "F32");
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

nlohmann::json checkpoint_load(const std::string& dir, Transformer& model, optim::AdamW& opt) {
  checkpoint_verify(dir);
  fs::path d(dir);
  ModelConfig saved = config_from_file((d / "config.json").string());
  ZT_CHECK(saved.arch == model.config().arch && saved.n_layer == model.config().n_layer &&
               saved.n_embd == model.config().n_embd && saved.vocab_size == model.config().vocab_size,
           dir, ": the checkpoint's config.json describes a different model than this run's");
  model.load_safetensors((d / "model.safetensors").string());
  load_optimizer(d / "optimizer.safetensors", model, opt);
  return checkpoint_read_trainer_state((d / "trainer_state.json").string());
}

}  // namespace zt
