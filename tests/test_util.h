// test_util.h: random tensors and comparison helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/isa.h"

namespace zt::test {

// The message of the zt::Error f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Runs f at every kernel level this CPU has (kernels/isa.h), each failure tagged with the level:
// an AVX-512 machine also proves the AVX2 path.
template <class F>
void for_each_isa(F f) {
  kernels::for_each_isa([&](const std::string& isa) {
    SCOPED_TRACE("kernel level " + isa);
    f();
  });
}

template <class T = float>
std::vector<T> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = T(r.normal() * scale);
  return v;
}

template <class A, class B>
std::vector<A> cast(const std::vector<B>& v) {
  return std::vector<A>(v.begin(), v.end());
}

// max |a-b| / (atol + rtol*|b|) must stay <= 1. A NaN fails wherever it appears unless the
// other side has a NaN at the same index (a reference may legitimately produce one); equal
// infinities pass. NaN errors are mapped to +inf so that `e > worst` can never be fooled by
// NaN's false comparisons (a later finite element used to replace a NaN worst).
template <class A, class B>
void expect_close(const std::vector<A>& a, const std::vector<B>& b, double rtol, double atol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double x = double(a[i]), y = double(b[i]);
    double e = 0;
    if (std::isnan(x) || std::isnan(y)) {
      e = std::isnan(x) && std::isnan(y) ? 0 : INFINITY;
    } else if (x != y) {  // x == y also covers equal infinities, whose difference is NaN
      e = std::abs(x - y) / (atol + rtol * std::abs(y));
      if (std::isnan(e)) e = INFINITY;  // +inf vs -inf: inf / inf
    }
    if (e > worst) {
      worst = e;
      wi = i;
    }
  }
  if (a.empty()) return;
  EXPECT_LE(worst, 1.0) << what << ": worst at " << wi << ": " << double(a[wi]) << " vs " << double(b[wi]);
}

// Central finite differences in double of f (a scalar function of x) at every index of x.
template <class F>
std::vector<double> central_differences(std::vector<double>& x, F f, double h = 1e-6) {
  std::vector<double> d(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f();
    x[i] = x0 - h;
    const double fm = f();
    x[i] = x0;
    d[i] = (fp - fm) / (2 * h);
  }
  return d;
}

// Central finite differences in double of f (a scalar function of x) at every index of x,
// compared to the analytic gradient g.
template <class F>
void expect_fd_grad(std::vector<double>& x, const std::vector<double>& g, F f, const char* what, double h = 1e-6,
                    double tol = 1e-6) {
  ASSERT_EQ(x.size(), g.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double x0 = x[i];
    x[i] = x0 + h;
    double fp = f();
    x[i] = x0 - h;
    double fm = f();
    x[i] = x0;
    double fd = (fp - fm) / (2 * h);
    EXPECT_NEAR(g[i], fd, tol * (1 + std::abs(fd))) << what << " index " << i;
  }
}

// Position ids (B, T) of rows packed with documents of random lengths in [1, max_len]:
// ids count up and restart at 0 at each document start (HF position_ids). Odd rows
// begin mid-document, at a random id in [1, max_offset].
inline std::vector<int32_t> packed_positions(int B, int T, int max_len, uint64_t seed, int max_offset = 40) {
  Rng r(seed);
  std::vector<int32_t> pos(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    int32_t p = b % 2 ? 1 + int32_t(r.below(max_offset)) : 0;
    int left = 1 + int(r.below(max_len));
    for (int t = 0; t < T; ++t, --left) {
      if (left == 0) {
        p = 0;
        left = 1 + int(r.below(max_len));
      }
      pos[size_t(b) * T + t] = p++;
    }
  }
  return pos;
}

// n token ids uniform in [0, V), reproducible from seed.
inline std::vector<int32_t> random_tokens(int n, int V, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t(size_t(n), 0);
  for (auto& x : t) x = int32_t(r.below(uint64_t(V)));
  return t;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace zt::test
