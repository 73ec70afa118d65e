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

// What a token file is trusted for (docs/data.md#what-is-checked-when): at open, its header, every
// chunk checksum (ztrain shards) and every id's range are checked; after that the mapped file may
// still change under the run (rewritten in place, even with its size and mtime restored), so every
// read() checks again what it hands out: the chunks it reads, copied first and hashed (shards with
// checksums), and the range of every id. A bad id never reaches the kernels.
class TokenFile {
 public:
  // Validates the file: its header and checksums, at least two tokens, every id < vocab_size.
  TokenFile(const std::string& path, int vocab_size);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  int64_t size() const { return count_; }
  uint32_t at(int64_t i) const { return token_bytes_ == 2 ? tokens16_[i] : tokens32_[i]; }
  const std::string& path() const { return path_; }
  int vocab_size() const { return vocab_size_; }
  bool has_checksums() const { return chunk_bytes_ > 0; }
  // Copies tokens [first, first + n) into out, checked: the chunks they lie in are copied into
  // *scratch and their checksums verified there, and every id is < vocab_size; an Error names the
  // file and the offset otherwise. Not thread-safe on one scratch; the file may be shared.
  void read(int64_t first, int64_t n, int32_t* out, std::vector<unsigned char>* scratch) const;
  // Throws naming the file when it was truncated or written since it was opened: a read past
  // a cut raises SIGBUS, and rewritten tokens were never range-checked. One fstat (under a
  // microsecond), so readers call it before every batch.
  void check_unchanged() const;

 private:
  void validate();  // header, size, checksum and id checks; throws zt::Error
  void release();   // unregisters, unmaps, closes
  void check_chunk(const unsigned char* copy, uint64_t chunk, bool at_open) const;
  [[noreturn]] void bad_id(int64_t pos, uint32_t id, bool at_open) const;
  std::string path_;
  int fd_ = -1;  // kept open: fstat sees the mapped file itself even if the path is replaced
  int64_t mtime_ns_ = 0;
  void* map_ = nullptr;
  size_t bytes_ = 0;
  const uint16_t* tokens16_ = nullptr;
  const uint32_t* tokens32_ = nullptr;
  int token_bytes_ = 2;
  int64_t count_ = 0;
  int vocab_size_ = 0;
  const unsigned char* data_ = nullptr;  // the token bytes in the mapping
  uint64_t data_bytes_ = 0;
  size_t chunk_bytes_ = 0;      // 0: no checksums
  std::vector<uint64_t> sums_;  // per chunk, verified at open and copied out of the file
};

// File order from token `first_token` on (a long-context stage continues the token stream where
// the previous stage stopped, train/context_stage.h): window j of T + 1 tokens starts at
// first_token + j*T while it fits before the end, then the stream wraps to token 0 and windows
// follow at multiples of T (each pass over the file drops the tail shorter than a window).
int64_t stream_window_start(int64_t tokens, int T, int64_t first_token, int64_t j);

class WindowSampler {
 public:
  // first_token: where window 0 starts in file order (ignored when shuffled: windows are then
  // the file's multiples of T, in a seeded per-epoch permutation).
  WindowSampler(const TokenFile& f, int T, bool shuffle, uint64_t seed, int64_t first_token = 0);
  int64_t num_windows() const { return windows_; }
  int64_t window_of(int64_t g);
  int64_t window_start(int64_t g);
  // Fills count sequences starting at global sequence g into (count, T) arrays, every id checked
  // (TokenFile::read): a file changed since it was opened is an Error, never a bad id.
  void fill(int32_t* inputs, int32_t* targets, int64_t g, int count);

 private:
  const TokenFile& file_;
  int T_;
  int64_t windows_;
  bool shuffle_;
  int64_t first_token_;
  EpochOrder order_;
  std::vector<int32_t> window_;         // T + 1 ids
  std::vector<unsigned char> scratch_;  // TokenFile::read's verified copy
};

}  // namespace zt
