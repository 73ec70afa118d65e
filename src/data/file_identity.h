// file_identity.h: what identifies an input file when two ranks or a resumed run must read the
// same data: its size and a 64-bit hash of its first MiB. Hashing the whole file would cost
// seconds per start on a multi-GB corpus; a stale copy or another file differs in size or in
// its start in practice. It deliberately is not a content checksum: two files equal in size and
// first MiB but different later pass.
// DataIdentity is the state component that records the train file's identity in checkpoints
// (trainer_state.json "ztrain.data") and checks it on resume.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/state.h"

namespace zt {

struct FileIdentity {
  static constexpr uint64_t kPrefixBytes = 1 << 20;
  uint64_t bytes = 0;
  uint64_t prefix_hash = 0;  // hash64 of the first min(bytes, kPrefixBytes) bytes
  // {"bytes": N, "prefix_bytes": P, "prefix_hash": "<16 hex digits>"}
  nlohmann::json to_json() const;
  // "N bytes, first MiB hash <hex>", for messages.
  std::string describe() const;
};

// Reads the file's size and first MiB; an Error naming the flag when it cannot be read.
FileIdentity file_identity(const std::string& path, const std::string& flag);

// The train file a run reads, as a checkpoint component: saves ztrain.data.train_file; loading
// compares it with this run's file and throws a one-line Error unless allow_change, in which
// case change() says what differs (for the trainer's warning).
class DataIdentity final : public Stateful {
 public:
  DataIdentity(FileIdentity train, bool allow_change) : train_(train), allow_change_(allow_change) {}
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;
  const std::string& change() const { return change_; }

 private:
  FileIdentity train_;
  bool allow_change_;
  std::string change_;
};

}  // namespace zt
