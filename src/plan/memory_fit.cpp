// memory_fit.cpp: see memory_fit.h.
#include "plan/memory_fit.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/memory.h"
#include "models/transformer.h"
#include "plan/memory_estimate.h"

namespace zt::parallel {

// In double so absurd sizes cannot overflow: every per-layer buffer is (B*T) x one of the
// widths below, fewer than 16 of them per layer (nn/block.cpp), plus the residual stream and
// one logits chunk.
double activation_bytes_bound(const ModelConfig& c, int B, int T) {
  const double N = double(B) * T;
  const double w = std::max({double(c.n_embd), double(c.ffn) * 2, double(c.qkv_dim()), double(c.n_head) * c.head_size});
  return 4.0 * N * ((double(c.n_layer) + 3) * 16 * w + double(c.vocab_size));
}

namespace {

std::string gib(double b) { return format_bytes(b); }

}  // namespace

int64_t training_bytes_per_rank(const ModelConfig& cfg, const TrainingLayout& l, std::string* breakdown) {
  const double bound = activation_bytes_bound(cfg, l.micro_batch, l.seq_len);
  if (bound > kExactPlanLimit) {
    if (breakdown) *breakdown = "activations alone, at least";
    return int64_t(kExactPlanLimit);
  }
  const ModelMemoryInputs in = memory_inputs(cfg, l.micro_batch, l.seq_len, l.plan);
  MemoryEstimateOptions opt;
  // Stages 1-3 with 1 < G < N shard within groups of G (hybrid): the memory of N = G.
  opt.num_ranks = l.hpz_group > 1 && l.hpz_group < l.num_ranks ? l.hpz_group : l.num_ranks;
  opt.hpz_partition_size = 1;
  opt.comm_elem_bytes = l.comm_elem_bytes;
  opt.bucket_bytes =
      int64_t(dtype_size(DType::f32)) * std::clamp<int64_t>(l.bucket_elems, 1, std::max<int64_t>(1, in.num_params));
  const std::vector<MemoryRow> rows = estimate_memory(in, opt);
  const MemoryRow& r = rows.at(size_t(std::clamp(l.zero_stage, 0, 3)));
  if (breakdown)
    *breakdown =
        str_cat(strategy_name(r.strategy), ": parameters ", gib(double(r.params)), ", gradients ", gib(double(r.grads)),
                ", optimizer state ", gib(double(r.optim)), ", activations ", gib(double(r.activations + r.temporary)));
  return r.total();  // each term is below 2^60 here, so the sum cannot overflow
}

int64_t inference_bytes(const ModelConfig& cfg, int B, int T) {
  const double bound = activation_bytes_bound(cfg, B, T);
  if (bound > kExactPlanLimit) return int64_t(kExactPlanLimit);
  const ModelMemoryInputs in = memory_inputs(cfg, B, T);
  return 4 * in.num_params + in.activation_bytes + in.temporary_bytes;
}

int ranks_on_this_host() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* s = std::getenv(v)) {
      const int n = std::atoi(s);
      if (n >= 1) return n;
    }
  return 1;
}

void check_memory_fits(int64_t bytes_per_rank, int ranks_on_host, const std::string& what, const std::string& breakdown,
                       const std::string& hint, int64_t limit, const std::string& limit_source) {
  std::string source = limit_source;
  const int64_t avail = limit >= 0 ? limit : available_memory_bytes(&source);
  if (avail < 0) return;  // not Linux, or /proc unreadable: allocation reports the failure instead
  const double need = double(bytes_per_rank) * ranks_on_host;
  if (need <= double(avail)) return;
  const std::string per_rank = ranks_on_host > 1 ? str_cat(" for the ", ranks_on_host, " ranks on this host (",
                                                           gib(double(bytes_per_rank)), " each)")
                                                 : "";
  throw Error(str_cat(what, " needs an estimated ", gib(need), per_rank,
                      breakdown.empty() ? "" : " (" + breakdown + ")", " but only ", gib(double(avail)),
                      " is available (", source, "); ", hint));
}

void check_training_memory(const ModelConfig& cfg, const TrainingLayout& l, int64_t limit,
                           const std::string& limit_source, const std::string& extra_hint) {
  std::string breakdown;
  const int64_t need = training_bytes_per_rank(cfg, l, &breakdown);
  check_memory_fits(
      need, ranks_on_this_host(), "training this model", breakdown,
      extra_hint +
          "use a smaller model, --per_device_train_batch_size or --model_max_length, --bf16, activation "
          "recomputation (--gradient_checkpointing), --auto_find_batch_size, or more ranks with --zero_stage 3 "
          "(ztrain estimate-memory compares the options)",
      limit, limit_source);
}

}  // namespace zt::parallel
