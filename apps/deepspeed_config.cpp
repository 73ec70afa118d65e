// deepspeed_config.cpp: see deepspeed_config.h. One function per config section; each walks
// its keys, so any key it does not handle falls through to a warning by full dotted name.
#include "deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <tuple>

#include "core/edit_distance.h"
#include "core/error.h"
#include "deepspeed_offload.h"
#include "deepspeed_values.h"
#include "optim/optimizer.h"

namespace zt {
namespace {

using namespace ds_values;

// ---- the walk ----

struct Ctx {
  TrainArgs& a;
  int world_size;
  std::vector<std::string> mismatches;  // HF's "- ds X vs hf Y" lines
  std::vector<std::string> warnings;
  std::string batch_error;  // DeepSpeed's batch assertion, raised after the mismatches

  bool given(const char* flag) const { return flag && a.explicit_flags.count(flag) != 0; }
  void mismatch(const std::string& key, const json& ds, const std::string& hf_key, const std::string& hf_val) {
    mismatches.push_back(str_cat("- ds ", key, "=", show_json(ds), " vs hf ", hf_key, "=", hf_val));
  }

  // A key the section did not handle: a known inert one (type-checked, quiet or warned), or
  // an unknown one, warned with the nearest known name of the same section.
  void other(const std::string& key, const json& v, std::initializer_list<const char*> handled) {
    if (const Inert* e = find_inert(key)) {
      if (is_auto(v)) return;  // HF fills "auto" for some of these (stage3_*); nothing asked of us
      check_kind(key, v, e->kind);
      const std::string quiet = e->quiet;
      const bool disabled_section = v.is_object() && v.contains("enabled") && v["enabled"] == json(false);
      if (quiet.empty() || disabled_section || (quiet != "!" && json::parse(quiet) == v)) return;
      warnings.push_back(str_cat("DeepSpeed config key ", key, " is not used by ztrain (value ", show_json(v), ")"));
      return;
    }
    const std::string prefix = key.substr(0, key.rfind('.') + 1);
    std::string best;
    size_t best_d = SIZE_MAX;
    auto consider = [&](const std::string& cand) {
      size_t d = edit_distance(key, cand);
      if (d < best_d) best_d = d, best = cand;
    };
    for (const char* h : handled) consider(prefix + h);
    for (const Inert& e : inert_keys())
      if (std::string(e.key).rfind(prefix, 0) == 0 && std::string(e.key).find('.', prefix.size()) == std::string::npos)
        consider(e.key);
    const bool close = best_d <= std::max<size_t>(2, (best.size() - prefix.size()) / 4);
    warnings.push_back(str_cat("DeepSpeed config key ", key, " is not used by ztrain",
                               close ? str_cat(" (did you mean ", best, "?)") : std::string()));
  }

