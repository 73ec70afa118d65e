// schedule.cpp: see schedule.h.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/edit_distance.h"
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

// HF's linear warmup fraction: s / max(1, w).
double hf_warmup(int64_t s, int64_t w) { return double(s) / std::max(1.0, double(w)); }

// HF's cosine factor 0.5 (1 + cos(pi num_cycles 2 progress)), in HF's order of operations.
double hf_cosine(double num_cycles, double progress) {
  return 0.5 * (1.0 + std::cos(M_PI * num_cycles * 2.0 * progress));
}

// transformers' _get_wsd_scheduler_lambda: min_lr_ratio is the floor of warmup and decay alike.
double wsd_lambda(const Schedule& k, int64_t s) {
  const int64_t w = k.warmup_steps, stable = k.num_stable_steps, decay = k.num_decay_steps;
  const double floor = k.min_lr_rate;
  if (s < w) {
    const double p = hf_warmup(s, w);
    double f = p;
    if (k.warmup_shape == WsdShape::cosine) f = 0.5 * (1.0 - std::cos(M_PI * p));
    if (k.warmup_shape == WsdShape::one_minus_sqrt) f = 1.0 - std::sqrt(1.0 - p);
    return std::max(0.0, f * (1.0 - floor) + floor);
  }
  if (s < w + stable) return 1.0;
  if (s < w + stable + decay) {
    const double p = double(s - w - stable) / std::max(1.0, double(decay));
    double f = 1.0 - p;
    if (k.decay_shape == WsdShape::cosine) f = hf_cosine(k.num_cycles, p);
    if (k.decay_shape == WsdShape::one_minus_sqrt) f = 1.0 - std::sqrt(p);
    return std::max(0.0, f * (1.0 - floor) + floor);
  }
  return floor;
}

// transformers' cosine with hard restarts: the half-cosine restarts num_cycles times over the
// decay and the LR is 0 from the end of the run on (no rise past it, unlike plain cosine).
double restarts_lambda(const Schedule& k, int64_t s) {
  const double progress = double(s - k.warmup_steps) / std::max(1.0, double(k.total_steps - k.warmup_steps));
  if (progress >= 1.0) return 0.0;
  // Python's float % 1.0; both operands are >= 0 here, where it equals fmod.
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(k.num_cycles * progress, 1.0))));
}

// transformers' polynomial decay: an absolute LR from base_lr down to lr_end, divided by
// base_lr because LambdaLR multiplies it back. HF divides by total - warmup unguarded; that is
// 0 only when the warmup fills the run, and then only at step total (the LR reported after the
// last step), where we return the end value instead of raising.
double polynomial_lambda(const Schedule& k, int64_t s) {
  const double decay_steps = double(k.total_steps - k.warmup_steps);
  if (s > k.total_steps || decay_steps <= 0) return k.lr_end / k.base_lr;
  const double remaining = 1.0 - double(s - k.warmup_steps) / decay_steps;
  return ((k.base_lr - k.lr_end) * std::pow(remaining, k.power) + k.lr_end) / k.base_lr;
}

