// content_hash.h: the checksums of checkpoint files and flash snapshots, built on XXH3-64 from
// libxxhash (Debian's libxxhash-dev, compiled inline here so it uses the machine's AVX-512). XXH3
// runs at memory speed (1.49 GB in 0.05 s here, against 0.20 s for hash.h's hash64), and hashing a
// block right after copying it, while it is in cache, costs little beyond the copy.
// A file's checksum is a tree: XXH3 over the XXH3s of its 512 KiB blocks. Blocks hash in parallel
// (verifying a checkpoint on load), and a flash snapshot, which copies the files' images block by
// block, has each file's checksum when its copy ends, before anything is written to disk.
// Checkpoints written before it carry hash64 checksums, which are still verified (hash.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace zt {

uint64_t content_hash(const void* data, size_t n, uint64_t seed = 0);

constexpr size_t kChecksumBlock = size_t(512) << 10;
// The checksum from a file's block hashes, in order.
uint64_t tree_checksum_of_blocks(const std::vector<uint64_t>& block_hashes);
// The content_hash of each kChecksumBlock block of n bytes in memory (hashed by the OpenMP threads).
std::vector<uint64_t> block_hashes(const void* data, size_t n);
// The checksum of n bytes in memory: tree_checksum_of_blocks(block_hashes(data, n)).
uint64_t tree_checksum(const void* data, size_t n);

// content_hash over bytes that arrive in pieces: update() in order, value() equals
// content_hash(all bytes, seed).
class ContentHashStream {
 public:
  explicit ContentHashStream(uint64_t seed = 0);
  ~ContentHashStream();
  ContentHashStream(const ContentHashStream&) = delete;
  ContentHashStream& operator=(const ContentHashStream&) = delete;
  void update(const void* data, size_t n);
  uint64_t value() const;
  void reset(uint64_t seed = 0);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// tree_checksum over bytes that arrive in pieces.
class TreeChecksumStream {
 public:
  void update(const void* data, size_t n);
  uint64_t value() const;

 private:
  ContentHashStream block_;
  size_t fill_ = 0;
  std::vector<uint64_t> hashes_;
};

}  // namespace zt
