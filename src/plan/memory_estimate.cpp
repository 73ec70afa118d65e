// memory_estimate.cpp: see memory_estimate.h.
#include "plan/memory_estimate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "dist/communicator.h"
#include "kernels/nf4.h"
#include "models/layout.h"
#include "models/transformer.h"
#include "optim/optimizer.h"
#include "parallel/buckets.h"
#include "parallel/shard.h"

namespace zt::parallel {

std::string unit_name(const Unit& u) {
  std::string n = unit_kind_name(u.kind);
  return u.kind == UnitKind::block ? n + " " + std::to_string(u.layer) : n;
}

ModelMemoryInputs memory_inputs(const ModelConfig& cfg, int B, int T, const nn::ActPlan& plan, const LayerCut& cut) {
  ZT_CHECK(B >= 1 && T >= 1, "batch size and sequence length must be positive, got B=", B, " T=", T);
  ZT_CHECK(T <= cfg.max_position, "sequence length ", T, " exceeds the model's context of ", cfg.max_position,
           " positions; lower --model_max_length");
  // The model's own unit list: what ZeRO-3 gathers, bucket by bucket.
  const ModelLayout ml = model_layout(cfg, cut);
  ModelMemoryInputs in;
  in.num_params = ml.table.total();
  for (const Unit& u : ml.units) {
    in.unit_params.push_back(u.size());
    if (u.size() > in.largest_unit_params) {
      in.largest_unit_params = u.size();
      in.largest_unit = unit_name(u);
    }
  }
  std::sort(in.unit_params.rbegin(), in.unit_params.rend());
  size_t acts = 0, temp = 0, copy = 0;
  ModelRuntime::planned_bytes(cfg, B, T, &acts, &temp, 1, plan, &copy, cut);
  in.activation_bytes = int64_t(acts);
  // estimate-memory's cut is expert parallelism's alone (no TP): E / cut.experts ranks per group.
  const int ep = cut.experts > 0 ? cfg.moe.num_experts / cut.experts : 1;
  in.activation_bytes += expert_side_bytes(cfg, B, T, ep, 1, plan.precision);
  in.temporary_bytes = int64_t(temp);
  in.compute_copy_bytes = int64_t(copy);
  in.frozen_bytes = frozen_base_bytes(cfg, ml, plan.precision);
  if (cfg.lora.quantized() && cfg.moe.on())  // one expert dequantized at a time (nn::Moe::nf4_scratch)
    in.temporary_bytes +=
        3 * int64_t(cfg.moe.expert_ffn) * cfg.n_embd * (plan.precision == nn::Precision::bf16 ? 2 : 4);
  return in;
}

int64_t frozen_base_bytes(const ModelConfig& cfg, const ModelLayout& ml, nn::Precision precision) {
  if (!ml.frozen_base) return 0;
  int64_t quantized = 0, bytes = 0;
  auto add = [&](int64_t rows, int64_t cols) {
    quantized += rows * cols;
    // As models/qlora.cpp stores it: NF4 in blocks of 64, or int8 a row at a time.
    bytes += cfg.lora.int8 ? kernels::int8_stored_bytes(rows, cols)
                           : kernels::nf4_stored_bytes(rows * cols, 64, cfg.lora.nf4_double_quant);
  };
  if (cfg.lora.quantized())
    for (const BlockOffsets& b : ml.offsets.blocks) {
      for (const LinearOffsets* lo : {&b.qkv, &b.proj, &b.fc_in, &b.fc_out})
        if (lo->w >= 0) add(lo->out, lo->in);
      for (int e = 0; cfg.moe.on() && e < ml.cut.experts; ++e) {  // [W_gate; W_up] and W_out per held expert
        add(2 * int64_t(cfg.moe.expert_ffn), cfg.n_embd);
        add(cfg.n_embd, cfg.moe.expert_ffn);
      }
    }
  const int64_t rest = ml.base_table.total() - quantized;  // what stays fp32
  bytes += 4 * rest;
  if (precision != nn::Precision::fp32) bytes += rest * int64_t(dtype_size(nn::compute_dtype(precision)));
  return bytes;
}

int64_t expert_side_bytes(const ModelConfig& cfg, int B, int T, int ep, int tp, nn::Precision precision) {
  const MoeConfig& m = cfg.moe;
  if (!m.on() || ep <= 1) return 0;
  // Each layer keeps its experts' side of the exchange outside the arena (nn::MoeExpertSide: the
  // received rows, their hidden values and working rows, (3 C + 6 F) floats per row), about N K
  // rows under balanced routing.
  const int64_t rows = int64_t(B) * T * m.top_k / tp, C = cfg.n_embd, F = m.expert_ffn;
  const int64_t lowp = precision == nn::Precision::bf16 ? 2 * std::max(C, 2 * F) * 2 : 0;  // MoeExpertSide::lo1, lo2
  return int64_t(cfg.n_layer) * rows * ((3 * C + 6 * F) * 4 + lowp);
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::ddp:
      return "DDP (ZeRO-0)";
    case Strategy::zero1:
      return "ZeRO-1";
    case Strategy::zero2:
      return "ZeRO-2";
    case Strategy::zero3:
      return "ZeRO-3";
    case Strategy::zero3_hpz:
      return "ZeRO-3 + hpZ";
    case Strategy::hybrid:
      return "hybrid shard";
  }
  return "?";
}

int resolved_group(const MemoryEstimateOptions& opt) {
  if (opt.hpz_partition_size > 0) return opt.hpz_partition_size;
  return opt.num_ranks >= 4 ? opt.num_ranks / 2 : opt.num_ranks;
}

