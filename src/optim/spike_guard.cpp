// spike_guard.cpp: see spike_guard.h.
#include "optim/spike_guard.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace zt {
namespace {

// Detection starts once the window holds this many steps (or all of a smaller window): a
// z-score over a handful of early, fast-falling losses flags ordinary steps.
constexpr int64_t kMinSamples = 20;

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

}  // namespace

SpikePolicy spike_policy_from(const std::string& name) {
  if (name == "none") return SpikePolicy::none;
  if (name == "skip") return SpikePolicy::skip;
  if (name == "rollback") return SpikePolicy::rollback;
  ZT_CHECK(name == "stop", "--spike_policy ", quote(name), " is not one of none, skip, rollback, stop");
  return SpikePolicy::stop;
}

SpikeVerdict SpikeGuard::judge(double loss, double grad_norm) const {
  SpikeVerdict v;
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    v.bad = v.nonfinite = true;
    v.what = str_cat("loss ", fmt(loss), ", gradient norm ", fmt(grad_norm), " (not finite)");
    return v;
  }
  const int64_t n = int64_t(losses_.size());
  if (policy_ == SpikePolicy::none || n < std::min(window_, kMinSamples)) return v;
  for (int which = 0; which < 2; ++which) {
    const std::deque<double>& xs = which == 0 ? losses_ : norms_;
    const double x = which == 0 ? loss : grad_norm;
    double mean = 0, var = 0;
    for (double s : xs) mean += s;
    mean /= double(n);
    for (double s : xs) var += (s - mean) * (s - mean);
    const double sd = std::sqrt(var / double(n));
    // Only upward jumps are spikes; a flat window (sd 0) flags nothing.
    if (sd <= 0 || (x - mean) / sd <= zscore_) continue;
    v.bad = true;
    v.what = str_cat(which == 0 ? "loss " : "gradient norm ", fmt(x), " (z ", fmt((x - mean) / sd), " over ", n,
                     " steps: mean ", fmt(mean), ", std ", fmt(sd), ")");
    return v;
  }
  return v;
}

void SpikeGuard::accept(double loss, double grad_norm) {
  losses_.push_back(loss);
  norms_.push_back(grad_norm);
  while (int64_t(losses_.size()) > window_) losses_.pop_front(), norms_.pop_front();
}

void SpikeGuard::save_state(StateWriter& w) const {
  w.put_json("ztrain.spikes", {{"losses", losses_},
                               {"grad_norms", norms_},
                               {"skipped", skipped_},
                               {"rollbacks", rollbacks_},
                               {"data_offset_steps", data_offset_steps_}});
}

// Checkpoints from before spike detection hold none of it: an empty window and no skips.
void SpikeGuard::load_state(StateReader& r) {
  const nlohmann::json* j = r.find_json("ztrain.spikes");
  if (!j) return;
  auto num_list = [&](const char* k) {
    ZT_CHECK(j->contains(k) && (*j)[k].is_array(), r.source(), ": \"ztrain.spikes.", k,
             "\" is missing or not a list; the checkpoint is damaged");
    std::deque<double> d;
    for (const auto& x : (*j)[k]) {
      ZT_CHECK(x.is_number(), r.source(), ": \"ztrain.spikes.", k, "\" holds a non-number");
      d.push_back(x.get<double>());
    }
    return d;
  };
  losses_ = num_list("losses");
  norms_ = num_list("grad_norms");
  ZT_CHECK(losses_.size() == norms_.size(), r.source(), ": ztrain.spikes holds lists of different lengths");
  while (int64_t(losses_.size()) > window_) losses_.pop_front(), norms_.pop_front();
  skipped_ = r.get_int("ztrain.spikes.skipped");
  rollbacks_ = r.get_int("ztrain.spikes.rollbacks");
  data_offset_steps_ = r.get_int("ztrain.spikes.data_offset_steps");
}

}  // namespace zt