// transformers' inverse square root: 1 at the end of the warmup, then timescale's scale.
double inverse_sqrt_lambda(const Schedule& k, int64_t s) {
  const int64_t ts = k.timescale > 0 ? k.timescale : (k.warmup_steps > 0 ? k.warmup_steps : 10000);
  const int64_t shift = ts - k.warmup_steps;
  return 1.0 / std::sqrt(double(s + shift) / double(ts));
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
    case ScheduleKind::cosine_with_min_lr:
      if (s < warmup_steps) {
        m = double(s) / std::max(1.0, w);
      } else {
        // HF does not clamp progress: past total_steps the cosine rises again, as in HF.
        const double progress = double(s - warmup_steps) / std::max(1.0, double(total_steps - warmup_steps));
        const double rate = kind == ScheduleKind::cosine ? 0.0 : min_lr_rate;
        m = std::max(0.0, hf_cosine(num_cycles, progress) * (1.0 - rate) + rate);
      }
      break;
    case ScheduleKind::warmup_stable_decay:
      m = wsd_lambda(*this, s);
      break;
    case ScheduleKind::cosine_with_restarts:
    case ScheduleKind::polynomial:
    case ScheduleKind::inverse_sqrt:
      // The same linear warmup from 0 as the others.
      if (s < warmup_steps)
        m = double(s) / std::max(1.0, w);
      else if (kind == ScheduleKind::cosine_with_restarts)
        m = restarts_lambda(*this, s);
      else if (kind == ScheduleKind::polynomial)
        m = polynomial_lambda(*this, s);
      else
        m = inverse_sqrt_lambda(*this, s);
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
  if (s == "cosine_with_min_lr") return ScheduleKind::cosine_with_min_lr;
  if (s == "warmup_stable_decay") return ScheduleKind::warmup_stable_decay;
  if (s == "cosine_with_restarts") return ScheduleKind::cosine_with_restarts;
  if (s == "polynomial") return ScheduleKind::polynomial;
  if (s == "inverse_sqrt") return ScheduleKind::inverse_sqrt;
  // HF steps ReduceLROnPlateau with each evaluation's metric, so its LR is a function of the
  // evaluation history, not of the step: every other schedule here is, which is what lets a
  // resume (and every rank) recompute the LR from the step alone.
  ZT_CHECK(s != "reduce_lr_on_plateau",
           "--lr_scheduler_type reduce_lr_on_plateau is not implemented: its LR follows the evaluation metric's "
           "history, and ztrain's schedules are functions of the step (exact resume); use cosine, linear or "
           "warmup_stable_decay");
  throw Error(str_cat("--lr_scheduler_type ", quote(s),
                      " is not supported; use one of constant, constant_with_warmup, linear, cosine, "
                      "cosine_with_restarts, polynomial, inverse_sqrt, cosine_with_min_lr, warmup_stable_decay, "
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
    case ScheduleKind::cosine_with_min_lr:
      return "cosine_with_min_lr";
    case ScheduleKind::warmup_stable_decay:
      return "warmup_stable_decay";
    case ScheduleKind::cosine_with_restarts:
      return "cosine_with_restarts";
    case ScheduleKind::polynomial:
      return "polynomial";
    case ScheduleKind::inverse_sqrt:
      return "inverse_sqrt";
  }
  return "?";
}

namespace {

using json = nlohmann::json;

// The keys HF's get_*_schedule function of the kind takes besides optimizer, num_warmup_steps,
// num_training_steps and last_epoch (which the Trainer passes itself).
std::vector<std::string> kwargs_of(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::cosine:
    case ScheduleKind::cosine_with_restarts:
      return {"num_cycles"};
    case ScheduleKind::polynomial:
      return {"lr_end", "power"};
    case ScheduleKind::inverse_sqrt:
      // get_inverse_sqrt_schedule's own argument. HF's get_scheduler drops every
      // lr_scheduler_kwargs key for inverse_sqrt; ztrain takes this one (docs/training.md).
      return {"timescale"};
    case ScheduleKind::cosine_with_min_lr:
      return {"num_cycles", "min_lr", "min_lr_rate"};
    case ScheduleKind::warmup_stable_decay:
      return {"num_decay_steps", "num_stable_steps", "warmup_type", "decay_type", "min_lr_ratio", "num_cycles"};
    default:
      return {};
  }
}

std::string kw(const std::string& key) { return str_cat("--lr_scheduler_kwargs key ", quote(key)); }

double kw_number(const std::string& key, const json& v, double lo, double hi, const char* range) {
  ZT_CHECK(v.is_number(), kw(key), " must be a number, got ", v.dump());
  const double x = v.get<double>();
  ZT_CHECK(x >= lo && x <= hi, kw(key), " must be ", range, ", got ", v.dump());
  return x;
}

// A step count: an integer >= 0 (an integral float such as 1e3 too, as Python accepts it).
int64_t kw_steps(const std::string& key, const json& v) {
  const bool integral = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                                  v.get<double>() == std::floor(v.get<double>()));
  ZT_CHECK(integral && v.get<double>() >= 0 && v.get<double>() < 9e15, kw(key),
           " must be a whole number of optimizer steps >= 0, got ", v.dump());
  return v.is_number_integer() ? v.get<int64_t>() : int64_t(v.get<double>());
}

