// token_data.cpp: see token_data.h.
#include "data/token_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/mapped_files.h"
#include "core/rng.h"
#include "data/shard_format.h"

namespace zt {

TokenFile::TokenFile(const std::string& path, int vocab_size) : path_(path) {
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
    validate(vocab_size);
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

void TokenFile::validate(int vocab_size) {
  const std::string& path = path_;
  const auto* base = static_cast<const unsigned char*>(map_);
  size_t offset = 0;
  if (bytes_ >= kShardHeaderBytes && std::memcmp(base, kShardMagic, 8) == 0) {
    ShardHeader h;
    std::memcpy(&h.version, base + 8, 4);
    std::memcpy(&h.token_bytes, base + 12, 4);
    std::memcpy(&h.count, base + 16, 8);
    ZT_CHECK(h.version == kShardVersion, path, ": token shard version ", h.version, " is not supported (expected ",
             kShardVersion, "); re-run ztrain tokenize");
    ZT_CHECK(h.token_bytes == 2 || h.token_bytes == 4, path, ": token shard has ", h.token_bytes,
             "-byte tokens; expected 2 or 4");
    ZT_CHECK(h.count <= (bytes_ - kShardHeaderBytes) / h.token_bytes, path, ": truncated token shard (header says ",
             h.count, " tokens, the file holds ", (bytes_ - kShardHeaderBytes) / h.token_bytes, ")");
    token_bytes_ = int(h.token_bytes);
    count_ = int64_t(h.count);
    offset = kShardHeaderBytes;
  } else {
    ZT_CHECK(bytes_ % 2 == 0, path, ": not a token file (", bytes_,
             " bytes: neither a ztrain shard nor an even-sized uint16 file)");
    count_ = int64_t(bytes_ / 2);
  }
  ZT_CHECK(count_ >= 2, path, ": has ", count_, " tokens; a token file needs at least 2");
  tokens16_ = reinterpret_cast<const uint16_t*>(base + offset);
  tokens32_ = reinterpret_cast<const uint32_t*>(base + offset);
  // One vectorized pass (GB/s) finds any out-of-range id before training starts.
  uint32_t mx = 0;
  if (token_bytes_ == 2) {
#pragma omp parallel for simd reduction(max : mx)
    for (int64_t i = 0; i < count_; ++i) mx = tokens16_[i] > mx ? tokens16_[i] : mx;
  } else {
#pragma omp parallel for simd reduction(max : mx)
    for (int64_t i = 0; i < count_; ++i) mx = tokens32_[i] > mx ? tokens32_[i] : mx;
  }
  if (mx >= uint32_t(vocab_size)) {
    int64_t pos = 0;
    while (at(pos) < uint32_t(vocab_size)) ++pos;
    throw Error(str_cat(path, ": token id ", at(pos), " at position ", pos, " is >= the model's vocab_size ",
                        vocab_size, "; the file was tokenized for a different model"));
  }
}

TokenFile::~TokenFile() { release(); }

WindowSampler::WindowSampler(const TokenFile& f, int T, bool shuffle, uint64_t seed)
    : f_(f), T_(T), windows_(T > 0 ? (f.size() - 1) / T : 0), order_(std::max<int64_t>(windows_, 1), shuffle, seed) {
  ZT_CHECK(windows_ > 0, f.path(), " has ", f.size(), " tokens, fewer than one sequence of ", T,
           "+1 tokens; use more data or a smaller --model_max_length");
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
  f_.check_unchanged();  // before touching pages a truncation may have removed
  for (int s = 0; s < count; ++s) {
    const int64_t w = window_of(g + s) * T_;
    for (int t = 0; t < T_; ++t) {
      inputs[int64_t(s) * T_ + t] = int32_t(f_.at(w + t));
      targets[int64_t(s) * T_ + t] = int32_t(f_.at(w + t + 1));
    }
  }
}

}  // namespace zt
