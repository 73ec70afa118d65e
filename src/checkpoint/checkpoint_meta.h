// checkpoint_meta.h: the metadata side of `checkpoint-N/` folders, apart from the model and
// optimizer tensors (checkpoint.h): checksums.json (a hash and size per file, verified before
// anything is loaded), trainer_state.json (read and checked before the trainer uses it),
// finding the newest intact checkpoint and pruning old ones. Depends on core only, so these
// parsers are unit-tested and fuzzed (fuzz/fuzz_checkpoint.cpp) without a model.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace zt {

// Throws an Error naming the first file whose size or hash does not match checksums.json.
void checkpoint_verify(const std::string& dir);

// Finds output_dir's newest checkpoint that verifies; "" if none. Damaged ones are
// reported on stderr and skipped.
std::string checkpoint_find_latest(const std::string& output_dir);

// Removes the oldest checkpoint-N folders of output_dir beyond `keep` (0 = keep all).
void checkpoint_prune(const std::string& output_dir, int64_t keep);

// Reads a checkpoint's trainer_state.json and checks the fields resuming uses (global_step,
// log_history entries, ztrain.{loss_sum, seed, shuffle, sequences_per_step, sequence_length})
// have their types, so a damaged file is an Error naming the field, not a JSON exception.
nlohmann::json checkpoint_read_trainer_state(const std::string& path);

// (hash64, size in bytes) of a file, as checksums.json records them.
std::pair<uint64_t, uint64_t> checkpoint_file_digest(const std::string& path);

}  // namespace zt
