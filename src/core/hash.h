// hash.h: a fast 64-bit content hash for checkpoint integrity (detects truncation and
// corruption; not cryptographic). Processes 8-byte words with multiply-xorshift mixing,
// several GB/s, so verifying a 500 MB checkpoint costs a fraction of reading it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cinttypes>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>

namespace zt {

inline uint64_t hash64(const void* data, size_t n, uint64_t seed = 0x5a545241494eull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h[4] = {seed ^ 0x9E3779B97F4A7C15ull, seed + n, ~seed, seed * 0xff51afd7ed558ccdull};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      h[k] = (h[k] ^ (w * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
      h[k] ^= h[k] >> 31;
    }
  uint64_t r = h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7);
  for (; i < n; ++i) r = (r ^ p[i]) * 0x100000001b3ull;
  r ^= r >> 33;
  r *= 0xff51afd7ed558ccdull;
  r ^= r >> 33;
  return r;
}

// hash64 over bytes that arrive in pieces (a file as it is written), for a total length n known
// in advance: update() with the pieces in order, then value() equals hash64(all bytes, n, seed).
class Hash64Stream {
 public:
  explicit Hash64Stream(uint64_t n, uint64_t seed = 0x5a545241494eull)
      : h_{seed ^ 0x9E3779B97F4A7C15ull, seed + n, ~seed, seed * 0xff51afd7ed558ccdull}, n_(n) {}
  void update(const void* data, size_t len) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    seen_ += len;
    while (len > 0) {
      if (done_ >= n_ / 32 * 32) return tail(p, len);  // the last n % 32 bytes
      if (fill_ == 0 && len >= 32) {
        block(p);
        p += 32, len -= 32;
        continue;
      }
      const size_t k = std::min(len, sizeof(buf_) - fill_);  // a block split across pieces
      std::memcpy(buf_ + fill_, p, k);
      fill_ += k, p += k, len -= k;
      if (fill_ == sizeof(buf_)) block(buf_), fill_ = 0;
    }
  }
  uint64_t value() const {
    uint64_t r = r_tail_started_ ? r_ : mix();
    r ^= r >> 33;
    r *= 0xff51afd7ed558ccdull;
    r ^= r >> 33;
    return r;
  }
  uint64_t bytes_seen() const { return seen_; }

 private:
  uint64_t mix() const { return h_[0] ^ (h_[1] * 3) ^ (h_[2] * 5) ^ (h_[3] * 7); }
  void block(const unsigned char* p) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + 8 * k, 8);
      h_[k] = (h_[k] ^ (w * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
      h_[k] ^= h_[k] >> 31;
    }
    done_ += 32;
  }
  void tail(const unsigned char* p, size_t len) {  // the last n % 32 bytes, byte by byte
    if (!r_tail_started_) r_ = mix(), r_tail_started_ = true;
    for (size_t i = 0; i < len; ++i) r_ = (r_ ^ p[i]) * 0x100000001b3ull;
  }
  uint64_t h_[4];
  uint64_t n_, done_ = 0, seen_ = 0, r_ = 0;
  bool r_tail_started_ = false;
  unsigned char buf_[32];
  size_t fill_ = 0;
};

// 16 lowercase hex digits: how ids and hashes appear in files and messages.
inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace zt
