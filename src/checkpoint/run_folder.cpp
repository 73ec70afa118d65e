// run_folder.cpp: see run_folder.h.
#include "checkpoint/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/hash.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kRunFile = "run.json";

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

bool is_tmp_checkpoint(const std::string& n) {
  return n.rfind("checkpoint-", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".tmp";
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return f.good() ? nlohmann::json::parse(f, nullptr, false) : nlohmann::json(nlohmann::json::value_t::discarded);
}

struct Listed {
  fs::path path;
  CheckpointRef ref;
  bool readable = false;  // trainer_state.json parsed with a global_step
  bool foreign = false;   // outside the current attempt's lineage (set by ordered_checkpoints)
};

// Whether `inner` is `outer` or lies inside it, both resolved (links, "..") as far as they exist.
bool path_within(const fs::path& inner, const fs::path& outer) {
  std::error_code ec;
  const fs::path i = fs::weakly_canonical(fs::absolute(inner, ec), ec), o = fs::weakly_canonical(outer, ec);
  auto ii = i.begin();
  for (auto oi = o.begin(); oi != o.end(); ++oi, ++ii)
    if (ii == i.end() || *ii != *oi) return false;
  return true;
}

// Every checkpoint-N folder with what its trainer_state.json says about the run that wrote it.
std::vector<Listed> list_checkpoints(const std::string& output_dir) {
  std::vector<Listed> r;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return r;
  for (auto& e : fs::directory_iterator(output_dir, ec)) {
    if (!e.is_directory() || step_of(e.path()) < 0) continue;
    Listed l{e.path(), {"", 0, step_of(e.path())}, false};
    const nlohmann::json s = read_json(e.path() / "trainer_state.json");
    if (s.is_object() && s.contains("global_step") && s["global_step"].is_number_unsigned() &&
        s["global_step"].get<uint64_t>() <= uint64_t(INT64_MAX)) {
      l.readable = true;
      l.ref.step = s["global_step"].get<int64_t>();
      const nlohmann::json* z = s.contains("ztrain") && s["ztrain"].is_object() ? &s["ztrain"] : nullptr;
      if (z && z->contains("run_id") && (*z)["run_id"].is_string()) l.ref.run_id = (*z)["run_id"].get<std::string>();
      if (z && z->contains("attempt") && (*z)["attempt"].is_number_integer())
        l.ref.attempt = (*z)["attempt"].get<int64_t>();
    }
    r.push_back(std::move(l));
  }
  return r;
}

// The lineage of the record's current attempt: (attempt, last step that belongs to it), walked
// through each attempt's parent. Empty without a record.
std::vector<std::pair<int64_t, int64_t>> lineage_of(const RunRecord& rec) {
  std::vector<std::pair<int64_t, int64_t>> lineage;
  if (rec.run_id.empty()) return lineage;
  int64_t a = rec.attempt, last = INT64_MAX;
  while (lineage.size() <= rec.parents.size()) {  // a damaged record cannot make it loop
    lineage.push_back({a, last});
    auto it = rec.parents.find(a);
    if (it == rec.parents.end() || !it->second) break;
    a = it->second->attempt;
    last = it->second->step;
  }
  return lineage;
}

// The index in `lineage` of the attempt a save belongs to; lineage.size() when none.
size_t lineage_group(const RunRecord& rec, const std::vector<std::pair<int64_t, int64_t>>& lineage,
                     const CheckpointRef& save) {
  for (size_t i = 0; i < lineage.size(); ++i)
    if (save.run_id == rec.run_id && save.attempt == lineage[i].first && save.step <= lineage[i].second) return i;
  return lineage.size();
}

// The checkpoints, most preferred first (run_folder.h). The lineage of the current attempt is
// a list of (attempt, last step that belongs to it), walked through each attempt's parent.
std::vector<Listed> ordered_checkpoints(const std::string& output_dir) {
  std::vector<Listed> all = list_checkpoints(output_dir);
  const RunRecord rec = run_record_read(output_dir);
  const std::vector<std::pair<int64_t, int64_t>> lineage = lineage_of(rec);
  auto group = [&](const Listed& l) {
    if (!l.readable) return lineage.size() + 1;  // damaged: last for latest, first to prune
    return lineage_group(rec, lineage, l.ref);
  };
  auto key = [&](const Listed& l) { return std::make_tuple(group(l), -l.ref.attempt, -l.ref.step, l.path.string()); };
  std::sort(all.begin(), all.end(), [&](const Listed& x, const Listed& y) { return key(x) < key(y); });
  for (Listed& l : all) l.foreign = !rec.run_id.empty() && group(l) >= lineage.size();
  return all;
}

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

std::string random_id() {
  std::random_device rd;
  return hex64((uint64_t(rd()) << 32) ^ uint64_t(rd()));
}

OutputDirLock::OutputDirLock(const std::string& output_dir, double wait_s) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  ZT_CHECK(!ec, "cannot create --output_dir ", output_dir, ": ", ec.message());
  const std::string path = (fs::path(output_dir) / kFileName).string();
  // O_NOFOLLOW: a symbolic link planted at the lock's name would make ztrain truncate and
  // rewrite whatever it points to; a FIFO or device there is refused too.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  ZT_CHECK(fd_ >= 0 || errno != ELOOP, "the lock file ", path,
           " is a symbolic link; ztrain never writes through one: remove it (or choose another --output_dir)");
  ZT_CHECK(fd_ >= 0, "cannot open the lock file ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw Error(str_cat("the lock file ", path, " is not a regular file; remove it (or choose another --output_dir)"));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  int err = 0;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    err = errno;
    if (err != EWOULDBLOCK || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    err = 0;
  }
  if (err != 0) {
    ::close(fd_);
    fd_ = -1;
    ZT_CHECK(err == EWOULDBLOCK, "cannot lock ", path, ": ", std::strerror(err),
             "; put --output_dir on a file system with flock()");
    // The holder writes its pid right after taking the lock: give it a moment to.
    std::string holder;
    for (int i = 0; i < 50 && holder.empty(); ++i) {
      if (i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::ifstream f(path);
      std::getline(f, holder);
    }
    const size_t sp = holder.find(' ');
    const std::string who = sp == std::string::npos
                                ? "pid unknown"
                                : str_cat("pid ", holder.substr(0, sp), " on host ", holder.substr(sp + 1));
    throw Error(str_cat("--output_dir ", output_dir, " is in use by another ztrain run (", who, ", per ", path,
                        "); wait for it to end or stop it, or choose another --output_dir"));
  }
  const std::string me = str_cat(::getpid(), " ", host_name(), "\n");
  const bool ok = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) == ssize_t(me.size());
  ZT_CHECK(ok, "cannot write the lock file ", path, ": ", std::strerror(errno));
}

