// content_hash.cpp: see content_hash.h. XXH_INLINE_ALL compiles XXH3 into this file with the
// build's -march, instead of the shared library's baseline SSE2 code.
#define XXH_INLINE_ALL
#include "core/content_hash.h"

#include <xxhash.h>

#include <algorithm>

namespace zt {

struct ContentHashStream::State {
  XXH3_state_t st;
};

uint64_t content_hash(const void* data, size_t n, uint64_t seed) { return XXH3_64bits_withSeed(data, n, seed); }

uint64_t tree_checksum_of_blocks(const std::vector<uint64_t>& block_hashes) {
  return content_hash(block_hashes.data(), block_hashes.size() * sizeof(uint64_t));
}

std::vector<uint64_t> block_hashes(const void* data, size_t n) {
  const int64_t blocks = int64_t((n + kChecksumBlock - 1) / kChecksumBlock);
  std::vector<uint64_t> h(static_cast<size_t>(blocks));
  const unsigned char* p = static_cast<const unsigned char*>(data);
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t k = 0; k < blocks; ++k) {
    const size_t b0 = size_t(k) * kChecksumBlock;
    h[size_t(k)] = content_hash(p + b0, std::min(n - b0, kChecksumBlock));
  }
  return h;
}

uint64_t tree_checksum(const void* data, size_t n) { return tree_checksum_of_blocks(block_hashes(data, n)); }

ContentHashStream::ContentHashStream(uint64_t seed) : state_(std::make_unique<State>()) {
  XXH3_INITSTATE(&state_->st);
  reset(seed);
}

ContentHashStream::~ContentHashStream() = default;

void ContentHashStream::reset(uint64_t seed) { XXH3_64bits_reset_withSeed(&state_->st, seed); }

void ContentHashStream::update(const void* data, size_t n) { XXH3_64bits_update(&state_->st, data, n); }

uint64_t ContentHashStream::value() const { return XXH3_64bits_digest(&state_->st); }

void TreeChecksumStream::update(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const size_t k = std::min(n, kChecksumBlock - fill_);
    block_.update(p, k);
    fill_ += k, p += k, n -= k;
    if (fill_ == kChecksumBlock) {
      hashes_.push_back(block_.value());
      block_.reset();
      fill_ = 0;
    }
  }
}

uint64_t TreeChecksumStream::value() const {
  if (fill_ == 0) return tree_checksum_of_blocks(hashes_);
  std::vector<uint64_t> h = hashes_;
  h.push_back(block_.value());
  return tree_checksum_of_blocks(h);
}

}  // namespace zt
