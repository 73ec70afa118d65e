// token_data.h: token files memory-mapped (ztrain shards with a header, see
// shard_format.h, or nanoGPT's headerless uint16 train.bin), and the window sampler
// that turns them into training sequences.
// Window i is inputs tokens[i*T .. i*T+T-1] with targets shifted by one; global
// sequence g (counting from the start of training) is window g mod W in file order
// (--no_shuffle) or through a seeded per-epoch permutation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

// The order of an epoch-based sampler: global sequence g is item g mod n, in order or through
// a seeded per-epoch Fisher-Yates permutation.
class EpochOrder {
 public:
  EpochOrder(int64_t n, bool shuffle, uint64_t seed) : n_(n), shuffle_(shuffle), seed_(seed) {}
  int64_t at(int64_t g);

 private:
  int64_t n_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

class TokenFile {
 public:
  // Validates the file: even size, at least two tokens, every id < vocab_size.
  TokenFile(const std::string& path, int vocab_size);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  int64_t size() const { return count_; }
  uint32_t at(int64_t i) const { return token_bytes_ == 2 ? tokens16_[i] : tokens32_[i]; }
  const std::string& path() const { return path_; }
  // Throws naming the file when it was truncated or written since it was opened: a read past
  // a cut raises SIGBUS, and rewritten tokens were never range-checked. One fstat (under a
  // microsecond), so readers call it before every batch.
  void check_unchanged() const;

 private:
  void validate(int vocab_size);  // header, size and id checks; throws zt::Error
  void release();                 // unregisters, unmaps, closes
  std::string path_;
  int fd_ = -1;  // kept open: fstat sees the mapped file itself even if the path is replaced
  int64_t mtime_ns_ = 0;
  void* map_ = nullptr;
  size_t bytes_ = 0;
  const uint16_t* tokens16_ = nullptr;
  const uint32_t* tokens32_ = nullptr;
  int token_bytes_ = 2;
  int64_t count_ = 0;
};

class WindowSampler {
 public:
  WindowSampler(const TokenFile& f, int T, bool shuffle, uint64_t seed);
  int64_t num_windows() const { return windows_; }
  int64_t window_of(int64_t g);
  // Fills count sequences starting at global sequence g into (count, T) arrays.
  void fill(int32_t* inputs, int32_t* targets, int64_t g, int count);

 private:
  const TokenFile& f_;
  int T_;
  int64_t windows_;
  EpochOrder order_;
};

}  // namespace zt
