// spike_guard.h: loss-spike and NaN detection (docs/fault-tolerance.md#loss-spikes-and-nan).
// Each step's loss and gradient norm (the same on every rank: both are reduced) are judged before
// the update: non-finite values always, and with --spike_policy skip | rollback | stop a z-score
// above --spike_zscore against the last --spike_window accepted steps. Only accepted steps join
// the window. The window, the counters and the data skipped by rollbacks are state (saved in
// checkpoints), so a resumed run makes the same decisions.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

#include "core/state.h"

namespace zt {

enum class SpikePolicy { none, skip, rollback, stop };
// "none" | "skip" | "rollback" | "stop"; an Error naming the flag otherwise.
SpikePolicy spike_policy_from(const std::string& name);

struct SpikeVerdict {
  bool bad = false;  // non-finite, or a spike under a policy other than none
  bool nonfinite = false;
  std::string what;  // "loss 12.5 (z 9.1 over 100 steps: mean 3.2, std 1.0)"
};

class SpikeGuard final : public Stateful {
 public:
  SpikeGuard(SpikePolicy policy, int64_t window, double zscore) : policy_(policy), window_(window), zscore_(zscore) {}
  SpikePolicy policy() const { return policy_; }
  // Judges a step's values; does not change the window.
  SpikeVerdict judge(double loss, double grad_norm) const;
  // An applied step: its values join the window.
  void accept(double loss, double grad_norm);
  void count_skip() { ++skipped_; }
  // A rollback from step `bad_step` (1-based, the step that spiked) to the state after step
  // `to_step`: the data of steps to_step+1 .. bad_step is skipped from now on.
  void count_rollback(int64_t to_step, int64_t bad_step) {
    ++rollbacks_;
    data_offset_steps_ += bad_step - to_step;
  }
  int64_t skipped() const { return skipped_; }
  int64_t rollbacks() const { return rollbacks_; }
  // Steps of data skipped so far: optimizer step k trains on the data of step k + this.
  int64_t data_offset_steps() const { return data_offset_steps_; }
  // What survives a rollback, which loads the window and the skips of an earlier state (its
  // skipped steps belong to that state: the LR schedule and the optimizer's step count follow them).
  struct Counters {
    int64_t rollbacks, data_offset_steps;
  };
  Counters counters() const { return {rollbacks_, data_offset_steps_}; }
  void set_counters(const Counters& c) { rollbacks_ = c.rollbacks, data_offset_steps_ = c.data_offset_steps; }

  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;

 private:
  SpikePolicy policy_;
  int64_t window_;
  double zscore_;
  std::deque<double> losses_, norms_;
  int64_t skipped_ = 0, rollbacks_ = 0, data_offset_steps_ = 0;
};

}  // namespace zt
