// test_util.cpp: tests of the shared test helpers themselves (test_util.h). A comparison helper
// that passes bad data hides bugs in every test that uses it, so its failure modes are pinned here.
#include "test_util.h"

#include <gtest/gtest-spi.h>

#include <cmath>
#include <limits>

namespace zt {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

TEST(TestUtil, ExpectClosePassesCloseValues) {
  std::vector<float> a{1.f, 2.f, -3.f};
  std::vector<double> b{1.0, 2.0 + 1e-7, -3.0};
  test::expect_close(a, b, 1e-5, 1e-6, "close");
  test::expect_close(std::vector<double>{}, std::vector<double>{}, 1e-5, 1e-6, "empty");
  // Matching NaNs and equal infinities are agreement, not error.
  test::expect_close(std::vector<double>{kNaN, kInf, -kInf}, std::vector<double>{kNaN, kInf, -kInf}, 1e-5, 1e-6,
                     "special");
}

TEST(TestUtil, ExpectCloseFailsFarValues) {
  std::vector<double> a{1, 2, 3}, b{1, 2.5, 3};
  EXPECT_NONFATAL_FAILURE(test::expect_close(a, b, 1e-5, 1e-6, "far"), "worst at 1");
}

// A NaN used to pass unless it was the last element: `!(e <= worst)` made it the worst, and the
// next finite error (e > NaN is false, but !(e <= NaN) is true) replaced it.
TEST(TestUtil, ExpectCloseFailsNaNAnywhere) {
  const size_t n = 7;
  for (size_t at : {size_t(0), n / 2, n - 1}) {
    std::vector<double> ref(n, 1.0);
    std::vector<double> got = ref;
    got[1] = got[n - 2] = 1.0 + 1e-7;  // small finite errors around the NaN
    got[at] = kNaN;
    std::string where = "worst at " + std::to_string(at);
    EXPECT_NONFATAL_FAILURE(test::expect_close(got, ref, 1e-5, 1e-6, "nan in a"), where);
    EXPECT_NONFATAL_FAILURE(test::expect_close(ref, got, 1e-5, 1e-6, "nan in b"), where);
  }
}

TEST(TestUtil, ExpectCloseFailsInfinityMismatch) {
  std::vector<double> ref{1, 1, 1};
  EXPECT_NONFATAL_FAILURE(test::expect_close(std::vector<double>{1, kInf, 1}, ref, 1e-5, 1e-6, "inf"), "worst at 1");
  EXPECT_NONFATAL_FAILURE(
      test::expect_close(std::vector<double>{1, kInf, 1}, std::vector<double>{1, -kInf, 1}, 1e-5, 1e-6, "+-inf"),
      "worst at 1");
}

}  // namespace
}  // namespace zt
