// train_args.cpp: the command line's arguments as the library's schedule, HF's warmup steps, the
// DeepSpeed precision sections as JSON (train_args.h).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train_args.h"

namespace zt {
using json = nlohmann::json;
using Enabled = DeepSpeedPrecision::Enabled;

LrSchedule schedule_spec(const TrainArgs& a) {
  LrSchedule s;
  s.type = a.lr_scheduler_type;
  s.learning_rate = a.learning_rate;
  s.warmup_ratio = a.warmup_ratio;
  s.warmup_steps = a.warmup_steps;
  s.kwargs = a.lr_scheduler_kwargs;
  s.warmup_min_lr = a.warmup_min_lr;
  s.warmup_max_lr = a.warmup_max_lr;
  s.warmup_type = a.warmup_type;
  s.warmup_min_ratio = a.warmup_min_ratio;
  s.cos_min_ratio = a.cos_min_ratio;
  s.total_num_steps = a.total_num_steps;
  return s;
}

std::optional<int64_t> hf_warmup_steps(const TrainArgs& a, int64_t total) {
  return warmup_steps_of(schedule_spec(a), total);
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
  return make_schedule(schedule_spec(a), total_steps);
}

}  // namespace zt