OutputDirLock::~OutputDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (unlinking it would race)
}

RunRecord run_record_from_json(const nlohmann::json& j) {
  RunRecord r;
  try {
    r.run_id = j.at("run_id").get<std::string>();
    r.attempt = j.at("attempt").get<int64_t>();
    for (const auto& a : j.at("attempts")) {
      const auto& from = a.at("resumed_from");
      r.parents[a.at("attempt").get<int64_t>()] =
          from.is_null()
              ? std::nullopt
              : std::optional<RunRecord::Parent>({from.at("attempt").get<int64_t>(), from.at("step").get<int64_t>()});
    }
    if (j.contains("forked_from") && !j["forked_from"].is_null()) {
      const auto& f = j["forked_from"];
      r.forked_from = RunRecord::Fork{f.at("run_id").get<std::string>(), f.at("checkpoint").get<std::string>(),
                                      f.at("attempt").get<int64_t>(), f.at("step").get<int64_t>()};
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("run record: ", e.what()));
  }
  return r;
}

RunRecord run_record_read(const std::string& output_dir) {
  const fs::path p = fs::path(output_dir) / kRunFile;
  std::error_code ec;
  if (!fs::exists(p, ec)) return RunRecord{};
  try {
    return run_record_from_json(read_json(p));
  } catch (const Error&) {
    std::fprintf(stderr, "ztrain: warning: %s is damaged; ignoring it (checkpoints are ranked by attempt and step)\n",
                 p.c_str());
    return RunRecord{};
  }
}

bool run_record_in_lineage(const RunRecord& r, const CheckpointRef& save) {
  const auto lineage = lineage_of(r);
  return lineage_group(r, lineage, save) < lineage.size();
}

RunRecord run_record_start(const std::string& output_dir, const CheckpointRef* resumed,
                           const std::string& resumed_dir) {
  const RunRecord prev = run_record_read(output_dir);
  int64_t last = prev.attempt;
  for (const Listed& l : list_checkpoints(output_dir)) last = std::max(last, l.ref.attempt);
  RunRecord r;
  r.attempt = last + 1;
  // A fork must not share its parent's run id: snapshots, `latest` and pruning go by it, and two
  // runs under one id would take each other's state.
  if (resumed && !resumed_dir.empty() && !path_within(resumed_dir, output_dir)) {
    r.run_id = random_id();
    r.parents[r.attempt] = std::nullopt;
    r.forked_from = RunRecord::Fork{resumed->run_id, fs::absolute(resumed_dir).lexically_normal().string(),
                                    resumed->attempt, resumed->step};
    return r;
  }
  if (!resumed) {
    r.run_id = random_id();
    r.parents[r.attempt] = std::nullopt;
    return r;
  }
  r.run_id = resumed->run_id.empty() ? random_id() : resumed->run_id;
  if (prev.run_id == r.run_id) r.parents = prev.parents;  // the ancestry of the resumed attempt
  r.parents[r.attempt] = RunRecord::Parent{resumed->attempt, resumed->step};
  return r;
}

