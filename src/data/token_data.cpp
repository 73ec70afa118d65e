// token_data.cpp: see token_data.h.
#include "data/token_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "core/rng.h"

namespace zt {

TokenFile::TokenFile(const std::string& path, int vocab_size) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK(fd >= 0, "cannot open train file ", path, ": ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  bytes_ = size_t(st.st_size);
  if (bytes_ % 2 != 0 || bytes_ < 4) {
    ::close(fd);
    throw Error(str_cat(path, ": not a uint16 token file (", bytes_,
                        " bytes; expected an even size of at least 2 tokens)"));
  }
  void* m = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ZT_CHECK(m != MAP_FAILED, "cannot map ", path, ": ", std::strerror(errno));
  data_ = static_cast<const uint16_t*>(m);
  count_ = int64_t(bytes_ / 2);
  // One vectorized pass (GB/s) finds any out-of-range id before training starts.
  uint16_t mx = 0;
#pragma omp parallel for simd reduction(max : mx)
  for (int64_t i = 0; i < count_; ++i) mx = data_[i] > mx ? data_[i] : mx;
  if (mx >= vocab_size) {
    int64_t pos = 0;
    while (data_[pos] < vocab_size) ++pos;
    throw Error(str_cat(path, ": token id ", data_[pos], " at position ", pos, " is >= the model's vocab_size ",
                        vocab_size, "; the file was tokenized for a different model"));
  }
}

TokenFile::~TokenFile() {
  if (data_) ::munmap(const_cast<uint16_t*>(data_), bytes_);
}

WindowSampler::WindowSampler(const TokenFile& f, int T, bool shuffle, uint64_t seed)
    : f_(f), T_(T), shuffle_(shuffle), seed_(seed), windows_((f.size() - 1) / T) {}

int64_t WindowSampler::window_of(int64_t g) {
  int64_t epoch = g / windows_, i = g % windows_;
  if (!shuffle_) return i;
  if (epoch != perm_epoch_) {
    perm_.resize(size_t(windows_));
    for (int64_t k = 0; k < windows_; ++k) perm_[k] = k;
    Rng rng(seed_, 0x5348554646ull + uint64_t(epoch));  // Fisher-Yates with a per-epoch stream
    for (int64_t k = windows_ - 1; k > 0; --k) std::swap(perm_[k], perm_[rng.below(uint64_t(k) + 1)]);
    perm_epoch_ = epoch;
  }
  return perm_[i];
}

void WindowSampler::fill(int32_t* inputs, int32_t* targets, int64_t g, int count) {
  for (int s = 0; s < count; ++s) {
    const uint16_t* w = f_.data() + window_of(g + s) * T_;
    for (int t = 0; t < T_; ++t) {
      inputs[int64_t(s) * T_ + t] = w[t];
      targets[int64_t(s) * T_ + t] = w[t + 1];
    }
  }
}

}  // namespace zt
