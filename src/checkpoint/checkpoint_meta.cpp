// checkpoint_meta.cpp: see checkpoint_meta.h.
#include "checkpoint/checkpoint_meta.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/content_hash.h"
#include "core/hash.h"
#include "checkpoint/safetensors.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kChecksums = "checksums.json";

}  // namespace

// Hash and size of a file through a read-only mapping.
std::pair<uint64_t, uint64_t> checkpoint_file_digest(const std::string& path, ChecksumKind kind) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  auto hash = [kind](const void* p, size_t n) {
    return kind == ChecksumKind::xxh3 ? tree_checksum(p, n) : hash64(p, n);
  };
  uint64_t size = uint64_t(st.st_size), h = hash(nullptr, 0);
  if (size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw Error(str_cat("cannot map ", path));
    }
    ::madvise(m, size, MADV_SEQUENTIAL);
    h = hash(m, size);
    ::munmap(m, size);
  }
  ::close(fd);
  return {h, size};
}

namespace {

// The save id a checkpoint file records (checkpoint.h): trainer_state.json's ztrain.save_id, a
// safetensors file's __metadata__ "save_id"; "" when it has none. Other files record none.
std::string recorded_save_id(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name == "trainer_state.json") {
    std::ifstream f(p);
    const nlohmann::json s = nlohmann::json::parse(f, nullptr, false);
    const nlohmann::json::json_pointer ptr("/ztrain/save_id");
    return s.is_object() && s.contains(ptr) && s[ptr].is_string() ? s[ptr].get<std::string>() : "";
  }
  if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors") {
    SafetensorsFile f(p.string());
    auto it = f.metadata().find("save_id");
    return it == f.metadata().end() ? "" : it->second;
  }
  return "-";  // records none
}

// The folder holds exactly what checksums.json lists (and checksums.json): a stray file is either
// a piece of another save (an extra state-* shard once loaded beside the listed ones, and
// `latest` did not fall back past it) or something written after the seal, which nothing
// vouches for.
void reject_unlisted(const fs::path& d, const nlohmann::json& sums) {
  std::error_code ec;
  for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    ZT_CHECK(name == kChecksums || sums.contains(name), "checkpoint ", d.string(), " is incomplete: ", quote(name),
             " is not listed in ", kChecksums,
             " (a stray file, or one written after the save); move it out of the folder, or resume from another "
             "checkpoint");
  }
  ZT_CHECK(!ec, "cannot list checkpoint ", d.string(), ": ", ec.message());
}

}  // namespace

std::string checkpoint_verify(const std::string& dir) {
  fs::path d(dir);
  std::ifstream f(d / kChecksums);
  ZT_CHECK(f.good(), dir, ": not a complete checkpoint (", kChecksums, " is missing)");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception&) {
    throw Error(str_cat(dir, "/", kChecksums, " is damaged (not valid JSON)"));
  }
  ZT_CHECK(doc.is_object() && doc.contains("save_id") && doc["save_id"].is_string() && doc.contains("files") &&
               doc["files"].is_object() && !doc["files"].empty(),
           dir, "/", kChecksums, " is damaged or from an older ztrain (expected {\"save_id\": ..., \"files\": {...}})");
  const std::string save_id = doc["save_id"].get<std::string>();
  const nlohmann::json& sums = doc["files"];
  for (auto it = sums.begin(); it != sums.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    // Entries name files of this folder, each with two unsigned integers.
    ZT_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos, dir, "/", kChecksums,
             " is damaged: ", quote(name), " is not a file name");
    const char* key = v.is_object() && v.contains("hash64") ? "hash64" : "xxh3_tree";
    ZT_CHECK(v.is_object() && v.contains(key) && v[key].is_number_unsigned() && v.contains("bytes") &&
                 v["bytes"].is_number_unsigned(),
             dir, "/", kChecksums, " is damaged: the entry for ", quote(name),
             " needs unsigned integers \"xxh3_tree\" (or \"hash64\") and \"bytes\"");
    fs::path p = d / name;
    std::error_code ec;
    ZT_CHECK(fs::is_regular_file(p, ec), "checkpoint ", dir, " is damaged: ", quote(name), " is missing");
    auto [h, size] =
        checkpoint_file_digest(p.string(), std::string(key) == "hash64" ? ChecksumKind::hash64 : ChecksumKind::xxh3);
    const uint64_t want_size = v["bytes"].get<uint64_t>(), want_hash = v[key].get<uint64_t>();
    ZT_CHECK(size == want_size, "checkpoint ", dir, " is damaged: ", quote(name), " has ", size, " bytes, expected ",
             want_size);
    ZT_CHECK(h == want_hash, "checkpoint ", dir, " is damaged: ", quote(name), " fails its checksum");
  }
  reject_unlisted(d, sums);
  // Checksums bind the bytes, save ids the files: two runs writing one folder at once once
  // produced a checkpoint of one run's model and the other's optimizer whose checksums passed.
  for (auto it = sums.begin(); it != sums.end(); ++it) {
    const std::string id = recorded_save_id(d / it.key());
    ZT_CHECK(id == "-" || id == save_id, "checkpoint ", dir, " mixes files of two saves: ", quote(it.key()),
             id.empty() ? std::string(" has no save id") : str_cat(" has save id ", id), " but ", kChecksums, " has ",
             save_id, " (two runs wrote into one folder at once); resume from another checkpoint");
  }
  return save_id;
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
