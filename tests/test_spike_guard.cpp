// test_spike_guard.cpp: the loss-spike judge (optim/spike_guard.h) against a hand computation:
// nothing is flagged before the window holds its minimum, a value past the z-score is, downward
// jumps and flat windows are not, NaN / Inf always are, and the state round-trips through JSON
// exactly (a resumed run decides the same).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "optim/spike_guard.h"

namespace zt {
namespace {

// A JSON-only reader over a document (what a checkpoint's trainer_state.json gives components).
class DocReader final : public StateReader {
 public:
  explicit DocReader(const nlohmann::json& d) : d_(d) {}
  void get_tensor(const StatePiece&) override { FAIL(); }
  const nlohmann::json* find_json(const std::string& key) const override {
    const nlohmann::json::json_pointer p(JsonStateWriter::json_pointer(key));
    return d_.contains(p) ? &d_.at(p) : nullptr;
  }
  std::string source() const override { return "doc"; }

 private:
  const nlohmann::json& d_;
};

TEST(SpikeGuard, JudgesAgainstTheWindow) {
  SpikeGuard g(SpikePolicy::skip, 30, 4.0);
  for (int i = 0; i < 19; ++i) g.accept(3.0 + 0.01 * (i % 2), 1.0 + 0.01 * (i % 3));
  EXPECT_FALSE(g.judge(100.0, 1.0).bad);  // 19 < 20 steps: not judged yet
  g.accept(3.01, 1.0);
  // 20 losses: ten 3.00 and ten 3.01: mean 3.005, population std 0.005.
  EXPECT_FALSE(g.judge(3.005 + 3.9 * 0.005, 1.0).bad);
  const SpikeVerdict v = g.judge(3.005 + 4.1 * 0.005, 1.0);
  EXPECT_TRUE(v.bad);
  EXPECT_FALSE(v.nonfinite);
  EXPECT_NE(v.what.find("loss"), std::string::npos) << v.what;
  EXPECT_FALSE(g.judge(1.0, 1.0).bad);  // a drop is not a spike
  EXPECT_TRUE(g.judge(3.0, 50.0).bad);  // the gradient norm is judged too
  EXPECT_TRUE(g.judge(std::nan(""), 1.0).nonfinite);
  EXPECT_TRUE(g.judge(3.0, std::numeric_limits<double>::infinity()).nonfinite);
}

TEST(SpikeGuard, NoneFlagsOnlyNonFiniteAndFlatWindowsNothing) {
  SpikeGuard none(SpikePolicy::none, 5, 1.0);
  SpikeGuard flat(SpikePolicy::rollback, 5, 1.0);
  for (int i = 0; i < 5; ++i) none.accept(1.0 + i, 1.0), flat.accept(2.0, 2.0);
  EXPECT_FALSE(none.judge(1e9, 1e9).bad);
  EXPECT_TRUE(none.judge(std::nan(""), 1.0).bad);
  EXPECT_FALSE(flat.judge(1e9, 1e9).bad);  // std 0: no z-score
}

TEST(SpikeGuard, StateRoundTripsExactly) {
  SpikeGuard a(SpikePolicy::skip, 4, 3.0);
  for (int i = 0; i < 6; ++i) a.accept(1.0 / (i + 3), 0.1 * i + 1e-17);
  a.count_skip();
  a.count_rollback(10, 14);
  nlohmann::json doc;
  JsonStateWriter w(&doc);
  a.save_state(w);
  SpikeGuard b(SpikePolicy::skip, 4, 3.0);
  const nlohmann::json reread = nlohmann::json::parse(doc.dump());  // through text, as from a file
  DocReader r(reread);
  b.load_state(r);
  EXPECT_EQ(b.skipped(), 1);
  EXPECT_EQ(b.rollbacks(), 1);
  EXPECT_EQ(b.data_offset_steps(), 4);
  for (double x : {0.1, 0.2, 0.25, 0.5, 3.0})
    for (double n : {0.5, 1.0, 5.0}) EXPECT_EQ(a.judge(x, n).what, b.judge(x, n).what);
  EXPECT_THROW(spike_policy_from("sometimes"), Error);
}

}  // namespace
}  // namespace zt
