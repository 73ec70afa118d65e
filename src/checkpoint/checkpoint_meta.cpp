// checkpoint_meta.cpp: see checkpoint_meta.h.
#include "checkpoint/checkpoint_meta.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
  ZT_CHECK(sums.is_object() && !sums.empty(), dir, "/", kChecksums, " is damaged");
  for (auto it = sums.begin(); it != sums.end(); ++it) {
    ZT_CHECK(it.value().is_object() && it.value().contains("hash64") && it.value().contains("bytes"), dir, "/",
             kChecksums, " is damaged");
    fs::path p = d / it.key();
    ZT_CHECK(fs::exists(p), "checkpoint ", dir, " is damaged: ", it.key(), " is missing");
    auto [h, size] = checkpoint_file_digest(p.string());
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

nlohmann::json checkpoint_read_trainer_state(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

}  // namespace zt
