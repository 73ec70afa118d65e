// checkpoint.cpp: see checkpoint.h.
#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/hash.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kChecksums = "checksums.json";

// Hash and size of a file through a read-only mapping.
std::pair<uint64_t, uint64_t> file_digest(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  ZT_CHECK(fd >= 0, "cannot open ", p.string(), ": ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  uint64_t size = uint64_t(st.st_size), h = hash64(nullptr, 0);
  if (size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw Error(str_cat("cannot map ", p.string()));
    }
    h = hash64(m, size);
    ::munmap(m, size);
  }
  ::close(fd);
  return {h, size};
}

void fsync_path(const fs::path& p, bool dir) {
  int fd = ::open(p.c_str(), dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

int64_t step_of(const fs::path& p) {
  std::string n = p.filename().string();
  if (n.rfind("checkpoint-", 0) != 0) return -1;
  std::string num = n.substr(11);
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(num);
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, fs::path>> r;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return r;
  for (auto& e : fs::directory_iterator(output_dir))
    if (e.is_directory() && step_of(e.path()) >= 0) r.push_back({step_of(e.path()), e.path()});
  std::sort(r.begin(), r.end());
  return r;
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
  ZT_CHECK(it != f.metadata().end(), path.string(), ": optimizer metadata lacks \"step\"");
  opt.set_steps(std::stoll(it->second));
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
    auto [h, size] = file_digest(tmp / name);
    sums[name] = {{"hash64", h}, {"bytes", size}};
  }
  write_file_atomic((tmp / kChecksums).string(), sums.dump(2) + "\n");
  fsync_path(tmp, true);
  fs::remove_all(final_dir);  // a same-step checkpoint from an earlier, abandoned run
  fs::rename(tmp, final_dir);
  fsync_path(output_dir, true);
}

void checkpoint_verify(const std::string& dir) {
  fs::path d(dir);
  std::ifstream f(d / kChecksums);
  ZT_CHECK(f.good(), dir, ": not a complete checkpoint (", kChecksums, " is missing)");
  nlohmann::json sums;
  try {
    sums = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception&) {
    throw Error(str_cat(dir, "/", kChecksums, " is damaged (not valid JSON)"));
  }
  ZT_CHECK(sums.is_object() && !sums.empty(), dir, "/", kChecksums, " is damaged");
  for (auto it = sums.begin(); it != sums.end(); ++it) {
    ZT_CHECK(it.value().is_object() && it.value().contains("hash64") && it.value().contains("bytes"), dir, "/",
             kChecksums, " is damaged");
    fs::path p = d / it.key();
    ZT_CHECK(fs::exists(p), "checkpoint ", dir, " is damaged: ", it.key(), " is missing");
    auto [h, size] = file_digest(p);
    ZT_CHECK(size == it.value()["bytes"].get<uint64_t>(), "checkpoint ", dir, " is damaged: ", it.key(), " has ", size,
             " bytes, expected ", it.value()["bytes"].get<uint64_t>());
    ZT_CHECK(h == it.value()["hash64"].get<uint64_t>(), "checkpoint ", dir, " is damaged: ", it.key(),
             " fails its checksum");
  }
}

std::string checkpoint_find_latest(const std::string& output_dir) {
  auto all = list_checkpoints(output_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      checkpoint_verify(it->second.string());
      return it->second.string();
    } catch (const Error& e) {
      std::fprintf(stderr, "ztrain: warning: skipping %s\n", e.what());
    }
  }
  return "";
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
  std::ifstream f(d / "trainer_state.json");
  return nlohmann::json::parse(f);
}

void checkpoint_prune(const std::string& output_dir, int64_t keep) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(output_dir, ec)) {
    std::string n = e.path().filename().string();
    if (n.rfind("checkpoint-", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".tmp") fs::remove_all(e.path());
  }
  if (keep <= 0) return;
  auto all = list_checkpoints(output_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) fs::remove_all(all[i].second);
}

}  // namespace zt