  static void check_kind(const std::string& key, const json& v, Kind k) {
    int64_t i;
    double d;
    bool b;
    switch (k) {
      case Kind::any:
        break;
      case Kind::boolean:
        read(key, v, false, b, 0, 0);
        break;
      case Kind::number:
        read(key, v, false, d, INT64_MIN, 0);
        break;
      case Kind::integer:
        read(key, v, false, i, INT64_MIN, INT64_MAX);
        break;
      case Kind::object:
        require_object(key, v);
        break;
      case Kind::string:
        read_string(key, v);
        break;
    }
  }
};

// HF's fill_match: "auto" keeps the field (the flag or its default, which HF writes back into
// the DeepSpeed config); an explicit value must equal a flag given on the command line (else
// one mismatch line) and otherwise replaces the default.
template <class T>
void fill_match(Ctx& c, const std::string& key, const json& v, const char* flag, T& field, bool auto_ok = true,
                int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) {
  if (auto_ok && is_auto(v)) return;
  T ds{};
  read(key, v, auto_ok, ds, lo, hi);
  if (c.given(flag) && !(ds == field)) {
    c.mismatch(key, v, flag, show(field));
    return;
  }
  field = ds;
}

// DeepSpeed's batch rule: any two of train_batch_size, train_micro_batch_size_per_gpu and
// gradient_accumulation_steps determine the third. A value present in the config ("auto"
// included) or given as a flag is fixed; only an absent one is derived.
void apply_batch(Ctx& c, const json& cfg) {
  TrainArgs& a = c.a;
  const json* tb = find(cfg, "train_batch_size");
  const json* mb = find(cfg, "train_micro_batch_size_per_gpu");
  const json* ga = find(cfg, "gradient_accumulation_steps");
  const bool mb_fixed = mb || c.given("per_device_train_batch_size");
  const bool ga_fixed = ga || c.given("gradient_accumulation_steps");
  if (mb)
    fill_match(c, "train_micro_batch_size_per_gpu", *mb, "per_device_train_batch_size", a.per_device_train_batch_size,
               true, 1);
  if (ga)
    fill_match(c, "gradient_accumulation_steps", *ga, "gradient_accumulation_steps", a.gradient_accumulation_steps,
               true, 1);
  const int64_t ws = c.world_size;
  if (!tb || is_auto(*tb)) {
    a.train_batch_size = int64_t(a.per_device_train_batch_size) * a.gradient_accumulation_steps * ws;
    return;
  }
  const int64_t t = read_int("train_batch_size", *tb, true, 1, INT64_MAX);
  // DeepSpeed's floor divisions; a remainder shows up in the identity check below.
  auto to_int = [](int64_t x) { return int(std::clamp<int64_t>(x, 0, INT_MAX)); };
  if (!mb_fixed && !ga_fixed) {
    a.gradient_accumulation_steps = 1;
    a.per_device_train_batch_size = to_int(t / ws);
  } else if (!ga_fixed) {
    a.gradient_accumulation_steps = to_int(t / a.per_device_train_batch_size / ws);
  } else if (!mb_fixed) {
    a.per_device_train_batch_size = to_int(t / ws / a.gradient_accumulation_steps);
  }
  a.train_batch_size = t;
  const int mbv = a.per_device_train_batch_size, gav = a.gradient_accumulation_steps;
  const int64_t calc = int64_t(mbv) * gav * ws;
  if (t == calc && mbv > 0 && gav > 0) return;
  if (c.given("per_device_train_batch_size") || c.given("gradient_accumulation_steps")) {
    c.mismatch("train_batch_size", *tb, "train_batch_size (calculated)", show(calc));
  } else if (mbv <= 0) {
    c.batch_error = str_cat("Micro batch size per gpu: ", mbv, " has to be greater than 0");
  } else if (gav <= 0) {
    c.batch_error = str_cat("Gradient accumulation steps: ", gav, " has to be greater than 0");
  } else {
    c.batch_error = str_cat(
        "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * "
        "world_size ",
        t, " != ", mbv, " * ", gav, " * ", ws);
  }
  c.batch_error = str_cat("DeepSpeed config: ", c.batch_error, " (world size is the number of data-parallel ranks; ",
                          "set train_batch_size to \"auto\" to derive it)");
}

// optimizer.params.<name> for SGD / Muon: into --optim_args, agreeing with a value given there.
void apply_optim_arg(Ctx& c, const std::string& key, const std::string& name, const json& v) {
  if (is_auto(v)) return;
  ZT_CHECK(v.is_number() || v.is_boolean(), "DeepSpeed config key ", key, " must be a number or a bool");
  const std::string text = v.is_boolean() ? (v.get<bool>() ? "true" : "false") : show(v.get<double>());
  std::map<std::string, std::string> args = optim::parse_optim_args(c.a.optim_args);
  auto it = args.find(name);
  if (it != args.end() && it->second != text) {
    c.mismatch(key, v, "optim_args " + name, it->second);
    return;
  }
  if (it == args.end()) c.a.optim_args += (c.a.optim_args.empty() ? "" : ",") + name + "=" + text;
}

void apply_optimizer(Ctx& c, const json& o) {
  TrainArgs& a = c.a;
  require_object("optimizer", o);
  const json* t = find(o, "type");
  ZT_CHECK(t, "DeepSpeed config: the optimizer section needs a \"type\" (\"AdamW\" or \"Adam\")");
  const std::string type = read_string("optimizer.type", *t);
  std::string lower = type;
  for (auto& ch : lower) ch = char(std::tolower((unsigned char)ch));  // DeepSpeed compares lower-cased
  // DeepSpeed's own types, and torch.optim's SGD (DeepSpeed falls back to torch.optim by name).
  const std::string optim = lower == "adamw" || lower == "adam" ? "adamw_torch"
                            : lower == "lion"                   ? "lion_32bit"
                            : lower == "muon"                   ? "muon"
                            : lower == "sgd"                    ? "sgd"
                                                                : "";
  ZT_CHECK(!optim.empty(), "DeepSpeed config optimizer.type ", quote(type),
           " is not supported by ztrain; use \"AdamW\", \"Adam\", \"Lion\", \"Muon\" or \"SGD\", or drop the "
           "optimizer section and use --optim (docs/optimizers.md)");
  if (c.given("optim") && optim::make_optimizer(a.optim, {}, 0)->name() != optim)
    c.mismatch("optimizer.type", *t, "optim", a.optim);
  else
    a.optim = optim;
  const bool adam = optim == "adamw_torch";
  bool adam_w_mode = true;  // DeepSpeed's default: "Adam" with weight decay is AdamW
  for (auto& [k, v] : o.items()) {
    if (k == "type") continue;
    if (k != "params") {
      c.other("optimizer." + k, v, {"type", "params"});
      continue;
    }
    require_object("optimizer.params", v);
    for (auto& [pk, pv] : v.items()) {
      const std::string key = "optimizer.params." + pk;
      if (pk == "lr") {
        fill_match(c, key, pv, "learning_rate", a.learning_rate, true, 0);
      } else if (adam && pk == "eps") {
        fill_match(c, key, pv, "adam_epsilon", a.adam_epsilon, true, 0);
      } else if (pk == "weight_decay") {
        fill_match(c, key, pv, "weight_decay", a.weight_decay, true, 0);
      } else if (pk == "betas") {
        if (is_auto(pv)) continue;
        if (!pv.is_array() || pv.size() != 2 || !pv[0].is_number() || !pv[1].is_number())
          type_error(key, "a list of two numbers", pv, true);
        const double b1 = pv[0].get<double>(), b2 = pv[1].get<double>();
        if ((c.given("adam_beta1") && b1 != a.adam_beta1) || (c.given("adam_beta2") && b2 != a.adam_beta2)) {
          c.mismatch(key, pv, "adam_beta1+adam_beta2", str_cat("[", show(a.adam_beta1), ", ", show(a.adam_beta2), "]"));
        } else {
          a.adam_beta1 = b1;
          a.adam_beta2 = b2;
        }
      } else if (!adam && (pk == "momentum" || pk == "dampening" || pk == "nesterov") &&
                 (optim == "sgd" || pk == "momentum" || pk == "nesterov")) {
        apply_optim_arg(c, key, pk, pv);  // SGD's and Muon's own settings: --optim_args
      } else if (adam && pk == "adam_w_mode") {
        read(key, pv, false, adam_w_mode, 0, 0);
      } else if (adam && (pk == "bias_correction" || pk == "amsgrad")) {
        bool b = false;
        read(key, pv, false, b, 0, 0);
        ZT_CHECK(b == (pk == "bias_correction"), "DeepSpeed config key ", key, "=", show(b),
                 " is not supported: ztrain's AdamW is PyTorch's with bias correction and without amsgrad");
      } else {
        c.other(key, pv,
                adam ? std::initializer_list<const char*>{"lr", "betas", "eps", "weight_decay", "adam_w_mode",
                                                          "bias_correction", "amsgrad"}
                     : std::initializer_list<const char*>{"lr", "betas", "weight_decay", "momentum", "dampening",
                                                          "nesterov"});
      }
    }
  }
  // DeepSpeed: type AdamW is always decoupled; Adam is decoupled unless adam_w_mode is false,
  // which means L2 decay added to the gradient, a different update ztrain does not have.
  ZT_CHECK(lower == "adamw" || adam_w_mode || a.weight_decay == 0, "DeepSpeed config: optimizer Adam with ",
           "adam_w_mode=false and weight_decay=", show(a.weight_decay),
           " (L2 regularisation) is not supported; ztrain's AdamW decouples weight decay: drop adam_w_mode");
}

// One scheduler.params entry of a scheduler of the given type.
void apply_scheduler_param(Ctx& c, const std::string& type, const std::string& pk, const json& pv) {
  TrainArgs& a = c.a;
  const std::string key = "scheduler.params." + pk;
  // Parameters of another DeepSpeed scheduler: DeepSpeed itself would fail on them.
  const bool cosine = type == "WarmupCosineLR";
  const bool cosine_only = pk == "warmup_min_ratio" || pk == "cos_min_ratio";
  const bool warmup_lr_only = pk == "warmup_min_lr" || pk == "warmup_max_lr";
  if ((cosine && warmup_lr_only) || (!cosine && cosine_only) || (type == "WarmupLR" && pk == "total_num_steps")) {
    c.warnings.push_back(str_cat("DeepSpeed config key ", key, " is not used by ", type));
    return;
  }
  if (pk == "warmup_min_lr") {
    if (is_auto(pv))
      a.warmup_min_lr = 0;  // HF's fill_only: not a Trainer argument
    else
      read(key, pv, true, a.warmup_min_lr, 0, 0);
  } else if (pk == "warmup_max_lr") {
    if (is_auto(pv)) {
      a.warmup_max_lr = -1;  // learning_rate
      return;
    }
    double x = 0;
    read(key, pv, true, x, 0, 0);
    if (c.given("learning_rate") && x != a.learning_rate)
      c.mismatch(key, pv, "learning_rate", show(a.learning_rate));
    else
      a.warmup_max_lr = x;  // may differ from optimizer.params.lr: DeepSpeed's scheduler sets the LR
  } else if (pk == "warmup_num_steps") {
    if (is_auto(pv)) return;  // HF: args.get_warmup_steps(num_training_steps), at the trainer
    const int64_t n = read_int(key, pv, true, 0, INT64_MAX);
    if (c.given("warmup_steps") || c.given("warmup_ratio")) {
      const auto hf = hf_warmup_steps(a, a.max_steps);
      if (!hf || *hf != n) {
        c.mismatch(key, pv, "warmup_steps",
                   hf ? show(*hf)
                      : str_cat(show(a.warmup_steps > 0 ? a.warmup_steps : a.warmup_ratio),
                                " (a ratio of the total steps, unknown without --max_steps)"));
        return;
      }
    }
    a.warmup_steps = double(n);
    a.warmup_ratio = 0;
  } else if (pk == "total_num_steps") {
    if (is_auto(pv)) {
      a.total_num_steps = -1;  // HF: num_training_steps, known at the trainer
      return;
    }
    const int64_t n = read_int(key, pv, true, 1, INT64_MAX);
    if (c.given("max_steps") && a.max_steps > 0 && n != a.max_steps)
      c.mismatch(key, pv, "max_steps", show(a.max_steps));
    else
      a.total_num_steps = n;
  } else if (pk == "warmup_type") {
    a.warmup_type = read_string(key, pv);
    ZT_CHECK(a.warmup_type == "log" || a.warmup_type == "linear", "DeepSpeed config key ", key,
             " must be \"log\" or \"linear\", got ", quote(a.warmup_type));
  } else if (pk == "warmup_min_ratio" || pk == "cos_min_ratio") {
    double& field = pk == "warmup_min_ratio" ? a.warmup_min_ratio : a.cos_min_ratio;
    read(key, pv, false, field, 0, 0);
    ZT_CHECK(field <= 1, "DeepSpeed config key ", key, " is a ratio of the learning rate in [0, 1], got ", show(field));
  } else {
    c.other(key, pv,
            {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps", "warmup_min_ratio",
             "cos_min_ratio"});
  }
}

void apply_scheduler(Ctx& c, const json& s) {
  TrainArgs& a = c.a;
  require_object("scheduler", s);
  const json* t = find(s, "type");
  ZT_CHECK(t, "DeepSpeed config: the scheduler section needs a \"type\" (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
  const std::string type = read_string("scheduler.type", *t);
  ZT_CHECK(type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR",
           "DeepSpeed config scheduler.type ", quote(type),
           " is not supported by ztrain; use WarmupLR, WarmupDecayLR or WarmupCosineLR, or drop the ",
           "scheduler section and use --lr_scheduler_type");
  // As in HF Trainer, a DeepSpeed scheduler replaces the HF one.
  if (c.given("lr_scheduler_type") && a.lr_scheduler_type != type)
    c.warnings.push_back(str_cat("--lr_scheduler_type ", a.lr_scheduler_type, " is replaced by the DeepSpeed config's ",
                                 "scheduler ", type));
  a.lr_scheduler_type = type;
  bool saw_warmup_num_steps = false;
  for (auto& [k, v] : s.items()) {
    if (k == "type") continue;
    if (k != "params") {
      c.other("scheduler." + k, v, {"type", "params"});
      continue;
    }
    require_object("scheduler.params", v);
    saw_warmup_num_steps = v.contains("warmup_num_steps");
    for (auto& [pk, pv] : v.items()) apply_scheduler_param(c, type, pk, pv);
  }
  // DeepSpeed's default warmup_num_steps is 1000; a warmup flag given on the command line
  // wins over that default (HF would silently use 1000).
  if (!saw_warmup_num_steps && !c.given("warmup_steps") && !c.given("warmup_ratio")) {
    a.warmup_steps = 1000;
    a.warmup_ratio = 0;
  }
}

// offload_optimizer / offload_param .device into --offload_optimizer / offload_param; the trainer
// decides what they mean on the device the run takes (train/run_device.h: ZeRO-Offload on the GPU,
// a note on the CPU, where everything lives in host memory already; nvme is refused on the GPU).
void apply_offload(Ctx& c, const std::string& key, const json& v, std::string& field, const char* flag) {
  require_object(key, v);
  std::string device = "none";
  if (const json* d = find(v, "device")) device = read_string(key + ".device", *d);
  ZT_CHECK(device == "none" || device == "cpu" || device == "nvme", "DeepSpeed config key ", key,
           ".device must be \"none\", \"cpu\" or \"nvme\", got ", quote(device));
  if (c.given(flag) && device != field) return c.mismatch(key + ".device", json(device), flag, field);
  field = device;
  ds_offload::read_offload_keys(c.a, key, v, flag == nullptr, &c.mismatches);
}

void apply_zero(Ctx& c, const json& z) {
  TrainArgs& a = c.a;
  require_object("zero_optimization", z);
  for (auto& [k, v] : z.items()) {
    const std::string key = "zero_optimization." + k;
    if (k == "stage") {
      fill_match(c, key, v, "zero_stage", a.zero_stage, false, 0, 3);
    } else if (k == "overlap_comm") {
      fill_match(c, key, v, "overlap_comm", a.overlap_comm, false);
    } else if (k == "reduce_bucket_size") {
      // "auto": HF uses hidden_size^2; ztrain keeps --reduce_bucket_size (default: DDP 25 MiB, ZeRO 5e8).
      fill_match(c, key, v, "reduce_bucket_size", a.reduce_bucket_size, true, 1);
    } else if (k == "allgather_bucket_size") {
      fill_match(c, key, v, nullptr, a.allgather_bucket_size, false, 1);
    } else if (k == "contiguous_gradients") {
      fill_match(c, key, v, nullptr, a.contiguous_gradients, false);
    } else if (k == "reduce_scatter") {
      fill_match(c, key, v, nullptr, a.reduce_scatter, false);
    } else if (k == "zero_hpz_partition_size") {
      fill_match(c, key, v, "zero_hpz_partition_size", a.zero_hpz_partition_size, false, 1);
      ZT_CHECK(c.world_size % a.zero_hpz_partition_size == 0, "DeepSpeed config key ", key, "=",
               a.zero_hpz_partition_size, " must divide the number of data-parallel ranks (", c.world_size, ")");
    } else if (k == "zero_quantized_weights") {
      fill_match(c, key, v, "zero_quantized_weights", a.zero_quantized_weights, false);
    } else if (k == "zero_quantized_gradients") {
      fill_match(c, key, v, "zero_quantized_gradients", a.zero_quantized_gradients, false);
    } else if (k == "sub_group_size") {
      // ZeRO-Infinity's unit of the optimizer step: offload to disk's chunk (docs/offload.md).
      fill_match(c, key, v, nullptr, a.offload_sub_group_size, false, 1);
    } else if (k == "offload_optimizer" || k == "offload_param") {
      if (k == "offload_optimizer")
        apply_offload(c, key, v, a.offload_optimizer, "offload_optimizer");
      else
        apply_offload(c, key, v, a.offload_param, nullptr);  // flag null: offload_param's keys
    } else {
      c.other(key, v,
              {"stage", "overlap_comm", "reduce_bucket_size", "allgather_bucket_size", "contiguous_gradients",
               "reduce_scatter", "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients",
               "offload_optimizer", "offload_param", "sub_group_size"});
    }
  }
}

// ---- precision and recomputation (TrainArgs::ds_precision) ----

using Enabled = DeepSpeedPrecision::Enabled;

Enabled read_enabled(const std::string& key, const json& v) {
  if (is_auto(v)) return Enabled::auto_value;
  bool on = false;
  read(key, v, true, on, 0, 0);
  return on ? Enabled::on : Enabled::off;
}

// fp16: DeepSpeedFP16Config. The loss-scaling keys fill a LossScalerConfig; they are checked
// against DeepSpeed's rules when fp16 is enabled (DeepSpeed validates them only then).
void apply_fp16(Ctx& c, const json& p) {
  require_object("fp16", p);
  DeepSpeedPrecision& d = c.a.ds_precision;
  optim::LossScalerConfig& ls = d.loss_scaler;
  for (auto& [k, v] : p.items()) {
    const std::string key = "fp16." + k;
    if (k == "enabled") {
      d.fp16 = read_enabled(key, v);
    } else if (is_auto(v) && k != "auto_cast" && k != "fp16_master_weights_and_grads") {
      continue;  // DeepSpeed drops "auto" values (DeepSpeedConfigModel): the default stays
    } else if (k == "loss_scale") {
      read(key, v, true, ls.loss_scale, 0, 0);
    } else if (k == "initial_scale_power") {
      read(key, v, true, ls.initial_scale_power, 0, 127);
    } else if (k == "loss_scale_window") {
      read(key, v, true, ls.loss_scale_window, INT64_MIN, INT64_MAX);
    } else if (k == "hysteresis") {
      read(key, v, true, ls.hysteresis, INT_MIN, INT_MAX);
    } else if (k == "consecutive_hysteresis") {
      read(key, v, true, ls.consecutive_hysteresis, 0, 0);
    } else if (k == "min_loss_scale") {
      // DeepSpeed 0.19.6 types it int (1e-10 fails there); older DeepSpeed used the number as
      // given, and configs in the wild (configs/ds_zero2_no_offload.json) write 1e-10.
      read(key, v, true, ls.min_loss_scale, INT64_MIN, 0);
    } else {
      c.other(key, v,
              {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
               "consecutive_hysteresis", "min_loss_scale"});
    }
  }
  if (d.fp16 == Enabled::on) ls.check();
}

// bf16 (or its legacy name bfloat16): DeepSpeedBF16Config.
// bf16.bf16_optimizer_states: the optimizer's moments in bf16 (--optim_state_dtype bf16).
void apply_bf16_states(Ctx& c, const std::string& key, const json& v) {
  bool on = false;
  read(key, v, false, on, 0, 0);
  const std::string want = on ? "bf16" : "fp32";
  if (c.given("optim_state_dtype") && c.a.optim_state_dtype != want)
    c.mismatch(key, v, "optim_state_dtype", c.a.optim_state_dtype);
  else
    c.a.optim_state_dtype = want;
}

void apply_bf16(Ctx& c, const std::string& section, const json& p) {
  require_object(section, p);
  DeepSpeedPrecision& d = c.a.ds_precision;
  for (auto& [k, v] : p.items()) {
    const std::string key = section + "." + k;
    if (k == "enabled")
      d.bf16 = read_enabled(key, v);
    else if (k == "check_grad_overflow" && is_auto(v))
      continue;  // DeepSpeed drops "auto" values: the default stays
    else if (k == "check_grad_overflow")
      read(key, v, false, d.bf16_check_grad_overflow, 0, 0);
    else if (k == "bf16_optimizer_states")
      apply_bf16_states(c, key, v);
    else
      c.other("bf16." + k, v, {"enabled", "check_grad_overflow", "bf16_optimizer_states"});
  }
}

// amp (apex): not a mode ztrain has; enabled=true is an error, its other keys are apex's.
void apply_amp(const json& p) {
  require_object("amp", p);
  if (const json* v = find(p, "enabled"))
    ZT_CHECK(read_enabled("amp.enabled", *v) != Enabled::on, "DeepSpeed config key amp.enabled is true, but ztrain ",
             "has no apex AMP; use bf16 or fp16 instead, or set it to false");
}

void apply_communication_data_type(Ctx& c, const json& v) {
  if (v.is_null()) return;  // DeepSpeed's default (None): the training dtype
  std::string t = read_string("communication_data_type", v);
  for (auto& ch : t) ch = char(std::tolower((unsigned char)ch));  // DeepSpeed lower-cases it
  ZT_CHECK(t == "fp32" || t == "bf16" || t == "fp16", "DeepSpeed config key communication_data_type must be ",
           "\"fp32\", \"bf16\" or \"fp16\", got ", show_json(v));
  c.a.ds_precision.communication_data_type = t;
}

// activation_checkpointing: DeepSpeedActivationCheckpointingConfig. number_checkpoints is the
// one that shapes the recomputation; the others tune DeepSpeed's GPU implementation and change
// nothing here, so they are accepted with one warning naming those set to true.
// DeepSpeed's "pipeline" block (runtime/config.py's get_pipeline_config). The stage count is
// Megatron's --pipeline-model-parallel-size here; the layer split is ztrain's cost balance (or
// --pipeline_layers), like DeepSpeed's partition "parameters"; keys ztrain cannot honour are
// refused. Returns the stages (the batch identity counts world / stages data-parallel ranks).
void apply_pipeline(Ctx& c, const json& p) {
  require_object("pipeline", p);
  for (auto& [k, v] : p.items()) {
    const std::string key = "pipeline." + k;
    if (k == "stages") {
      fill_match(c, key, v, "pipeline-model-parallel-size", c.a.pipeline_parallel_size, true, 1, 1 << 20);
    } else if (k == "partition") {
      const std::string m = read_string(key, v);
      ZT_CHECK(m == "best" || m == "parameters", "DeepSpeed config key ", key, "=", show_json(v),
               " is not supported: ztrain balances stages by the memory estimator's cost per layer (like "
               "\"parameters\"); use \"parameters\", or --pipeline_layers to give the split");
    } else if (k == "seed_layers" || k == "pipe_partitioned" || k == "grad_partitioned") {
      bool b = false;
      read(key, v, false, b, 0, 0);
      // pipe_/grad_partitioned split the messages over tensor-parallel ranks: nothing to split
      // without tensor parallelism, and under --sequence-parallel each TP rank sends its own rows
      // (1/tp); TP without SP sends whole copies, which true would not describe.
      ZT_CHECK(k != "seed_layers" || !b, "DeepSpeed config key ", key,
               "=true is not supported: ztrain initialises the whole model from --seed on every stage; drop it");
      ZT_CHECK(k == "seed_layers" || !b || c.a.tensor_model_parallel_size <= 1 || c.a.sequence_parallel,
               "DeepSpeed config key ", key,
               "=true splits stage messages over the tensor-parallel ranks, which "
               "ztrain does under --sequence-parallel only; add --sequence-parallel or set it to false");
    } else if (k == "activation_checkpoint_interval") {
      int64_t n = 0;
      read(key, v, false, n, 0, INT64_MAX);
      ZT_CHECK(n == 0, "DeepSpeed config key ", key, "=", n,
               " is not supported; recompute activations with activation_checkpointing or --recompute-granularity");
    } else {
      throw Error(str_cat("DeepSpeed config key ", key,
                          " is not supported; the pipeline block takes stages, partition, seed_layers, "
                          "activation_checkpoint_interval, pipe_partitioned and grad_partitioned"));
    }
  }
}

void apply_activation_checkpointing(Ctx& c, const json& p) {
  require_object("activation_checkpointing", p);
  DeepSpeedPrecision& d = c.a.ds_precision;
  d.activation_checkpointing = true;
  struct Flag {
    const char* name;
    bool* field;
    const char* why;
  };
  const Flag flags[] = {
      {"partition_activations", &d.partition_activations,
       "splits checkpoints over tensor-parallel ranks; there are none (--tensor-model-parallel-size 1)"},
      {"cpu_checkpointing", &d.cpu_checkpointing, "moves checkpoints to host memory, where they are already"},
      {"contiguous_memory_optimization", &d.contiguous_memory_optimization,
       "packs checkpoints into one buffer, as ztrain's activation arena already is"},
      {"synchronize_checkpoint_boundary", &d.synchronize_checkpoint_boundary, "a CUDA synchronize"},
      {"profile", &d.profile, "times checkpointed blocks on the GPU (ZT_PROFILE=1 times ztrain's regions)"},
  };
  std::string no_effect;
  for (auto& [k, v] : p.items()) {
    const std::string key = "activation_checkpointing." + k;
    if (k == "number_checkpoints") {
      if (!v.is_null()) read(key, v, false, d.number_checkpoints, 1, INT64_MAX);
      continue;
    }
    const Flag* f = nullptr;
    for (const Flag& x : flags)
      if (k == x.name) f = &x;
    if (!f) {
      c.other(key, v,
              {"number_checkpoints", "partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
               "synchronize_checkpoint_boundary", "profile"});
      continue;
    }
    read(key, v, false, *f->field, 0, 0);
    // Partitioned checkpoints keep 1/tp of each checkpointed block input on every tensor-parallel
    // rank (DeepSpeed's partition_activations, Megatron's sequence parallelism): ztrain's
    // --sequence-parallel holds its block inputs exactly so. Without tensor parallelism there is
    // nothing to split over.
    if (*f->field && f->field == &d.partition_activations && c.a.tensor_model_parallel_size > 1) {
      c.a.sequence_parallel = true;
      continue;
    }
    if (*f->field) no_effect += str_cat(no_effect.empty() ? "" : "; ", key, " (", f->why, ")");
  }
  if (!no_effect.empty())
    c.warnings.push_back(str_cat("DeepSpeed config keys that change nothing on ztrain's CPU training: ", no_effect));
}

// DeepSpeed's own rule, whatever the trainer supports.
void check_precision(const DeepSpeedPrecision& d) {
  ZT_CHECK(!(d.fp16 == Enabled::on && d.bf16 == Enabled::on),
           "DeepSpeed config: fp16.enabled and bf16.enabled are both true; enable one of them (DeepSpeed: "
           "\"bfloat16 and fp16 modes cannot be simultaneously enabled\")");
}

// The precision and recomputation sections turned into the run's settings (HF's
// semantics: "auto" follows the flags; a value that contradicts a flag given on the command
// line is a mismatch; otherwise the config's value replaces the default).
void apply_precision_settings(Ctx& c, const json& cfg) {
  const DeepSpeedPrecision& d = c.a.ds_precision;
  for (auto [name, e, field] : {std::tuple{"fp16", d.fp16, &c.a.fp16}, std::tuple{"bf16", d.bf16, &c.a.bf16}}) {
    if (e != Enabled::on && e != Enabled::off) continue;
    const bool want = e == Enabled::on;
    if (c.given(name) && *field != want) {
      c.mismatch(std::string(name) + ".enabled", json(want), name, *field ? "true" : "false");
      continue;
    }
    *field = want;
  }
  // communication_data_type is consumed by the trainer (comm_dtype_from_args).
  // activation_checkpointing: HF's Trainer checkpoints every block; number_checkpoints, when
  // given, recomputes that many (the first ones). Flags given on the command line win.
  if (d.activation_checkpointing && !c.given("recompute-granularity") && !c.given("gradient_checkpointing")) {
    c.a.recompute_granularity = "full";
    if (d.number_checkpoints > 0 && !c.given("recompute-num-layers"))
      c.a.recompute_num_layers = int(std::min<int64_t>(d.number_checkpoints, 1 << 20));
  }
}

}  // namespace

std::vector<std::string> apply_deepspeed_json(TrainArgs& a, int world_size, const nlohmann::json& cfg) {
  ZT_ASSERT(world_size > 0);
  ZT_CHECK(cfg.is_object(), "a DeepSpeed config must be a JSON object, got ", show_json(cfg));
  Ctx c{a, world_size, {}, {}, {}};
  a.ds_precision = {};  // the config's alone: no flag sets it
  // Pipeline stages first: DeepSpeed's batch identity counts the data-parallel ranks only.
  if (const json* pl = find(cfg, "pipeline")) apply_pipeline(c, *pl);
  const int P = a.pipeline_parallel_size;
  ZT_CHECK(world_size % P == 0, "--pipeline-model-parallel-size ", P, " does not divide the ", world_size,
           " ranks; give mpirun -np a multiple of it");
  c.world_size = world_size / P;
  apply_batch(c, cfg);
  for (auto& [k, v] : cfg.items()) {
    if (k == "train_batch_size" || k == "train_micro_batch_size_per_gpu" || k == "gradient_accumulation_steps") {
      continue;  // apply_batch
    } else if (k == "gradient_clipping") {
      fill_match(c, k, v, "max_grad_norm", a.max_grad_norm, true, 0);
    } else if (k == "optimizer") {
      apply_optimizer(c, v);
    } else if (k == "scheduler") {
      apply_scheduler(c, v);
    } else if (k == "zero_optimization") {
      apply_zero(c, v);
    } else if (k == "fp16") {
      apply_fp16(c, v);
    } else if (k == "bf16" || k == "bfloat16") {
      ZT_CHECK(!(k == "bfloat16" && cfg.contains("bf16")), "DeepSpeed config has both bf16 and its legacy name ",
               "bfloat16; keep bf16 only");
      apply_bf16(c, k, v);
    } else if (k == "amp") {
      apply_amp(v);
    } else if (k == "communication_data_type") {
      apply_communication_data_type(c, v);
    } else if (k == "activation_checkpointing") {
      apply_activation_checkpointing(c, v);
    } else if (k == "pipeline") {
      continue;  // apply_pipeline, above
    } else if (k == "steps_per_print") {
      if (!v.is_null()) fill_match(c, k, v, nullptr, a.steps_per_print, false, 1);  // null: DeepSpeed's "never"
    } else if (k == "wall_clock_breakdown") {
      fill_match(c, k, v, nullptr, a.wall_clock_breakdown, false);
    } else if (k == "aio") {
      ds_offload::read_aio(a, v);
    } else {
      c.other(k, v,
              {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
               "optimizer", "scheduler", "zero_optimization", "fp16", "bf16", "steps_per_print", "wall_clock_breakdown",
               "communication_data_type", "activation_checkpointing", "pipeline", "aio"});
    }
  }
  check_precision(a.ds_precision);
  apply_precision_settings(c, cfg);
  if (!c.mismatches.empty()) {
    std::string msg = "Please correct the following DeepSpeed config values that mismatch TrainingArguments values:";
    for (auto& m : c.mismatches) msg += "\n" + m;
    throw Error(msg + "\nThe easiest method is to set these DeepSpeed config values to 'auto'.");
  }
  ZT_CHECK(c.batch_error.empty(), c.batch_error);
  return c.warnings;
}

void apply_deepspeed_config(TrainArgs& a, int world_size, bool print_warnings) {
  if (a.deepspeed.empty()) return;
  std::ifstream in(a.deepspeed, std::ios::binary);
  ZT_CHECK(in, "--deepspeed ", quote(a.deepspeed), ": cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  json cfg;
  try {
    cfg = json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw Error(str_cat("--deepspeed ", quote(a.deepspeed), " is not valid JSON: ", e.what()));
  }
  std::vector<std::string> warnings;
  try {
    warnings = apply_deepspeed_json(a, world_size, cfg);
  } catch (const Error& e) {
    throw Error(str_cat("--deepspeed ", quote(a.deepspeed), ": ", e.what()));
  }
  if (print_warnings)
    for (auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
}

}  // namespace zt
