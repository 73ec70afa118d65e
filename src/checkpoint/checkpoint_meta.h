// checkpoint_meta.h: the metadata side of `checkpoint-N/` folders, apart from the model and
// optimizer tensors (checkpoint.h): checksums.json (a hash and size per file, verified before
// anything is loaded), trainer_state.json (read and checked before the trainer uses it),
// the save id that binds a folder's files together. Depends on core and the safetensors reader only (zt_formats), so
// these parsers are unit-tested and fuzzed (fuzz/fuzz_checkpoint.cpp) without a model.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace zt {

// checksums.json is {"save_id": "<hex>", "files": {name: {"xxh3_tree", "bytes"}}} (checkpoints written
// before XXH3 record "hash64" instead, still verified with it). Throws an
// Error naming the first file whose size or hash does not match, or whose recorded save id
// (trainer_state.json's ztrain.save_id, a safetensors file's "save_id" metadata) is not
// checksums.json's: a folder mixing files of two saves. A file in the folder that checksums.json
// does not list (a stray shard) makes it incomplete too: the same Error, so `latest` falls back
// past it as past a missing or damaged file. Returns the save id.
std::string checkpoint_verify(const std::string& dir);

// Finding the newest checkpoint and pruning old ones: checkpoint/run_folder.h.

// Reads a checkpoint's trainer_state.json and checks the fields resuming uses (global_step,
// log_history entries, ztrain.{loss_sum, seed, shuffle, sequences_per_step, sequence_length})
// have their types, so a damaged file is an Error naming the field, not a JSON exception.
nlohmann::json checkpoint_read_trainer_state(const std::string& path);

// The checksum algorithms checksums.json names: "xxh3_tree" (core/content_hash.h, what ztrain writes)
// and "hash64" (core/hash.h, older checkpoints).
enum class ChecksumKind { xxh3, hash64 };
// (checksum, size in bytes) of a file, as checksums.json records them.
std::pair<uint64_t, uint64_t> checkpoint_file_digest(const std::string& path, ChecksumKind kind = ChecksumKind::xxh3);

}  // namespace zt
