// schedule.cpp: see schedule.h.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zt::optim {
namespace {

bool is_deepspeed(ScheduleKind k) {
  return k == ScheduleKind::warmup_lr || k == ScheduleKind::warmup_decay_lr || k == ScheduleKind::warmup_cosine_lr;
}

// DeepSpeed's warmup fraction gamma in [0, 1) for it < w: log(it+1)/log(w) or it/w.
double deepspeed_warmup_gamma(const Schedule& s, int64_t it, int64_t w) {
  return s.warmup_log ? std::log(double(it + 1)) / std::log(double(w)) : double(it) / double(w);
}

}  // namespace

double deepspeed_lr_at_iteration(const Schedule& s, int64_t it) {
  // DeepSpeed clamps warmup_num_steps to >= 2 so that log(w) is never 0.
  const int64_t w = std::max<int64_t>(2, s.warmup_steps);
  const double total = double(s.total_steps);
  if (s.kind == ScheduleKind::warmup_cosine_lr) {
    double ratio;
    if (it < w) {
      ratio = s.warmup_min_ratio + deepspeed_warmup_gamma(s, it, w) * (1.0 - s.warmup_min_ratio);
    } else {
      // DeepSpeed divides by (total - w) unguarded and lets the cosine rise again past total;
      // we guard the division and hold the end ratio after total_num_steps (the only
      // departures, both outside a well-formed run).
      const double real_total = std::max(1.0, total - double(w));
      const double progress = std::min(1.0, double(it - w + 1) / real_total);
      ratio = std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
    }
    return s.base_lr * ratio;
  }
  double gamma;
  if (it < w)
    gamma = deepspeed_warmup_gamma(s, it, w);
  else if (s.kind == ScheduleKind::warmup_decay_lr)
    gamma = std::max(0.0, (total - double(it)) / std::max(1.0, total - double(w)));
  else
    gamma = 1.0;
  return s.warmup_min_lr + (s.base_lr - s.warmup_min_lr) * gamma;
}

double Schedule::lr_at(int64_t s) const {
  if (is_deepspeed(kind)) {
    // Step 0 runs before the first scheduler.step(): DeepSpeed's pre-start value.
    if (s <= 0) return kind == ScheduleKind::warmup_cosine_lr ? 0.0 : warmup_min_lr;
    return deepspeed_lr_at_iteration(*this, s - 1);
  }
  double w = double(warmup_steps);
  double m = 1.0;
  switch (kind) {
    case ScheduleKind::constant:
      m = 1.0;
      break;
    case ScheduleKind::constant_with_warmup:
      m = s < warmup_steps ? double(s) / std::max(1.0, w) : 1.0;
      break;
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
    default:
      break;
  }
  return base_lr * m;
}

ScheduleKind schedule_kind_from_string(const std::string& s) {
  if (s == "constant") return ScheduleKind::constant;
  if (s == "constant_with_warmup") return ScheduleKind::constant_with_warmup;
  if (s == "linear") return ScheduleKind::linear;
  if (s == "cosine") return ScheduleKind::cosine;
  if (s == "WarmupLR") return ScheduleKind::warmup_lr;
  if (s == "WarmupDecayLR") return ScheduleKind::warmup_decay_lr;
  if (s == "WarmupCosineLR") return ScheduleKind::warmup_cosine_lr;
  throw Error(str_cat("--lr_scheduler_type ", quote(s),
                      " is not supported; use one of constant, constant_with_warmup, linear, cosine, "
                      "WarmupLR, WarmupDecayLR, WarmupCosineLR (DeepSpeed's)"));
}

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::constant:
      return "constant";
    case ScheduleKind::constant_with_warmup:
      return "constant_with_warmup";
    case ScheduleKind::linear:
      return "linear";
    case ScheduleKind::cosine:
      return "cosine";
    case ScheduleKind::warmup_lr:
      return "WarmupLR";
    case ScheduleKind::warmup_decay_lr:
      return "WarmupDecayLR";
    case ScheduleKind::warmup_cosine_lr:
      return "WarmupCosineLR";
  }
  return "?";
}

void ScheduleState::save_state(StateWriter& w) const {
  w.put_json("ztrain.lr_scheduler", {{"type", schedule_kind_name(s_.kind)}, {"step", step_}, {"lr", s_.lr_at(step_)}});
}

void ScheduleState::load_state(StateReader& r) {
  const int64_t step = r.get_int("ztrain.lr_scheduler.step");
  ZT_CHECK(step >= 0, r.source(), ": \"ztrain.lr_scheduler.step\" is negative; the checkpoint is damaged");
  step_ = step;
}

}  // namespace zt::optim
