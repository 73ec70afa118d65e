// schedule.cpp: see schedule.h.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zt::optim {

double Schedule::lr_at(int64_t s) const {
  double w = double(warmup_steps);
  double m = 1.0;
  switch (kind) {
    case ScheduleKind::constant: m = 1.0; break;
    case ScheduleKind::constant_with_warmup: m = s < warmup_steps ? double(s) / std::max(1.0, w) : 1.0; break;
    case ScheduleKind::linear:
      if (s < warmup_steps)
        m = double(s) / std::max(1.0, w);
      else
        m = std::max(0.0, double(total_steps - s) / std::max(1.0, double(total_steps - warmup_steps)));
      break;
    case ScheduleKind::cosine:
      if (s < warmup_steps) {
        m = double(s) / std::max(1.0, w);
      } else {
        double progress = double(s - warmup_steps) / std::max(1.0, double(total_steps - warmup_steps));
        m = std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));
      }
      break;
  }
  return base_lr * m;
}

ScheduleKind schedule_kind_from_string(const std::string& s) {
  if (s == "constant") return ScheduleKind::constant;
  if (s == "constant_with_warmup") return ScheduleKind::constant_with_warmup;
  if (s == "linear") return ScheduleKind::linear;
  if (s == "cosine") return ScheduleKind::cosine;
  throw Error(str_cat("--lr_scheduler_type \"", s,
                      "\" is not supported; use one of constant, constant_with_warmup, linear, cosine"));
}

}  // namespace zt::optim