WsdShape kw_shape(const std::string& key, const json& v) {
  const std::string t = v.is_string() ? v.get<std::string>() : v.dump();
  if (t == "linear") return WsdShape::linear;
  if (t == "cosine") return WsdShape::cosine;
  ZT_CHECK(t == "1-sqrt", kw(key), " must be \"linear\", \"cosine\" or \"1-sqrt\", got ", v.dump());
  return WsdShape::one_minus_sqrt;
}

// polynomial's lr_end (an LR, HF's default 1e-7) and power; HF's ValueError when the end is not
// below the start, worded for the command line.
void apply_polynomial(Schedule& s, const json* lr_end, const json* power) {
  if (lr_end) s.lr_end = kw_number("lr_end", *lr_end, 0, 1e9, "a learning rate >= 0");
  if (power) s.power = kw_number("power", *power, 0, 1e9, "a number >= 0");
  ZT_CHECK(s.base_lr > s.lr_end, "--lr_scheduler_type polynomial: lr_end (", s.lr_end,
           ") must be smaller than --learning_rate (", s.base_lr, "); set lr_end in --lr_scheduler_kwargs");
}

// A key the kind does not take: one message saying which keys it does take.
[[noreturn]] void unknown_kwarg(const Schedule& s, const std::string& key, const std::vector<std::string>& keys) {
  const std::string kind = schedule_kind_name(s.kind);
  if (key == "num_warmup_steps")
    throw Error(str_cat(kw(key), ": the warmup comes from --warmup_steps or --warmup_ratio, as in HF's Trainer"));
  if (key == "num_training_steps")
    throw Error(
        str_cat(kw(key), ": the run's length comes from --max_steps or --num_train_epochs, as in HF's Trainer"));
  if (s.kind == ScheduleKind::warmup_lr || s.kind == ScheduleKind::warmup_decay_lr ||
      s.kind == ScheduleKind::warmup_cosine_lr)
    throw Error(str_cat(kw(key), " is not used by DeepSpeed's ", kind,
                        "; set its parameters in the DeepSpeed config's scheduler.params (docs/deepspeed.md)"));
  if (keys.empty())
    throw Error(str_cat(kw(key), ": --lr_scheduler_type ", kind, " takes no --lr_scheduler_kwargs; drop them"));
  std::string list, best;
  size_t best_d = SIZE_MAX;
  for (const std::string& k : keys) {
    list += (list.empty() ? "" : ", ") + k;
    if (size_t d = edit_distance(key, k); d < best_d) best_d = d, best = k;
  }
  throw Error(str_cat(kw(key), " is not used by ", kind, "; it takes ", list,
                      best_d <= 3 ? str_cat(" (did you mean ", best, "?)") : std::string()));
}

}  // namespace