nlohmann::json run_record_to_json(const RunRecord& r) {
  nlohmann::json attempts = nlohmann::json::array();
  for (const auto& [a, from] : r.parents)
    attempts.push_back({{"attempt", a},
                        {"resumed_from", from ? nlohmann::json{{"attempt", from->attempt}, {"step", from->step}}
                                              : nlohmann::json(nullptr)}});
  nlohmann::json j = {{"run_id", r.run_id}, {"attempt", r.attempt}, {"attempts", attempts}};
  if (r.forked_from)
    j["forked_from"] = {{"run_id", r.forked_from->run_id},
                        {"checkpoint", r.forked_from->checkpoint},
                        {"attempt", r.forked_from->attempt},
                        {"step", r.forked_from->step}};
  return j;
}

void run_record_write(const std::string& output_dir, const RunRecord& r) {
  nlohmann::json j = run_record_to_json(r);
  j["pid"] = ::getpid();
  j["host"] = host_name();
  j["started_unix_s"] =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_file_atomic((fs::path(output_dir) / kRunFile).string(), j.dump(2) + "\n");
}

int64_t checkpoint_step_of(const std::string& dir) {
  return step_of(fs::path(dir).lexically_normal().filename().empty() ? fs::path(dir).parent_path() : fs::path(dir));
}

std::string checkpoint_find_latest(const std::string& output_dir, std::string* save_id) {
  for (const Listed& l : ordered_checkpoints(output_dir)) {
    try {
      const std::string id = checkpoint_verify(l.path.string());
      if (save_id) *save_id = id;
    } catch (const Error& e) {
      std::fprintf(stderr, "ztrain: warning: skipping %s\n", e.what());
      continue;
    }
    if (l.foreign)
      std::fprintf(stderr,
                   "ztrain: warning: %s has no intact checkpoint of its current run (run.json); resuming %s, "
                   "written by another run or an abandoned attempt\n",
                   output_dir.c_str(), l.path.c_str());
    return l.path.string();
  }
  return "";
}

CheckpointRef checkpoint_newest_unverified(const std::string& output_dir, std::string* save_id) {
  CheckpointRef best{"", 0, -1};
  fs::path path;
  for (const Listed& l : list_checkpoints(output_dir))
    if (l.readable && l.ref.step > best.step) best = l.ref, path = l.path;
  save_id->clear();
  if (best.step >= 0) {
    const nlohmann::json s = read_json(path / "trainer_state.json");
    const nlohmann::json::json_pointer ptr("/ztrain/save_id");
    if (s.is_object() && s.contains(ptr) && s[ptr].is_string()) *save_id = s[ptr].get<std::string>();
  }
  return best;
}

void checkpoint_prune(const std::string& output_dir, int64_t keep, const std::string& protect) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(output_dir, ec))
    if (is_tmp_checkpoint(e.path().filename().string())) fs::remove_all(e.path(), ec);
  if (keep <= 0) return;
  std::vector<Listed> all = ordered_checkpoints(output_dir);
  if (!protect.empty()) std::erase_if(all, [&](const Listed& l) { return fs::equivalent(l.path, protect, ec); });
  for (size_t i = size_t(keep); i < all.size(); ++i) fs::remove_all(all[i].path, ec);
}

void checkpoint_remove_all(const std::string& output_dir,
                           const std::vector<std::pair<std::string, std::string>>& inputs) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (auto& e : fs::directory_iterator(output_dir, ec))
    if (e.is_directory() && (step_of(e.path()) >= 0 || is_tmp_checkpoint(e.path().filename().string())))
      doomed.push_back(e.path());
  for (const fs::path& d : doomed)
    for (const auto& [flag, path] : inputs)
      if (!path.empty() && path_within(path, d))
        throw Error(str_cat("--overwrite_output_dir would delete ", d.string(), ", which ", flag, " ", path,
                            " reads; copy it out of ", output_dir, " first, or choose another --output_dir"));
  for (const fs::path& d : doomed) fs::remove_all(d, ec);
}

}  // namespace zt
