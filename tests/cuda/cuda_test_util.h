// cuda_test_util.h: helpers for the GPU kernel tests. Every test starts with ZT_REQUIRE_GPU(),
// which skips it cleanly on a machine without a GPU (CI), so the suite always builds and runs.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "core/tensor.h"

#define ZT_REQUIRE_GPU()                                                  \
  do {                                                                    \
    if (::zt::cuda_device_count() == 0) GTEST_SKIP() << "no GPU present"; \
  } while (0)

namespace zt::test {

template <class T = float>
std::vector<T> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = T(r.normal() * scale);
  return v;
}

// A device copy of a host vector; `poison` fills an output with NaN first so that an element the
// kernel never writes shows up as a failure.
template <class T>
DeviceBuffer to_gpu(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T), "test tensor");
  copy_to_device(b.data(), v.data(), v.size() * sizeof(T));
  return b;
}
inline DeviceBuffer gpu_poisoned(size_t floats) {
  std::vector<float> nan(floats, NAN);
  return to_gpu(nan);
}
template <class T = float>
std::vector<T> from_gpu(const DeviceBuffer& b, size_t n) {
  device_synchronize();
  std::vector<T> v(n);
  copy_to_host(v.data(), b.data(), n * sizeof(T));
  return v;
}

// ||a - b|| / ||b|| over all elements (the error measure of docs/gpu.md); NaN anywhere gives +inf.
template <class A, class B>
double rel_error(const std::vector<A>& a, const std::vector<B>& b) {
  double num = 0, den = 0;
  if (a.size() != b.size()) return INFINITY;
  for (size_t i = 0; i < a.size(); ++i) {
    double x = double(a[i]), y = double(b[i]);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Inputs rounded to bf16 and back (the values a bf16 kernel actually multiplies).
inline std::vector<float> bf16_round(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

}  // namespace zt::test
