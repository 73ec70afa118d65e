// rng.h: a small, seedable, splittable random generator (splitmix64 + xoshiro256**).
// Used for initialisation and shuffling; each consumer derives its own stream from
// (seed, purpose) so that adding a consumer never shifts another's numbers.
#pragma once
#include <cmath>
#include <cstdint>

namespace zt {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (stream + 0x632BE59BD9B4E019ull);
    for (auto& v : s_) v = splitmix64(x);
  }
  uint64_t next_u64() {
    uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return (next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)); }
  // Two independent standard normals by Marsaglia's polar method (no trigonometry).
  void normal_pair(double* z) {
    double u, v, s;
    do {
      u = 2.0 * uniform() - 1.0;
      v = 2.0 * uniform() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = std::sqrt(-2.0 * std::log(s) / s);
    z[0] = u * f;
    z[1] = v * f;
  }
  // Standard normal by Box-Muller (one value per call keeps the state simple to save).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace zt
