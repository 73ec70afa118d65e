// checkpoint_meta.cpp: see checkpoint_meta.h.
#include "checkpoint/checkpoint_meta.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/hash.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kChecksums = "checksums.json";

// N of a checkpoint-N folder; -1 for any other name (including an N too large for int64).
int64_t step_of(const fs::path& p) {
  std::string n = p.filename().string();
  if (n.rfind("checkpoint-", 0) != 0) return -1;
  std::string num = n.substr(11);
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) return -1;
  int64_t step = -1;
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), step);
  return ec == std::errc() && end == num.data() + num.size() ? step : -1;
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

}  // namespace

// Hash and size of a file through a read-only mapping.
std::pair<uint64_t, uint64_t> checkpoint_file_digest(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  uint64_t size = uint64_t(st.st_size), h = hash64(nullptr, 0);
  if (size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw Error(str_cat("cannot map ", path));
    }
    h = hash64(m, size);
    ::munmap(m, size);
  }
  ::close(fd);
  return {h, size};
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
  ZT_CHECK(sums.is_object() && !sums.empty(), dir, "/", kChecksums, " is damaged (expected an object of files)");
  for (auto it = sums.begin(); it != sums.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    // Entries name files of this folder, each with two unsigned integers.
    ZT_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos, dir, "/", kChecksums,
             " is damaged: ", quote(name), " is not a file name");
    ZT_CHECK(v.is_object() && v.contains("hash64") && v["hash64"].is_number_unsigned() && v.contains("bytes") &&
                 v["bytes"].is_number_unsigned(),
             dir, "/", kChecksums, " is damaged: the entry for ", quote(name),
             " needs unsigned integers \"hash64\" and \"bytes\"");
    fs::path p = d / name;
    std::error_code ec;
    ZT_CHECK(fs::is_regular_file(p, ec), "checkpoint ", dir, " is damaged: ", quote(name), " is missing");
    auto [h, size] = checkpoint_file_digest(p.string());
    const uint64_t want_size = v["bytes"].get<uint64_t>(), want_hash = v["hash64"].get<uint64_t>();
    ZT_CHECK(size == want_size, "checkpoint ", dir, " is damaged: ", quote(name), " has ", size, " bytes, expected ",
             want_size);
    ZT_CHECK(h == want_hash, "checkpoint ", dir, " is damaged: ", quote(name), " fails its checksum");
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

namespace {

// Checks that state[key] (state[group][key] with a group) exists and has the type the trainer
// reads; the message names the file and the key.
void state_field(const nlohmann::json& s, const std::string& path, const char* group, const char* key,
                 bool (nlohmann::json::*is_type)() const noexcept, const char* type) {
  const nlohmann::json& obj = group ? s[group] : s;
  std::string name = group ? str_cat(group, ".", key) : std::string(key);
  ZT_CHECK(obj.contains(key) && (obj[key].*is_type)(), path, ": \"", name, "\" is missing or not ", type,
           "; the checkpoint's trainer_state.json is damaged or not from ztrain");
}

}  // namespace

nlohmann::json checkpoint_read_trainer_state(const std::string& path) {
  std::ifstream f(path);
  ZT_CHECK(f.good(), "cannot open ", path, "; a checkpoint folder needs its trainer_state.json");
  nlohmann::json s;
  try {
    s = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception&) {
    throw Error(str_cat(path, ": not valid JSON; the checkpoint's trainer_state.json is damaged"));
  }
  using J = nlohmann::json;
  ZT_CHECK(s.is_object(), path, ": not a JSON object; the checkpoint's trainer_state.json is damaged");
  state_field(s, path, nullptr, "global_step", &J::is_number_unsigned, "a non-negative integer");
  state_field(s, path, nullptr, "log_history", &J::is_array, "an array");
  state_field(s, path, nullptr, "ztrain", &J::is_object, "an object (ztrain's resume state)");
  state_field(s, path, "ztrain", "loss_sum", &J::is_number, "a number");
  state_field(s, path, "ztrain", "seed", &J::is_number_integer, "an integer");
  state_field(s, path, "ztrain", "shuffle", &J::is_boolean, "true or false");
  state_field(s, path, "ztrain", "sequences_per_step", &J::is_number_unsigned, "a non-negative integer");
  state_field(s, path, "ztrain", "sequence_length", &J::is_number_unsigned, "a non-negative integer");
  const J& zs = s["ztrain"];
  ZT_CHECK(s["global_step"].get<uint64_t>() <= uint64_t(INT64_MAX) &&
               (!zs["seed"].is_number_unsigned() || zs["seed"].get<uint64_t>() <= uint64_t(INT64_MAX)) &&
               zs["sequences_per_step"].get<uint64_t>() <= uint64_t(INT64_MAX) &&
               zs["sequence_length"].get<uint64_t>() <= uint64_t(INT32_MAX),
           path, ": a step, seed or length is out of range; the checkpoint's trainer_state.json is damaged");
  // The loss plot reads step and loss of every log_history entry that has a loss.
  for (const J& e : s["log_history"]) {
    ZT_CHECK(e.is_object(), path, ": log_history holds a non-object; the checkpoint's trainer_state.json is damaged");
    for (const char* k : {"loss", "eval_loss"})
      ZT_CHECK(!e.contains(k) || (e[k].is_number() && e.contains("step") && e["step"].is_number()), path,
               ": a log_history entry has a \"", k,
               "\" that is not a number or no numeric \"step\"; the checkpoint's "
               "trainer_state.json is damaged");
  }
  return s;
}

}  // namespace zt
