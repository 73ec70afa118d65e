// train_config.cpp: what the library derives from the resolved settings (train_config.h): HF's
// warmup steps and the LR schedule once the run's length is known.
#include "train/train_config.h"

#include <cmath>

#include "core/error.h"

namespace zt {

std::optional<int64_t> warmup_steps_of(const LrSchedule& a, int64_t total) {
  const double ws = a.warmup_steps > 0 ? a.warmup_steps : 0;
  if (ws >= 1) return int64_t(ws);
  const double ratio = ws > 0 ? ws : a.warmup_ratio;
  if (ratio <= 0) return 0;
  if (total <= 0) return std::nullopt;
  return int64_t(std::ceil(ratio * double(total)));
}

optim::Schedule make_schedule(const LrSchedule& a, int64_t total_steps) {
  optim::Schedule s;
  s.kind = optim::schedule_kind_from_string(a.type);
  s.base_lr = a.learning_rate;
  s.total_steps = total_steps;
  s.warmup_steps = warmup_steps_of(a, total_steps).value_or(0);
  using K = optim::ScheduleKind;
  if (s.kind == K::warmup_lr || s.kind == K::warmup_decay_lr || s.kind == K::warmup_cosine_lr) {
    // WarmupCosineLR scales the optimizer's lr; the other two interpolate to warmup_max_lr.
    if (s.kind != K::warmup_cosine_lr && a.warmup_max_lr >= 0) s.base_lr = a.warmup_max_lr;
    if (a.total_num_steps > 0) s.total_steps = a.total_num_steps;
    ZT_CHECK(a.warmup_type == "log" || a.warmup_type == "linear", "warmup_type must be log or linear, got ",
             quote(a.warmup_type));
    s.warmup_log = a.warmup_type == "log";
    s.warmup_min_lr = a.warmup_min_lr;
    s.warmup_min_ratio = a.warmup_min_ratio;
    s.cos_min_ratio = a.cos_min_ratio;
  }
  optim::schedule_apply_kwargs(s, a.kwargs);
  return s;
}

}  // namespace zt
