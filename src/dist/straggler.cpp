// straggler.cpp: see straggler.h.
#include "dist/straggler.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "dist/communicator.h"

namespace zt {

namespace {
constexpr double kMinExcessSeconds = 0.05;  // below this a "slow" rank is jitter
}

StragglerMonitor::StragglerMonitor(std::vector<const dist::Communicator*> comms, int world_size, double threshold)
    : threshold_(threshold),
      work_sum_(size_t(world_size), 0.0),
      flagged_(size_t(world_size), 0),
      window_flagged_(size_t(world_size), 0),
      window_worst_(size_t(world_size), 0.0) {
  for (const dist::Communicator* c : comms)
    if (c && std::find(comms_.begin(), comms_.end(), c) == comms_.end()) comms_.push_back(c);
  blocked_before_ = blocked_total();
}

double StragglerMonitor::blocked_total() const {
  double s = 0;
  for (const dist::Communicator* c : comms_) s += c->stats().total().wait_seconds;
  return s;
}

void StragglerMonitor::judge(int64_t step, const std::vector<double>& work) {
  ZT_ASSERT(work.size() == work_sum_.size(), "straggler times for ", work.size(), " ranks, expected ",
            work_sum_.size());
  std::vector<double> sorted = work;
  // The lower median: with 2 ranks, the faster one (else a slow rank would be its own median).
  const size_t mid = (sorted.size() - 1) / 2;
  std::nth_element(sorted.begin(), sorted.begin() + mid, sorted.end());
  const double median = sorted[mid];
  slowest_ = int(std::max_element(work.begin(), work.end()) - work.begin());
  const double floor = std::max(median, 1e-6);  // a rank that only waited has ~0 work
  ratio_ = work[size_t(slowest_)] / floor;
  ++steps_;
  if (window_first_ < 0) window_first_ = step;
  for (size_t r = 0; r < work.size(); ++r) work_sum_[r] += work[r];
  if (steps_ == 1) return;  // the first step of a run or a resume pays one-time costs unevenly
  for (size_t r = 0; r < work.size(); ++r) {
    if (threshold_ <= 0 || work[r] <= threshold_ * median || work[r] - median < kMinExcessSeconds) continue;
    ++flagged_[r], ++window_flagged_[r];
    window_worst_[r] = std::max(window_worst_[r], work[r] / floor);
  }
}

std::string StragglerMonitor::window_line(int64_t step) {
  const int64_t first = window_first_ < 0 ? step : window_first_;
  std::string line;
  for (size_t r = 0; r < window_flagged_.size(); ++r) {
    if (window_flagged_[r] == 0) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%srank %zu in %lld step(s) (worst %.2fx the median)", line.empty() ? "" : ", ", r,
                  (long long)window_flagged_[r], window_worst_[r]);
    line += buf;
  }
  if (!line.empty())
    line = "straggler: steps " + std::to_string(first + 1) + "-" + std::to_string(step + 1) + ": " + line +
           " worked longer than " + std::to_string(threshold_).substr(0, 4) +
           "x the median rank (compute time; the others waited in the next collective)";
  std::fill(window_flagged_.begin(), window_flagged_.end(), 0);
  std::fill(window_worst_.begin(), window_worst_.end(), 0.0);
  window_first_ = -1;
  return line;
}

nlohmann::json StragglerMonitor::summary() const {
  nlohmann::json mean = nlohmann::json::array(), flagged = nlohmann::json::array();
  for (size_t r = 0; r < work_sum_.size(); ++r) {
    mean.push_back(steps_ > 0 ? work_sum_[r] / double(steps_) : 0.0);
    flagged.push_back(flagged_[r]);
  }
  return {{"threshold", threshold_}, {"work_seconds_per_step", mean}, {"flagged_steps", flagged}};
}

}  // namespace zt
