// loss_scaler.h: fp16 loss scaling with DeepSpeed's semantics: a fixed scale, or the dynamic
// scaler of deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale, DeepSpeed
// 0.19.6, commit edaa7221), the one ZeRO stages 1-3 use and the only one that honours every key
// of a DeepSpeed config's fp16 section (the non-ZeRO FP16_Optimizer ignores hysteresis).
//
// The caller multiplies the loss by scale() before backward, divides the gradients by it,
// checks them for inf/NaN (on every rank: all ranks must agree) and calls update(overflow)
// once per optimizer step; a true return means "skip this optimizer step".
//
// It deliberately is not the overflow check nor the unscaling: those run over the engine's
// gradient buffers. Pure arithmetic on a few numbers, so it is tested by replaying sequences.
#pragma once
#include <cstdint>

#include "core/state.h"

namespace zt::optim {

// A DeepSpeed config's fp16 section (deepspeed/runtime/precision_config.py); defaults are
// DeepSpeed's.
struct LossScalerConfig {
  double loss_scale = 0;                // fp16.loss_scale: 0 = dynamic, > 0 = this fixed scale
  int initial_scale_power = 16;         // dynamic: the first scale is 2^initial_scale_power
  int64_t loss_scale_window = 1000;     // dynamic: clean steps between two doublings
  int hysteresis = 2;                   // dynamic: overflows that lower the scale only once all are used
  bool consecutive_hysteresis = false;  // refill the hysteresis after every clean step
  double min_loss_scale = 1;            // dynamic: the scale never goes below this
  // An overflow when the scale is already min_loss_scale (and the hysteresis used up) throws,
  // as DeepSpeed does ("Current loss scale already at minimum"). DeepSpeed has no config key
  // for it: ZeRO's scaler is built with the constructor default, true.
  bool raise_error_at_min_scale = true;

  bool dynamic() const { return loss_scale == 0; }
  // Throws an Error naming the fp16.* key that is out of range (DeepSpeed's validators, plus
  // hysteresis >= 1: DeepSpeed takes 0, and then never lowers the scale).
  void check() const;
};

class LossScaler final : public Stateful {
 public:
  explicit LossScaler(const LossScalerConfig& config);  // config.check()s

  // One optimizer step's outcome; returns whether the step is skipped (= overflow, for the
  // fixed scale too, as DeepSpeed's ZeRO optimizers skip it). Throws an Error when the scale
  // cannot go lower (raise_error_at_min_scale); the state is then unchanged.
  bool update(bool overflow);

  float scale() const { return float(scale_); }  // exact: the scale is a power of two or the config's
  double scale_exact() const { return scale_; }  // DeepSpeed's cur_scale (a Python float)
  bool dynamic() const { return config_.dynamic(); }
  const LossScalerConfig& config() const { return config_; }

  int64_t iteration() const { return iteration_; }                    // update() calls: DeepSpeed's cur_iter
  int64_t last_overflow_iteration() const { return last_overflow_; }  // -1: none yet (cur_iter based)
  int hysteresis_left() const { return hysteresis_left_; }            // DeepSpeed's cur_hysteresis
  int64_t overflows() const { return overflows_; }                    // update(true) calls
  // Every overflow skips its step, so this equals overflows(); named for the logs (DeepSpeed's
  // engine counts skipped_steps).
  int64_t skipped_steps() const { return overflows_; }

  // "ztrain.loss_scaler": the scale, the counters and (for reading only) the config. Loading
  // restores them exactly when the checkpoint and this run are both dynamic. Otherwise (fixed
  // <-> dynamic, or a checkpoint without a loss scaler: an fp32 run) the scale and hysteresis
  // start as configured, a fresh window from the checkpoint's iteration on, and only the
  // counters carry over. As for the LR schedule, the parameters are this run's; a saved
  // hysteresis above this run's is cut to it, a saved scale below min_loss_scale raised to it.
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t iteration_ = 0;
  int64_t last_overflow_ = -1;
  int hysteresis_left_;
  int64_t overflows_ = 0;
};

}  // namespace zt::optim
