// schedule.h: learning-rate schedules. HF Trainer's (transformers.get_scheduler): constant,
// constant_with_warmup, linear, cosine, cosine_with_min_lr, warmup_stable_decay, where optimizer
// step s (0-based) uses base_lr * lambda(s) (HF's LambdaLR: the step before scheduler.step()
// has been called s times) and warmup is linear from 0 (warmup_stable_decay: from min_lr_ratio,
// in the warmup_type shape). Their extra arguments are HF's --lr_scheduler_kwargs, a JSON
// object (schedule_apply_kwargs). Formulas as in transformers/optimization.py at commit
// 005edacb6b5d (get_wsd_schedule with warmup_type and a min_lr_ratio floor in warmup). And DeepSpeed's
// (deepspeed/runtime/ lr_schedules.py), selected by their DeepSpeed names: WarmupLR, WarmupDecayLR, WarmupCosineLR.
//
// DeepSpeed step indexing (kept exactly, so a DeepSpeed config gives DeepSpeed's LR curve):
// the engine calls scheduler.step() after each optimizer step, and the scheduler starts at
// last_batch_iteration = -1. So optimizer step s uses DeepSpeed's formula at iteration s-1,
// and step 0 uses the pre-start value (warmup_min_lr for WarmupLR/WarmupDecayLR, 0 for
// WarmupCosineLR). lr_at(s + 1) is the LR DeepSpeed reports after step s (get_last_lr()).
// Not here: OneCycle, LRRangeTest, HF's cosine_warmup_with_min_lr and reduce_lr_on_plateau
// (rejected by name: the latter's LR follows the evaluation history, not the step).
#pragma once
#include <cstdint>
#include <string>

#include "core/state.h"

namespace zt::optim {

enum class ScheduleKind {
  constant,
  constant_with_warmup,
  linear,
  cosine,
  warmup_lr,             // DeepSpeed WarmupLR: warmup then constant at base_lr
  warmup_decay_lr,       // DeepSpeed WarmupDecayLR: warmup then linear decay to 0 at total_steps
  warmup_cosine_lr,      // DeepSpeed WarmupCosineLR: warmup then cosine decay to cos_min_ratio
  cosine_with_min_lr,    // HF: cosine from base_lr down to min_lr_rate * base_lr
  warmup_stable_decay,   // HF: warmup, constant, then decay to min_lr_rate * base_lr
  cosine_with_restarts,  // HF: num_cycles hard restarts of a half-cosine down to 0
  polynomial,            // HF: (1 - progress)^power from base_lr down to lr_end, then lr_end
  inverse_sqrt,          // HF: 1 / sqrt((s + timescale - warmup) / timescale) after the warmup
};

// warmup_stable_decay's warmup_type / decay_type: HF's "linear", "cosine", "1-sqrt".
enum class WsdShape { linear, cosine, one_minus_sqrt };

struct Schedule {
  ScheduleKind kind = ScheduleKind::linear;
  // HF kinds: the peak LR. WarmupLR / WarmupDecayLR: warmup_max_lr. WarmupCosineLR: the
  // optimizer's lr, which its ratios multiply.
  double base_lr = 5e-5;
  int64_t warmup_steps = 0;  // DeepSpeed kinds: warmup_num_steps (DeepSpeed uses at least 2)
  int64_t total_steps = 1;   // DeepSpeed kinds: total_num_steps

  // DeepSpeed parameters, unused by the HF kinds; defaults are DeepSpeed's.
  double warmup_min_lr = 0.0;     // WarmupLR / WarmupDecayLR start
  bool warmup_log = true;         // warmup_type "log" (DeepSpeed's default) or "linear"
  double warmup_min_ratio = 0.0;  // WarmupCosineLR start, a ratio of base_lr
  double cos_min_ratio = 1e-4;    // WarmupCosineLR end, a ratio of base_lr

  // HF --lr_scheduler_kwargs, unused by the other kinds; defaults are HF's.
  // cosine, cosine_with_min_lr, warmup_stable_decay (cosine decay); cosine_with_restarts: the
  // number of restarts, HF's default 1 (schedule_apply_kwargs sets it for that kind).
  double num_cycles = 0.5;
  // cosine_with_min_lr: min_lr_rate (or min_lr / base_lr); warmup_stable_decay: min_lr_ratio.
  double min_lr_rate = 0.0;
  int64_t num_stable_steps = 0;  // warmup_stable_decay; HF's default: total - warmup - decay
  int64_t num_decay_steps = 0;   // warmup_stable_decay (required)
  WsdShape warmup_shape = WsdShape::linear;
  WsdShape decay_shape = WsdShape::cosine;
  double lr_end = 1e-7;   // polynomial: the final LR (absolute, not a ratio), < base_lr
  double power = 1.0;     // polynomial: the decay's exponent
  int64_t timescale = 0;  // inverse_sqrt; 0 = HF's default: warmup_steps, or 10000 without warmup

  double lr_at(int64_t step) const;
};

// Applies HF's scheduler_specific_kwargs (--lr_scheduler_kwargs, a JSON object; "" = {}) to s,
// whose kind, base_lr, warmup_steps and total_steps are already set. Keys the kind does not
// take (HF: a TypeError, or silently ignored for constant / constant_with_warmup), values of
// the wrong type or range, and HF's own ValueErrors (both or neither of min_lr / min_lr_rate)
// throw an Error naming the key and what to do. total_steps <= 0 means the run's length is
// not known yet: the arguments are checked, but not warmup_stable_decay's derived stable phase.
void schedule_apply_kwargs(Schedule& s, const std::string& kwargs_json);

// DeepSpeed's formula at scheduler iteration it >= 0 (last_batch_iteration), without the
// step shift of lr_at; exposed for tests and for comparing against DeepSpeed's own tables.
double deepspeed_lr_at_iteration(const Schedule& s, int64_t it);

// The schedule in a checkpoint (HF saves scheduler.pt): its type and the optimizer steps it
// has seen (HF's last_epoch), with the LR it holds then. The LR is a pure function of the
// step, so loading only reads the step back: the trainer resumes at the data cursor's step.
// The schedule's parameters come from the resumed run's flags, as before.
class ScheduleState final : public Stateful {
 public:
  ScheduleState(const Schedule& s, int64_t step) : schedule_(s), step_(step) {}
  int64_t step() const { return step_; }
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;

 private:
  const Schedule& schedule_;
  int64_t step_;
};

// The --lr_scheduler_type name of a kind (the inverse of schedule_kind_from_string).
const char* schedule_kind_name(ScheduleKind k);

// Parses an --lr_scheduler_type value (HF names, or DeepSpeed's scheduler type names);
// throws an Error naming the valid ones.
ScheduleKind schedule_kind_from_string(const std::string& s);

}  // namespace zt::optim
