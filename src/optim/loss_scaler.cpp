// loss_scaler.cpp: see loss_scaler.h.
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zt::optim {

// DeepSpeed's scale factor: fixed at 2 (DynamicLossScaler.scale_factor, no config key).
constexpr double kScaleFactor = 2.0;

void LossScalerConfig::check() const {
  ZT_CHECK(std::isfinite(loss_scale) && loss_scale >= 0, "fp16.loss_scale must be a finite number >= 0 ",
           "(0 enables dynamic loss scaling), got ", loss_scale);
  if (!dynamic()) return;  // DeepSpeed checks the dynamic keys only when they are used
  ZT_CHECK(initial_scale_power >= 0 && initial_scale_power <= 127,
           "fp16.initial_scale_power must be an integer in [0, 127] (the first scale is 2^power), got ",
           initial_scale_power);
  ZT_CHECK(loss_scale_window > 0, "fp16.loss_scale_window must be > 0 when dynamic loss scaling is enabled ",
           "(loss_scale=0), got ", loss_scale_window);
  ZT_CHECK(std::isfinite(min_loss_scale) && min_loss_scale > 0,
           "fp16.min_loss_scale must be > 0 when dynamic loss scaling is enabled (loss_scale=0), got ", min_loss_scale);
  ZT_CHECK(hysteresis >= 1, "fp16.hysteresis must be at least 1 (overflows tolerated before the scale is lowered; ",
           "1 lowers it at every overflow), got ", hysteresis);
}

LossScaler::LossScaler(const LossScalerConfig& config) : config_(config) {
  config_.check();
  scale_ = config_.dynamic() ? std::ldexp(1.0, config_.initial_scale_power) : config_.loss_scale;
  hysteresis_left_ = config_.hysteresis;
}

bool LossScaler::update(bool overflow) {
  if (config_.dynamic()) {
    if (overflow) {
      if (config_.hysteresis == 1 || hysteresis_left_ == 1) {
        ZT_CHECK(
            !(scale_ == config_.min_loss_scale && config_.raise_error_at_min_scale),
            "fp16: the gradients overflowed (inf or NaN) at the minimum loss scale ", config_.min_loss_scale,
            " (fp16.min_loss_scale), so the scale cannot go lower (DeepSpeed stops here too); lower the learning rate, "
            "lower fp16.min_loss_scale, or train in bf16");
        scale_ = std::max(scale_ / kScaleFactor, config_.min_loss_scale);
      } else {
        // Hysteresis: this overflow is tolerated; the scale stays.
        --hysteresis_left_;
      }
      last_overflow_ = iteration_;
    } else {
      if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
      // Clean steps since the last overflow, not counting this one: a doubling every
      // loss_scale_window of them (DeepSpeed's stable_interval).
      const int64_t stable = iteration_ - last_overflow_ - 1;
      if (stable > 0 && stable % config_.loss_scale_window == 0) {
        if (!config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
        scale_ *= kScaleFactor;
      }
    }
  }
  ++iteration_;
  if (overflow) ++overflows_;
  return overflow;
}

void LossScaler::save_state(StateWriter& w) const {
  w.put_json("ztrain.loss_scaler", {{"dynamic", dynamic()},
                                    {"scale", scale_},
                                    {"iteration", iteration_},
                                    {"last_overflow_iteration", last_overflow_},
                                    {"hysteresis_left", hysteresis_left_},
                                    {"overflows", overflows_},
                                    {"config",
                                     {{"loss_scale", config_.loss_scale},
                                      {"initial_scale_power", config_.initial_scale_power},
                                      {"loss_scale_window", config_.loss_scale_window},
                                      {"hysteresis", config_.hysteresis},
                                      {"consecutive_hysteresis", config_.consecutive_hysteresis},
                                      {"min_loss_scale", config_.min_loss_scale}}}});
}

void LossScaler::load_state(StateReader& r) {
  if (!r.find_json("ztrain.loss_scaler")) return;  // a run without loss scaling: start as configured
  const int64_t it = r.get_int("ztrain.loss_scaler.iteration");
  const int64_t overflows = r.get_int("ztrain.loss_scaler.overflows");
  const bool was_dynamic = r.get_bool("ztrain.loss_scaler.dynamic");
  ZT_CHECK(it >= 0 && overflows >= 0 && overflows <= it, r.source(),
           ": the loss scaler's iteration / overflow counts are inconsistent; the checkpoint is damaged");
  iteration_ = it;
  overflows_ = overflows;
  if (!(was_dynamic && dynamic())) {
    // Fixed <-> dynamic: the configured start, with a fresh loss_scale_window from here.
    last_overflow_ = it - 1;
    return;
  }
  const double scale = r.get_number("ztrain.loss_scaler.scale");
  const int64_t last = r.get_int("ztrain.loss_scaler.last_overflow_iteration");
  const int64_t hyst = r.get_int("ztrain.loss_scaler.hysteresis_left");
  ZT_CHECK(std::isfinite(scale) && scale > 0 && last >= -1 && last < it && hyst >= 1, r.source(),
           ": the loss scaler's state (scale ", scale, ", last overflow ", last, ", hysteresis ", hyst,
           ") is out of range; the checkpoint is damaged");
  scale_ = std::max(scale, config_.min_loss_scale);
  last_overflow_ = last;
  hysteresis_left_ = int(std::min<int64_t>(hyst, config_.hysteresis));
}

}  // namespace zt::optim
