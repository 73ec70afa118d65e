// flash_snapshot.h: a rank's state copied into shared memory (a file under /dev/shm), which
// outlives the process (kill -9 included; not a reboot), so a flash checkpoint costs the
// training loop one memory copy and a restart finds the newest state there
// (docs/fault-tolerance.md#flash-checkpoints).
// The file: a 4 KiB header, the data, then a JSON block (the piece table, the checkpoint files'
// images and checksums, the checksummed regions, the components' JSON state, the model config).
// The data holds the rank's checkpoint files as they will be on disk (each from a 4096-byte
// boundary) and then any pieces in no file; the checksum covers the regions those occupy, in
// 512 KiB blocks hashed as they are copied. The header's
// `complete` word is cleared before a copy starts and set last, after the checksum over the data
// and the JSON is stored, so a snapshot torn by a kill is never taken for whole.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/state.h"

namespace zt {

// Collects what components save (pieces by pointer, JSON values), to be copied into a snapshot.
class StateCollector final : public StateWriter {
 public:
  void put_tensor(const StatePiece& p) override;
  void put_json(const std::string& key, const nlohmann::json& value) override;
  std::vector<StatePiece> pieces;
  nlohmann::json json = nlohmann::json::object();
};

// What identifies a snapshot besides its contents.
struct SnapshotInfo {
  int64_t step = 0;
  std::string save_id;
  int rank = 0, world = 1;
  StateShard shard;
};

// A checkpoint file's image in a snapshot: 4096-byte aligned, readable to the next multiple of 4096.
struct SnapshotFile {
  std::string name;
  const uint8_t* image;
  uint64_t bytes, checksum;  // checksum: content_hash.h's tree_checksum of the image
};

class FlashSnapshot {
 public:
  // /dev/shm/ztrain-<8 hex digits of the output folder's path>-<run id>-r<rank> ($ZT_FLASH_DIR
  // replaces /dev/shm, for tests): keyed by folder and run, so neither a fork (its own run id)
  // nor a copied folder (the same run id elsewhere) shares a snapshot with its origin.
  static std::string path_for(const std::string& output_dir, const std::string& run_id, int rank);
  // The step of the complete snapshot at path from its header alone (no mapping, no checksum),
  // or -1 when there is none: how `ztrain launch`'s agent tells a restart has something to resume.
  static int64_t complete_step(const std::string& path);
  // Maps path, creating it when absent (an empty, incomplete snapshot).
  explicit FlashSnapshot(std::string path);
  ~FlashSnapshot();
  FlashSnapshot(const FlashSnapshot&) = delete;
  FlashSnapshot& operator=(const FlashSnapshot&) = delete;

  // Grows the file to hold `data_bytes` of pieces and touches every page (tmpfs allocates it),
  // so the first copy does not pay for page faults. Safe to call from a background thread
  // before any write (nothing else may use the snapshot meanwhile).
  void reserve(uint64_t data_bytes);
  // Marks the snapshot incomplete, copies every piece (over `threads` OpenMP threads) and the
  // JSON. `files` (checkpoint_shard_files of the pieces) are laid out as their images on disk,
  // each checksummed as it is copied. `midway`, when set, runs after half the bytes (a test hook).
  void write(const SnapshotInfo& info, const StateCollector& c, const nlohmann::json& config, int threads,
             const std::vector<ShardFile>& files = {}, const std::function<void()>& midway = nullptr);
  // The checksum over the data's block hashes (computed by write()) and the JSON, then the
  // complete mark.
  void seal();

  // Reading (a restart): whether the snapshot is complete and its checksum holds; when not,
  // `why` says what is wrong (absent, incomplete/torn, checksum mismatch, another format).
  bool verify(std::string* why) const;
  const SnapshotInfo& info() const { return info_; }
  const nlohmann::json& state() const { return meta_["state"]; }
  const nlohmann::json& config() const { return meta_["config"]; }
  // The pieces with data pointing into the mapping (valid while this object lives, until the
  // next write): what a persist writes to a checkpoint folder.
  std::vector<StatePiece> pieces() const;
  // The checkpoint files laid out in the snapshot (see write): what a persist writes, with no copy.
  std::vector<SnapshotFile> files() const;
  // A reader over the snapshot: components load from it as from a checkpoint (same layout).
  std::unique_ptr<StateReader> reader() const;
  const std::string& path() const { return path_; }
  // Removes the file (a normal end); the mapping stays valid until destruction.
  void unlink();

 private:
  struct Header;
  Header* header() const;
  void map_size(uint64_t bytes);
  bool parse_meta(std::string* why);
  uint64_t checksum(const std::vector<uint64_t>& blocks) const;
  std::vector<uint64_t> hash_blocks() const;

  std::string path_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
  SnapshotInfo info_;
  nlohmann::json meta_;
  std::vector<uint64_t> block_hashes_;  // of the data's regions, as write() copied them
  bool wrote_ = false;
};

}  // namespace zt
