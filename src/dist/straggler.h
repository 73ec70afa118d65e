// straggler.h: per-step, per-rank timing that names slow ranks (issue 12, DLRover's straggler
// detection). Each rank's work in a step is its step time minus the time it was blocked in
// collectives: a slow rank works longer, the others wait for it in the next reduction, so the
// blocked time is what separates "slow" from "waiting for the slow one". The ranks exchange their
// work times at the step boundary (the vote's all-reduce, no extra collective); a rank whose work
// exceeds --straggler_threshold x the median (and the median by 50 ms, so tiny steps' jitter is not
// flagged) is a straggler in that step. The chief prints one line per logging window that had
// any, and train_results.json has the per-rank totals.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {
namespace dist {
class Communicator;
}

class StragglerMonitor {
 public:
  // `comms`: every communicator the step may block in (duplicates are ignored).
  StragglerMonitor(std::vector<const dist::Communicator*> comms, int world_size, double threshold);
  // At the start of a step (the blocked time of anything between steps, such as the vote's
  // own all-reduce, is not the step's).
  void step_begins() { blocked_before_ = blocked_total(); }
  // This rank's work in the step that just took `step_s` (after it).
  double work_seconds(double step_s) const { return std::max(0.0, step_s - (blocked_total() - blocked_before_)); }
  // Every rank's work in `step` (index = rank): judged; the slowest rank and its ratio to the
  // median are kept for the step's log.
  void judge(int64_t step, const std::vector<double>& work);
  int slowest_rank() const { return slowest_; }
  double slowest_ratio() const { return ratio_; }
  // The chief's line for the steps since the last call, or "" when no rank straggled in them.
  std::string window_line(int64_t step);
  nlohmann::json summary() const;  // train_results.json's "stragglers"

 private:
  double blocked_total() const;
  std::vector<const dist::Communicator*> comms_;
  double threshold_, blocked_before_ = 0;
  int slowest_ = -1;
  double ratio_ = 1;
  int64_t steps_ = 0, window_first_ = -1;
  std::vector<double> work_sum_;
  std::vector<int64_t> flagged_, window_flagged_;
  std::vector<double> window_worst_;
};

}  // namespace zt
