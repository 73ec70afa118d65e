// auto_fit.cpp: see auto_fit.h.
#include "auto_fit.h"

#include <cctype>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "parallel/buckets.h"
#include "plan/memory_fit.h"
#include "precision.h"

namespace zt {

int64_t parse_memory_size(const std::string& s, const char* what) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string unit = s.substr(i);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  const struct {
    const char* name;
    double bytes;
  } units[] = {{"", 1},      {"B", 1},      {"KB", 1e3},      {"MB", 1e6},      {"GB", 1e9},
               {"TB", 1e12}, {"KIB", 1024}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1099511627776.0}};
  double mult = -1;
  for (auto& u : units)
    if (unit == u.name) mult = u.bytes;
  char* end = nullptr;
  const std::string num = s.substr(0, i);
  const double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  ZT_CHECK(mult > 0 && v > 0 && end && *end == 0 && v * mult < 9e18, what, " ", quote(s),
           " is not a memory size; write it like 24GB, 12GiB or 500MB");
  return int64_t(v * mult);
}

int64_t memory_limit_per_rank(const TrainArgs& a, std::string* source) {
  const int ranks = parallel::ranks_on_this_host();
  int64_t host = -1;
  if (!a.max_memory.empty()) {
    host = parse_memory_size(a.max_memory, "--max_memory");
    *source = "--max_memory " + a.max_memory;
  } else {
    host = available_memory_bytes(source);
  }
  if (host < 0) return -1;
  if (ranks > 1) *source += str_cat(" / ", ranks, " ranks on this host");
  return host / ranks;
}

std::string auto_find_batch_size(TrainArgs& a, const ModelConfig& cfg, int T, int world_size, int64_t limit,
                                 const std::string& source) {
  const int B0 = a.per_device_train_batch_size, G0 = a.gradient_accumulation_steps;
  const bool mode_given = !a.recompute_granularity.empty() || a.gradient_checkpointing;
  // The modes tried at each batch size, least recomputation first; a mode given on the
  // command line (or by a DeepSpeed config) is kept as it is.
  std::vector<std::string> modes = mode_given ? std::vector<std::string>{a.recompute_granularity}
                                              : std::vector<std::string>{"", "selective", "full"};
  const int N = world_size;
  const int64_t bucket = parallel::reduce_bucket_elements(a.reduce_bucket_size, a.zero_stage);
  std::string tried;
  for (int B = B0; B >= 1; B /= 2) {
    for (const std::string& m : modes) {
      TrainArgs t = a;
      t.per_device_train_batch_size = B;
      t.recompute_granularity = m;
      const nn::ActPlan plan = act_plan_from_args(t, cfg);
      const int64_t need = parallel::training_bytes_per_rank(
          cfg,
          {B, T, a.zero_stage, N, a.zero_hpz_partition_size, bucket, plan, int(dtype_size(comm_dtype_from_args(a)))});
      tried +=
          str_cat(tried.empty() ? "" : ", ", "B=", B, " ", m.empty() ? "none" : m, " ", format_bytes(double(need)));
      if (limit >= 0 && need > limit) continue;
      a.per_device_train_batch_size = B;
      a.recompute_granularity = m;
      // Keep the global batch: B0 / B more micro-batches per step (B halves B0 exactly).
      a.gradient_accumulation_steps = G0 * (B0 / B);
      return str_cat("auto_find_batch_size: micro-batch ", B, " (asked ", B0, "), recomputation ",
                     nn::recompute_name(plan.recompute), ", gradient accumulation ", a.gradient_accumulation_steps,
                     " (", int64_t(B) * a.gradient_accumulation_steps * N, " sequences per step as asked): estimated ",
                     format_bytes(double(need)), " per rank of ",
                     limit >= 0 ? format_bytes(double(limit)) : std::string("unknown"), " (", source, "); tried ",
                     tried);
    }
  }
  throw Error(str_cat("--auto_find_batch_size: nothing fits in ", format_bytes(double(limit)), " per rank (", source,
                      "): even a micro-batch of 1 with full recomputation needs more (", tried,
                      "); raise --max_memory, use --bf16, a shorter --model_max_length, or --zero_stage 3 over more "
                      "ranks"));
}

}  // namespace zt
