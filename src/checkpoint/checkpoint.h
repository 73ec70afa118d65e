// checkpoint.h: HF-style training checkpoints (`checkpoint-N/` folders) that resume
// exactly, written and read the same way for one process, DDP and ZeRO: every component
// (parameters, optimizer, LR schedule, data cursor, RNG, trainer counters) saves its state
// through the state interface (core/state.h) as tensor pieces and JSON values.
// A folder holds (docs/checkpoints.md has the details):
//   config.json, trainer_state.json (HF's fields; ztrain's JSON state under "ztrain"),
//   model.safetensors: the parameters under HF names when one shard holds them whole (one
//     process, DDP), so the folder loads as an HF model;
//   state-SSSSS-of-NNNNN.safetensors: every other piece, one file per shard owner, each
//     piece a 1-D fp32 tensor described (tensor, slot, global shape, first element) in the
//     file's metadata, so a reader with any layout assembles the slices it needs;
//   checksums.json (the save id, a hash and size per file), written last.
// Atomicity: everything goes into `checkpoint-N.tmp/`, each file fsynced, then one rename
// makes the folder appear whole; a crash or kill -9 mid-save leaves only a .tmp folder,
// which loading ignores and the next save removes. Loading verifies every checksum and
// names the damaged file; `latest` falls back to the newest intact one.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/safetensors.h"
#include "core/state.h"
#include "models/config.h"

namespace zt {

class SafetensorsFile;
struct StEntry;

struct CheckpointSaveOptions {
  std::string output_dir;
  int64_t step = 0;
  StateShard shard;               // which state file this rank writes (index < 0: none)
  bool chief = true;              // the rank that writes config.json, trainer_state.json, checksums
  std::function<void()> barrier;  // synchronises the ranks; empty for one process
  // Random, chosen by the chief and the same on every rank (the trainer broadcasts it):
  // recorded in every file (safetensors "save_id" metadata, trainer_state.json's
  // ztrain.save_id, checksums.json) so that loading rejects a folder mixing two saves.
  std::string save_id;
  // Files the chief writes beside config.json, (name, bytes): the model folder's tokenizer and
  // generation config (hf_side_files), so a checkpoint is a model folder `generate` can use.
  std::vector<std::pair<std::string, std::string>> extra_files;
};

// Writes output_dir/checkpoint-<step>/ atomically: a collective over the job's ranks, each
// passing its components (the chief's JSON values make trainer_state.json; the other ranks'
// are the same and dropped). cfg goes to config.json.
void checkpoint_save(const CheckpointSaveOptions& o, const ModelConfig& cfg,
                     const std::vector<const Stateful*>& components);

// checkpoint_save in its parts, for the flash checkpoints (checkpoint/flash_checkpoint.h), which
// write a snapshot's pieces from a background thread with no collective: the chief begins
// (a fresh checkpoint-N.tmp/), each shard owner writes its files there, and once every shard is
// written (the caller knows how) the chief seals it (JSON files, checksums.json, the rename).
std::string checkpoint_tmp_dir(const std::string& output_dir, int64_t step);
void checkpoint_begin(const std::string& output_dir, int64_t step);
void checkpoint_write_shard(const std::string& output_dir, int64_t step, const StateShard& shard,
                            const std::vector<StatePiece>& pieces, const std::string& save_id, const ModelConfig& cfg);
// The files a shard owner writes for its pieces, planned: each file's name, the bytes before its
// tensor data (safetensors_header of its tensors and metadata) and the pieces that follow, in order,
// back to back. A flash
// snapshot lays these files out in shared memory as they will be on disk, and its persist writes
// them from there (checkpoint_write_file_image) with no copy. Empty for a rank that owns no shard.
// cfg: model.safetensors stores fused tensors as the HF folder does (hf_fuse_tensors).
struct ShardFile {
  std::string name;
  std::vector<StTensorOut> tensors;  // in file order, data pointing at the pieces
  std::map<std::string, std::string> metadata;
  // Indices into the pieces given, in file order, back to back: one per tensor, or a fused
  // tensor's parts (Phi-3's qkv_proj: q, k, v) one after the other.
  std::vector<size_t> pieces;
};
std::vector<ShardFile> checkpoint_shard_files(const StateShard& shard, const std::vector<StatePiece>& pieces,
                                              const std::string& save_id, const ModelConfig& cfg);
// Writes one planned file into checkpoint-N.tmp/ from its image in memory (core/file_io.h's
// write_image_file: 4096-byte aligned, readable to the next multiple of 4096), with its checksum.
void checkpoint_write_file_image(const std::string& output_dir, int64_t step, const std::string& name,
                                 const void* image, uint64_t size, uint64_t checksum);
void checkpoint_seal(const std::string& output_dir, int64_t step, const ModelConfig& cfg, nlohmann::json state,
                     const std::string& save_id, const std::vector<std::pair<std::string, std::string>>& extra_files);

// A checkpoint folder opened for loading: checksums and save ids verified (an Error naming
// the damaged or foreign file), config.json compared with the run's model key by key (the
// resolved config: config_resolved_json), trainer_state.json read, and the pieces of
// model.safetensors and every state file indexed. Components load from it in any layout:
// get_tensor assembles each requested slice from the stored pieces.
class CheckpointReader final : public StateReader {
 public:
  // allow_model_changes (--resume_allow_changes model): a config that differs is not an error;
  // model_change() says how it differs (tensors must still fit). verified_save_id: the save id
  // checkpoint_verify returned for dir (the trainer's chief verifies once for every rank:
  // hashing a checkpoint is a full read); empty = verify here.
  // allow_context_change (a long-context stage, --rope_scaling given): rope_scaling and
  // max_position_embeddings may differ; context_change() says how.
  CheckpointReader(const std::string& dir, const ModelConfig& cfg, bool allow_model_changes = false,
                   std::string verified_save_id = "", bool allow_context_change = false);
  ~CheckpointReader() override;
  void load(const std::vector<Stateful*>& components);

  void get_tensor(const StatePiece& piece) override;
  const nlohmann::json* find_json(const std::string& key) const override;
  std::string source() const override { return dir_; }
  const nlohmann::json& trainer_state() const { return state_; }
  const std::string& model_change() const { return model_change_; }
  const std::string& context_change() const { return context_change_; }

 private:
  struct Stored {
    const SafetensorsFile* file;
    const StEntry* entry;
    int64_t begin, count;
    int64_t at = 0;  // the piece's first element in the entry (a part of a fused tensor: its rows)
  };
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<Stored> pieces;  // sorted by begin, disjoint
  };
  void compare_config(const ModelConfig& saved, const ModelConfig& cfg, bool allow, bool allow_context);
  void index_state_files();
  void add(const std::string& slot, const std::string& tensor, std::vector<int64_t> shape, Stored s);

  std::string dir_;
  std::string save_id_;
  std::string model_change_, context_change_;
  nlohmann::json state_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::pair<std::string, std::string>, Tensor> index_;  // (slot, tensor)
};

}  // namespace zt
