// token_data.cpp: see token_data.h.
#include "data/token_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/mapped_files.h"
#include "core/rng.h"
#include "data/shard_format.h"

namespace zt {

TokenFile::TokenFile(const std::string& path, int vocab_size) : path_(path), vocab_size_(vocab_size) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZT_CHECK(fd_ >= 0, "cannot open token file ", path, ": ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd_, &st);
  bytes_ = size_t(st.st_size);
  mtime_ns_ = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (bytes_ > 0) map_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (map_ == MAP_FAILED) {
    const int e = errno;
    ::close(fd_);
    throw Error(str_cat("cannot map ", path, ": ", std::strerror(e)));
  }
  // So the SIGBUS handler apps/ installs can name this file if it is cut while mapped.
  if (map_) mapped_file_register(map_, bytes_, path);
  // A constructor that throws runs no destructor: unmap here so a rejected file is not leaked.
  try {
    validate();
  } catch (...) {
    release();
    throw;
  }
}

void TokenFile::release() {
  if (map_) {
    mapped_file_unregister(map_);
    ::munmap(map_, bytes_);
  }
  map_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TokenFile::check_unchanged() const {
  struct stat st {};
  ZT_CHECK(::fstat(fd_, &st) == 0, "cannot stat token file ", path_, ": ", std::strerror(errno));
  const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  ZT_CHECK(size_t(st.st_size) == bytes_ && mtime == mtime_ns_, "token file ", path_,
           " changed while it was being read (",
           size_t(st.st_size) < bytes_ ? str_cat("truncated from ", bytes_, " to ", st.st_size, " bytes")
                                       : std::string("written to"),
           "); a token file must not be modified during a run: restore it (write new data under a new name) and "
           "resume with --resume_from_checkpoint latest");
}

void TokenFile::validate() {
  const std::string& path = path_;
  const auto* base = static_cast<const unsigned char*>(map_);
  ShardLayout l = shard_layout(base, bytes_, path);
  if (l.shard) {
    token_bytes_ = int(l.header.token_bytes);
    count_ = int64_t(l.header.count);
  } else {
    ZT_CHECK(bytes_ % 2 == 0, path, ": not a token file (", bytes_,
             " bytes: neither a ztrain shard nor an even-sized uint16 file)");
    count_ = int64_t(bytes_ / 2);
  }
  ZT_CHECK(count_ >= 2, path, ": has ", count_, " tokens; a token file needs at least 2");
  data_ = base + l.data_offset;
  data_bytes_ = uint64_t(count_) * uint64_t(token_bytes_);
  chunk_bytes_ = l.chunk_bytes;
  sums_ = std::move(l.sums);
  tokens16_ = reinterpret_cast<const uint16_t*>(data_);
  tokens32_ = reinterpret_cast<const uint32_t*>(data_);
  // Every chunk's checksum, in parallel (XXH3 runs at memory speed), before any id is looked at.
  int64_t bad_chunk = -1;
#pragma omp parallel for schedule(dynamic, 16) reduction(max : bad_chunk)
  for (int64_t c = 0; c < int64_t(sums_.size()); ++c) {
    const size_t n = size_t(std::min<uint64_t>(chunk_bytes_, data_bytes_ - uint64_t(c) * chunk_bytes_));
    if (shard_chunk_hash(data_ + size_t(c) * chunk_bytes_, n, uint64_t(c)) != sums_[size_t(c)]) bad_chunk = c;
  }
  if (bad_chunk >= 0) check_chunk(data_ + size_t(bad_chunk) * chunk_bytes_, uint64_t(bad_chunk), true);
  // One vectorized pass (GB/s) finds any out-of-range id before training starts.
  uint32_t mx = 0;
  if (token_bytes_ == 2) {
#pragma omp parallel for simd reduction(max : mx)
    for (int64_t i = 0; i < count_; ++i) mx = tokens16_[i] > mx ? tokens16_[i] : mx;
  } else {
#pragma omp parallel for simd reduction(max : mx)
    for (int64_t i = 0; i < count_; ++i) mx = tokens32_[i] > mx ? tokens32_[i] : mx;
  }
  if (mx >= uint32_t(vocab_size_)) {
    int64_t pos = 0;
    while (at(pos) < uint32_t(vocab_size_)) ++pos;
    bad_id(pos, at(pos), true);
  }
}

void TokenFile::check_chunk(const unsigned char* copy, uint64_t chunk, bool at_open) const {
  const size_t n = size_t(std::min<uint64_t>(chunk_bytes_, data_bytes_ - chunk * chunk_bytes_));
  if (shard_chunk_hash(copy, n, chunk) == sums_[size_t(chunk)]) return;
  const uint64_t first = (data_ - static_cast<const unsigned char*>(map_)) + chunk * chunk_bytes_;
  throw Error(str_cat("token file ", path_, at_open ? " is damaged" : " changed while it was being read", ": bytes ",
                      first, " to ", first + n - 1, " (chunk ", chunk, " of ", sums_.size(), ") fail their checksum; ",
                      at_open ? "re-run ztrain tokenize or restore the file"
                              : "restore it (write new data under a new name) and resume with "
                                "--resume_from_checkpoint latest"));
}

void TokenFile::bad_id(int64_t pos, uint32_t id, bool at_open) const {
  const uint64_t byte = (data_ - static_cast<const unsigned char*>(map_)) + uint64_t(pos) * uint64_t(token_bytes_);
  if (at_open)
    throw Error(str_cat(path_, ": token id ", id, " at position ", pos, " (byte ", byte,
                        ") is >= the model's vocab_size ", vocab_size_,
                        "; the file was tokenized for a different model"));
  throw Error(
      str_cat("token file ", path_, " changed while it was being read: token id ", id, " at position ", pos, " (byte ",
              byte, ") is >= the model's vocab_size ", vocab_size_,
              "; restore it (write new data under a new name) and resume with --resume_from_checkpoint latest"));
}

void TokenFile::read(int64_t first, int64_t n, int32_t* out, std::vector<unsigned char>* scratch) const {
  ZT_ASSERT(first >= 0 && n > 0 && first + n <= count_, "TokenFile::read out of range");
  const unsigned char* src = data_ + size_t(first) * size_t(token_bytes_);
  if (chunk_bytes_ > 0) {
    // The chunks holding the range, copied and verified: what is checked is what is used, even
    // if the file is written to meanwhile.
    const uint64_t b0 = uint64_t(first) * uint64_t(token_bytes_), b1 = uint64_t(first + n) * uint64_t(token_bytes_);
    const uint64_t c0 = b0 / chunk_bytes_, c1 = (b1 - 1) / chunk_bytes_;
    scratch->resize(size_t(c1 - c0 + 1) * chunk_bytes_);
    for (uint64_t c = c0; c <= c1; ++c) {
      unsigned char* dst = scratch->data() + size_t(c - c0) * chunk_bytes_;
      std::memcpy(dst, data_ + c * chunk_bytes_,
                  size_t(std::min<uint64_t>(chunk_bytes_, data_bytes_ - c * chunk_bytes_)));
      check_chunk(dst, c, false);
    }
    src = scratch->data() + size_t(b0 - c0 * chunk_bytes_);
  }
  // Range check fused with the copy: max over the ids, then the culprit's position if one is out.
  uint32_t mx = 0;
  if (token_bytes_ == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(src);
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t id = p[i];
      out[i] = int32_t(id);
      mx = id > mx ? id : mx;
    }
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(src);
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t id = p[i];
      out[i] = int32_t(id);
      mx = id > mx ? id : mx;
    }
  }
  if (mx >= uint32_t(vocab_size_)) {
    int64_t i = 0;
    while (uint32_t(out[i]) < uint32_t(vocab_size_)) ++i;
    bad_id(first + i, uint32_t(out[i]), false);
  }
}

