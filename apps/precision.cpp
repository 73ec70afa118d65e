// precision.cpp: see precision.h.
#include "precision.h"

#include "core/error.h"

namespace zt {

nn::ActPlan act_plan_from_args(const TrainArgs& a, const ModelConfig& cfg) {
  ZT_CHECK(!(a.bf16 && a.fp16), "--bf16 and --fp16 are both set (by flags or the DeepSpeed config); choose one");
  nn::ActPlan p;
  p.precision = a.bf16 ? nn::Precision::bf16 : a.fp16 ? nn::Precision::fp16 : nn::Precision::fp32;
  const std::string& g = a.recompute_granularity;
  ZT_CHECK(g.empty() || g == "full" || g == "selective", "--recompute-granularity ", quote(g),
           " is not one of full, selective");
  ZT_CHECK(!(a.gradient_checkpointing && g == "selective"),
           "--gradient_checkpointing (full recomputation) contradicts --recompute-granularity selective; give one");
  p.recompute = g == "selective"                            ? nn::Recompute::selective
                : (g == "full" || a.gradient_checkpointing) ? nn::Recompute::full
                                                            : nn::Recompute::none;
  ZT_CHECK(a.recompute_num_layers <= cfg.n_layer, "--recompute-num-layers ", a.recompute_num_layers,
           " exceeds the model's ", cfg.n_layer, " layers; give at most ", cfg.n_layer, " (or -1 for all)");
  ZT_CHECK(a.recompute_num_layers < 0 || p.recompute != nn::Recompute::none,
           "--recompute-num-layers needs a recomputation mode: add --recompute-granularity full or selective");
  p.recompute_layers = p.recompute == nn::Recompute::none ? 0
                       : a.recompute_num_layers < 0       ? cfg.n_layer
                                                          : a.recompute_num_layers;
  return p;
}

DType comm_dtype_from_args(const TrainArgs& a) {
  const std::string& c = a.ds_precision.communication_data_type;
  if (c == "fp32") return DType::f32;
  if (c == "bf16") return DType::bf16;
  if (c == "fp16") return DType::f16;
  ZT_ASSERT(c.empty(), "communication_data_type ", c);
  return a.bf16 ? DType::bf16 : a.fp16 ? DType::f16 : DType::f32;
}

}  // namespace zt