std::vector<MemoryRow> estimate_memory(const ModelMemoryInputs& in, const MemoryEstimateOptions& opt) {
  const int N = opt.num_ranks;
  ZT_CHECK(N >= 1, "--num_ranks must be at least 1, got ", N);
  const int G = resolved_group(opt);
  ZT_CHECK(G >= 1 && (G >= N || N % G == 0), "--zero_hpz_partition_size ", G, " must divide the number of ranks ", N);
  const int64_t P = in.num_params;
  // Shards are equal-size slices of the padded flat buffer (what reduce_scatter needs).
  auto shard = [&](int n) { return shard_layout(P, n).shard; };
  // A stage's bucket: the cap the trainer would use, never more than the whole gradient.
  auto bucket = [&](int stage) {
    return std::min(4 * P, opt.bucket_bytes > 0 ? opt.bucket_bytes : 4 * reduce_bucket_elements(0, stage));
  };
  int64_t live = 0;  // the largest units that can be resident at once
  for (size_t k = 0; k < in.unit_params.size() && k < size_t(std::max(opt.zero3_live_units, 0)); ++k)
    live += in.unit_params[k];
  if (in.unit_params.empty()) live = int64_t(opt.zero3_live_units) * in.largest_unit_params;
  // Bytes per element of the masters and gradients (fp32; mixed precision adds the compute
  // copy, in.compute_copy_bytes).
  const int64_t W = int64_t(dtype_size(DType::f32));
  const int64_t zero3_comm = 2 * W * live;  // gathered fp32 parameters + unsharded fp32 gradients
  const double S_per = optim::optimizer_state_bytes_per_param(opt.optim);  // AdamW: 8, 8-bit AdamW: 2.03
  auto state = [&](int64_t n) { return int64_t(std::ceil(S_per * double(n))); };

  auto row = [&](Strategy s, int group, int64_t params, int64_t grads, int64_t optim, int64_t comm) {
    MemoryRow r;
    r.strategy = s;
    r.num_ranks = N;
    r.group = group;
    r.params = params + in.compute_copy_bytes + in.frozen_bytes;
    r.grads = grads;
    r.optim = optim;
    r.activations = in.activation_bytes;
    r.temporary = in.temporary_bytes;
    r.comm = N > 1 ? comm : 0;  // a single rank communicates nothing
    return r;
  };
  std::vector<MemoryRow> rows;
  rows.push_back(row(Strategy::ddp, N, W * P, W * P, state(P),
                     bucket(0) + (opt.comm_elem_bytes < W ? int64_t(opt.comm_elem_bytes) * P : 0)));
  // ZeRO-1 reduce-scatters its buckets in place through the communicator's ring, whose scratch
  // is two chunks whatever the bucket (measured, GPT-2 124M, 2 ranks: one 475 MiB bucket
  // peaked 34 MiB below 25 MiB buckets).
  const int64_t ring_scratch = 2 * int64_t(dist::kRingChunkBytes);
  rows.push_back(row(Strategy::zero1, N, W * P, W * P, state(shard(N)), std::min(bucket(1), ring_scratch)));
  // ZeRO-2 (parallel/zero.cpp): a bucket's gradient buffer lives from backward's first write
  // to the end of its reduce-scatter: the bucket filling plus two in flight, and the largest
  // unit's (a tied embedding's buffer lives through the whole backward: the LM head writes
  // it first, the embedding last). Measured on GPT-2 124M, 2 ranks: 231 MiB (docs/distributed.md).
  rows.push_back(row(Strategy::zero2, N, W * P, W * shard(N), state(shard(N)),
                     std::min(W * P, W * in.largest_unit_params + 3 * bucket(2))));
  rows.push_back(row(Strategy::zero3, N, W * shard(N), W * shard(N), state(shard(N)), zero3_comm));
  if (G > 1 && G < N) {
    rows.push_back(row(Strategy::zero3_hpz, G, W * shard(N) + W * shard(G), W * shard(N), state(shard(N)), zero3_comm));
    rows.push_back(row(Strategy::hybrid, G, W * shard(G), W * shard(G), state(shard(G)), zero3_comm));
  }
  return rows;
}

MemoryRow estimate_gpu_memory(const ModelConfig& cfg, const ModelMemoryInputs& in, int B, int T,
                              const nn::ActPlan& plan, const std::string& optim, bool offload_optimizer) {
  const int64_t P = in.num_params, N = int64_t(B) * T;
  const int64_t NH = cfg.n_head, KVH = cfg.n_kv_head, HS = cfg.head_size;
  // kernels/cuda/attention_cuda.h: the tensor-core kernels (bf16, HS 64 or 128) keep bf16 copies
  // of the qkv rows and of dO and D per query row; the CUDA-core kernels (also soft-capped
  // attention) keep D.
  const bool tensor_cores = plan.precision == nn::Precision::bf16 && (HS == 64 || HS == 128) && cfg.attn_softcap == 0.f;
  const int64_t attention = tensor_cores ? N * (NH + 2 * KVH) * HS * 2 + N * NH * HS * 2 + N * NH * 4 : N * NH * 4;
  const int64_t workspace = int64_t(32) << 20;  // kernels/cuda/gemm_lt.cpp
  // Row statistics; tokens, positions, doc_start, targets, and the sliding layers' doc_start.
  const int64_t lm_stats = N * 2 * 4, ids = N * 4 * (cfg.sliding_layers.empty() ? 4 : 5);
  MemoryRow r;
  r.strategy = Strategy::ddp;
  r.params = P * 4 + in.compute_copy_bytes;
  r.grads = P * 4;
  r.optim = offload_optimizer ? 0 : int64_t(std::ceil(double(P) * optim::optimizer_state_bytes_per_param(optim)));
  r.activations = in.activation_bytes;
  r.temporary = in.temporary_bytes;
  r.comm = workspace + attention + lm_stats + ids;
  return r;
}

}  // namespace zt::parallel