void schedule_apply_kwargs(Schedule& s, const std::string& kwargs_json) {
  json kwargs = json::object();
  if (!kwargs_json.empty()) {
    try {
      kwargs = json::parse(kwargs_json);
    } catch (const json::parse_error& e) {
      throw Error(str_cat("--lr_scheduler_kwargs is not valid JSON (", e.what(),
                          "); write a JSON object such as '{\"num_decay_steps\": 100}'"));
    }
  }
  ZT_CHECK(kwargs.is_object(), "--lr_scheduler_kwargs must be a JSON object such as '{\"num_decay_steps\": 100}', got ",
           kwargs.dump());
  const std::vector<std::string> keys = kwargs_of(s.kind);
  for (auto& [k, v] : kwargs.items())
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) unknown_kwarg(s, k, keys);
  auto get = [&](const char* key) -> const json* {
    auto it = kwargs.find(key);
    return it == kwargs.end() ? nullptr : &*it;
  };
  if (s.kind == ScheduleKind::cosine_with_restarts) s.num_cycles = 1;  // HF's default for this kind
  if (const json* v = get("num_cycles")) s.num_cycles = kw_number("num_cycles", *v, 0, 1e9, "a number >= 0");
  if (s.kind == ScheduleKind::polynomial) apply_polynomial(s, get("lr_end"), get("power"));
  if (const json* v = get("timescale")) {
    s.timescale = kw_steps("timescale", *v);
    ZT_CHECK(s.timescale >= 1, kw("timescale"), " must be a whole number of optimizer steps >= 1, got ", v->dump());
  }
  if (s.kind == ScheduleKind::cosine_with_min_lr) {
    const json *lr = get("min_lr"), *rate = get("min_lr_rate");
    // HF's ValueErrors, worded for the command line.
    ZT_CHECK(!(lr && rate), "--lr_scheduler_kwargs: only one of min_lr or min_lr_rate should be set");
    ZT_CHECK(lr || rate,
             "--lr_scheduler_type cosine_with_min_lr needs min_lr or min_lr_rate in --lr_scheduler_kwargs, ",
             "e.g. '{\"min_lr_rate\": 0.1}'");
    if (rate) s.min_lr_rate = kw_number("min_lr_rate", *rate, 0, 1, "a ratio of the learning rate in [0, 1]");
    if (lr) {
      kw_number("min_lr", *lr, 0, s.base_lr, str_cat("in [0, ", s.base_lr, "] (the learning rate)").c_str());
      s.min_lr_rate = lr->get<double>() / s.base_lr;  // HF: min_lr / optimizer.defaults["lr"]
    }
  }
  if (s.kind != ScheduleKind::warmup_stable_decay) return;
  const json* decay = get("num_decay_steps");
  ZT_CHECK(decay, "--lr_scheduler_type warmup_stable_decay needs num_decay_steps in --lr_scheduler_kwargs, ",
           "e.g. '{\"num_decay_steps\": 100}'");
  s.num_decay_steps = kw_steps("num_decay_steps", *decay);
  if (const json* v = get("warmup_type")) s.warmup_shape = kw_shape("warmup_type", *v);
  if (const json* v = get("decay_type")) s.decay_shape = kw_shape("decay_type", *v);
  if (const json* v = get("min_lr_ratio"))
    s.min_lr_rate = kw_number("min_lr_ratio", *v, 0, 1, "a ratio of the learning rate in [0, 1]");
  if (const json* v = get("num_stable_steps")) {
    s.num_stable_steps = kw_steps("num_stable_steps", *v);
  } else if (s.total_steps > 0) {
    // HF's default stable phase: whatever the warmup and the decay leave of the run. HF goes on
    // with a negative one (the decay then starts inside the warmup); we stop.
    s.num_stable_steps = s.total_steps - s.warmup_steps - s.num_decay_steps;
    ZT_CHECK(s.num_stable_steps >= 0, "warmup_stable_decay: warmup (", s.warmup_steps, ") + num_decay_steps (",
             s.num_decay_steps, ") exceed the run's ", s.total_steps,
             " optimizer steps; lower them, or set num_stable_steps in --lr_scheduler_kwargs");
  }
}

void ScheduleState::save_state(StateWriter& w) const {
  w.put_json("ztrain.lr_scheduler",
             {{"type", schedule_kind_name(schedule_.kind)}, {"step", step_}, {"lr", schedule_.lr_at(step_)}});
}

void ScheduleState::load_state(StateReader& r) {
  const int64_t step = r.get_int("ztrain.lr_scheduler.step");
  ZT_CHECK(step >= 0, r.source(), ": \"ztrain.lr_scheduler.step\" is negative; the checkpoint is damaged");
  step_ = step;
}

}  // namespace zt::optim
