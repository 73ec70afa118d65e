// deepspeed_values.cpp: see deepspeed_values.h.
#include "deepspeed_values.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace zt::ds_values {

// ---- values: reading with type checks, and showing them in messages ----

bool is_auto(const json& v) { return v.is_string() && v.get_ref<const std::string&>() == "auto"; }

std::string show_json(const json& v) {
  std::string s = v.dump();  // nlohmann escapes control characters, so this stays on one line
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}
std::string show(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const auto e = sci.find('e');
  if (!std::isfinite(x) || e == std::string::npos) return sci;
  const int exp = std::atoi(sci.c_str() + e + 1);
  if (exp < -4 || exp >= 16) return sci;
  r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
  std::string fixed(buf, r.ptr);
  return fixed.find('.') == std::string::npos ? fixed + ".0" : fixed;
}
std::string show(int64_t x) { return std::to_string(x); }
std::string show(int x) { return std::to_string(x); }
std::string show(bool x) { return x ? "true" : "false"; }

[[noreturn]] void type_error(const std::string& key, const char* expected, const json& v, bool auto_ok) {
  throw Error(str_cat("DeepSpeed config key ", key, " must be ", expected, auto_ok ? " or \"auto\"" : "", ", got ",
                      show_json(v)));
}

int64_t read_int(const std::string& key, const json& v, bool auto_ok, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) type_error(key, "an integer", v, auto_ok);
  if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
             std::fabs(v.get<double>()) < 9.0e18) {
    x = int64_t(v.get<double>());
  } else {
    type_error(key, "an integer", v, auto_ok);
  }
  ZT_CHECK(x >= lo && x <= hi, "DeepSpeed config key ", key, " must be ",
           hi == INT64_MAX ? str_cat("at least ", lo) : str_cat("between ", lo, " and ", hi), ", got ", x);
  return x;
}

void read(const std::string& key, const json& v, bool auto_ok, int64_t& out, int64_t lo, int64_t hi) {
  out = read_int(key, v, auto_ok, lo, hi);
}
void read(const std::string& key, const json& v, bool auto_ok, int& out, int64_t lo, int64_t hi) {
  out = int(read_int(key, v, auto_ok, std::max<int64_t>(lo, INT_MIN), std::min<int64_t>(hi, INT_MAX)));
}
void read(const std::string& key, const json& v, bool auto_ok, double& out, int64_t lo, int64_t) {
  if (!v.is_number()) type_error(key, "a number", v, auto_ok);
  out = v.get<double>();
  ZT_CHECK(out >= double(lo), "DeepSpeed config key ", key, " must be at least ", lo, ", got ", show(out));
}
void read(const std::string& key, const json& v, bool auto_ok, bool& out, int64_t, int64_t) {
  if (!v.is_boolean()) type_error(key, "true or false", v, auto_ok);
  out = v.get<bool>();
}
std::string read_string(const std::string& key, const json& v) {
  if (!v.is_string()) type_error(key, "a string", v, false);
  return v.get<std::string>();
}
void require_object(const std::string& key, const json& v) {
  if (!v.is_object()) type_error(key, "an object", v, false);
}
const json* find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

namespace {

// The keys DeepSpeed knows that ztrain accepts without acting on them.
const Inert kInert[] = {
    {"zero_allow_untested_optimizer", Kind::boolean, ""},
    {"zero_force_ds_cpu_optimizer", Kind::boolean, ""},
    {"prescale_gradients", Kind::boolean, "false"},
    {"gradient_predivide_factor", Kind::number, "1"},
    {"sparse_gradients", Kind::boolean, "false"},
    {"memory_breakdown", Kind::boolean, "false"},
    {"dump_state", Kind::boolean, "false"},
    {"flops_profiler", Kind::object, "!"},
    {"tensorboard", Kind::object, "!"},
    {"wandb", Kind::object, "!"},
    {"csv_monitor", Kind::object, "!"},
    {"comms_logger", Kind::object, "!"},
    {"checkpoint", Kind::object, "!"},
    {"data_types", Kind::object, "!"},
    {"elasticity", Kind::object, "!"},
    {"torch_autocast", Kind::object, "!"},
    {"compile", Kind::object, "!"},
    {"zero_optimization.allgather_partitions", Kind::boolean, "true"},
    {"zero_optimization.round_robin_gradients", Kind::boolean, ""},
    {"zero_optimization.load_from_fp32_weights", Kind::boolean, "true"},
    {"zero_optimization.ignore_unused_parameters", Kind::boolean, ""},
    {"zero_optimization.elastic_checkpoint", Kind::boolean, "false"},
    {"zero_optimization.cpu_offload", Kind::boolean, "false"},
    {"zero_optimization.memory_efficient_linear", Kind::boolean, ""},
    {"zero_optimization.use_multi_rank_bucket_allreduce", Kind::boolean, ""},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", Kind::boolean, ""},
    {"zero_optimization.stage3_max_live_parameters", Kind::integer, "!"},
    {"zero_optimization.stage3_max_reuse_distance", Kind::integer, "!"},
    {"zero_optimization.stage3_prefetch_bucket_size", Kind::integer, "!"},
    {"zero_optimization.stage3_param_persistence_threshold", Kind::integer, "!"},
    {"zero_optimization.stage3_module_granularity_threshold", Kind::integer, "!"},
    {"zero_optimization.zero_quantized_nontrainable_weights", Kind::boolean, "false"},
    {"zero_optimization.mics_shard_size", Kind::integer, "-1"},
    {"zero_optimization.mics_hierarchical_params_gather", Kind::boolean, "false"},
    // auto_cast casts floating-point model inputs; ztrain's inputs are token ids. ztrain keeps
    // fp32 master weights, gradients and optimizer state in every precision.
    {"fp16.auto_cast", Kind::boolean, ""},
    {"fp16.fp16_master_weights_and_grads", Kind::boolean, "false"},
    {"bf16.immediate_grad_update", Kind::boolean, ""},
    {"bf16.bf16_master_weights_and_grads", Kind::boolean, "false"},
    {"amp.opt_level", Kind::string, ""},
    {"optimizer.params.torch_adam", Kind::boolean, ""},
    {"scheduler.params.last_batch_iteration", Kind::integer, "-1"},
};

}  // namespace

std::span<const Inert> inert_keys() { return kInert; }

const Inert* find_inert(const std::string& key) {
  for (auto& e : kInert)
    if (key == e.key) return &e;
  return nullptr;
}

}  // namespace zt::ds_values
