// train_args.cpp: what the library derives from the resolved arguments (train_args.h): HF's warmup
// steps and LR schedule, the DeepSpeed precision sections as JSON.
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/train_args.h"

namespace zt {
using json = nlohmann::json;
using Enabled = DeepSpeedPrecision::Enabled;

// The warmup steps HF derives from --warmup_steps / --warmup_ratio for a run of total steps;
// empty when that needs the total and it is unknown (total <= 0).
std::optional<int64_t> hf_warmup_steps(const TrainArgs& a, int64_t total) {
  const double ws = a.warmup_steps > 0 ? a.warmup_steps : 0;
  if (ws >= 1) return int64_t(ws);
  const double ratio = ws > 0 ? ws : a.warmup_ratio;
  if (ratio <= 0) return 0;
  if (total <= 0) return std::nullopt;
  return int64_t(std::ceil(ratio * double(total)));
}

nlohmann::json deepspeed_precision_json(const DeepSpeedPrecision& d) {
  auto sw = [](Enabled e) -> json {
    if (e == Enabled::absent) return "absent";
    if (e == Enabled::auto_value) return "auto";
    return e == Enabled::on;
  };
  const optim::LossScalerConfig& ls = d.loss_scaler;
  json j = {{"fp16", sw(d.fp16)},
            {"bf16", sw(d.bf16)},
            {"loss_scaler",
             {{"loss_scale", ls.loss_scale},
              {"initial_scale_power", ls.initial_scale_power},
              {"loss_scale_window", ls.loss_scale_window},
              {"hysteresis", ls.hysteresis},
              {"consecutive_hysteresis", ls.consecutive_hysteresis},
              {"min_loss_scale", ls.min_loss_scale},
              {"raise_error_at_min_scale", ls.raise_error_at_min_scale}}},
            {"bf16_check_grad_overflow", d.bf16_check_grad_overflow},
            {"communication_data_type", d.communication_data_type},
            {"activation_checkpointing", nullptr}};
  if (d.activation_checkpointing)
    j["activation_checkpointing"] = {{"number_checkpoints", d.number_checkpoints},
                                     {"partition_activations", d.partition_activations},
                                     {"cpu_checkpointing", d.cpu_checkpointing},
                                     {"contiguous_memory_optimization", d.contiguous_memory_optimization},
                                     {"synchronize_checkpoint_boundary", d.synchronize_checkpoint_boundary},
                                     {"profile", d.profile}};
  return j;
}

optim::Schedule schedule_from_args(const TrainArgs& a, int64_t total_steps) {
  optim::Schedule s;
  s.kind = optim::schedule_kind_from_string(a.lr_scheduler_type);
  s.base_lr = a.learning_rate;
  s.total_steps = total_steps;
  s.warmup_steps = hf_warmup_steps(a, total_steps).value_or(0);
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
  optim::schedule_apply_kwargs(s, a.lr_scheduler_kwargs);
  return s;
}

}  // namespace zt