TokenFile::~TokenFile() { release(); }

WindowSampler::WindowSampler(const TokenFile& f, int T, bool shuffle, uint64_t seed, int64_t first_token)
    : file_(f),
      T_(T),
      windows_(T > 0 ? (f.size() - 1) / T : 0),
      shuffle_(shuffle),
      first_token_(shuffle ? 0 : first_token),
      order_(std::max<int64_t>(windows_, 1), shuffle, seed) {
  ZT_CHECK(windows_ > 0, f.path(), " has ", f.size(), " tokens, fewer than one sequence of ", T,
           "+1 tokens; use more data or a smaller --model_max_length");
  ZT_CHECK(first_token_ >= 0 && first_token_ < f.size(), f.path(), ": a data stage starts at token ", first_token_,
           " of ", f.size(), "; the checkpoint's data stages do not fit this file");
}

int64_t stream_window_start(int64_t tokens, int T, int64_t first_token, int64_t j) {
  const int64_t first_pass = first_token + T < tokens ? (tokens - 1 - first_token) / T : 0;
  if (j < first_pass) return first_token + j * T;
  return (j - first_pass) % ((tokens - 1) / T) * T;
}

int64_t WindowSampler::window_start(int64_t g) {
  return shuffle_ ? order_.at(g) * T_ : stream_window_start(file_.size(), T_, first_token_, g);
}

int64_t EpochOrder::at(int64_t g) {
  const int64_t epoch = g / n_, i = g % n_;
  if (!shuffle_) return i;
  if (epoch != epoch_) {
    perm_.resize(size_t(n_));
    for (int64_t k = 0; k < n_; ++k) perm_[k] = k;
    Rng rng(seed_, 0x5348554646ull + uint64_t(epoch));  // Fisher-Yates with a per-epoch stream
    for (int64_t k = n_ - 1; k > 0; --k) std::swap(perm_[k], perm_[rng.below(uint64_t(k) + 1)]);
    epoch_ = epoch;
  }
  return perm_[i];
}

int64_t WindowSampler::window_of(int64_t g) { return order_.at(g); }

void WindowSampler::fill(int32_t* inputs, int32_t* targets, int64_t g, int count) {
  file_.check_unchanged();  // before touching pages a truncation may have removed
  window_.resize(size_t(T_) + 1);
  for (int s = 0; s < count; ++s) {
    file_.read(window_start(g + s), T_ + 1, window_.data(), &scratch_);
    std::memcpy(inputs + int64_t(s) * T_, window_.data(), size_t(T_) * 4);
    std::memcpy(targets + int64_t(s) * T_, window_.data() + 1, size_t(T_) * 4);
  }
}

}  // namespace zt
