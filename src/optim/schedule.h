// schedule.h: learning-rate schedules with HF Trainer's names and formulas
// (transformers.get_scheduler): constant, constant_with_warmup, linear, cosine. The
// multiplier for optimizer step s (0-based) is lambda(s); warmup is linear from 0.
#pragma once
#include <cstdint>
#include <string>

namespace zt::optim {

enum class ScheduleKind { constant, constant_with_warmup, linear, cosine };

struct Schedule {
  ScheduleKind kind = ScheduleKind::linear;
  double base_lr = 5e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  double lr_at(int64_t step) const;
};

// Parses an HF --lr_scheduler_type value; throws an Error naming the valid ones.
ScheduleKind schedule_kind_from_string(const std::string& s);

}  // namespace zt::optim
