// channel_losses.cpp: see channel_losses.h.
#include "observe/channel_losses.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cross_entropy.h"

namespace zt {

ChannelLosses::ChannelLosses(const std::vector<std::string>& names, int B, int T)
    : B_(B), T_(T), tok_(size_t(B) * T, 0.0), sums_(2 * names.size(), 0.0) {
  for (const std::string& n : names) keys_.push_back("loss/" + n);
}

void ChannelLosses::add(const std::vector<int32_t>& channels, const int32_t* targets) {
  const size_t K = keys_.size();
  for (int b = 0; b < B_; ++b) {
    const int c = channels.empty() ? 0 : channels[size_t(b)];
    ZT_ASSERT(c >= 0 && size_t(c) < K);
    double loss = 0, n = 0;
    for (int t = 0; t < T_; ++t) {
      const size_t i = size_t(b) * T_ + t;
      if (targets[i] == kernels::kIgnoreIndex) continue;
      loss += tok_[i];
      n += 1;
    }
    // A row whose loss is NaN or infinite (a step the spike guard skips) stays out of the
    // channel's mean, as HF's logging_nan_inf_filter keeps it out of the logged loss.
    if (!std::isfinite(loss)) continue;
    sums_[size_t(c)] += loss;
    sums_[K + size_t(c)] += n;
  }
}

const std::vector<std::pair<const char*, double>>& ChannelLosses::reduce(dist::Communicator& dp) {
  const size_t K = keys_.size();
  if (dp.size() > 1) dp.all_reduce(sums_.data(), sums_.size());
  out_.clear();
  for (size_t c = 0; c < K; ++c)
    if (sums_[K + c] > 0) out_.push_back({keys_[c].c_str(), sums_[c] / sums_[K + c]});
  reset();
  return out_;
}

void ChannelLosses::reset() { std::fill(sums_.begin(), sums_.end(), 0.0); }

}  // namespace zt
