// planner.h: `ztrain plan` and `ztrain train --auto_parallel` (docs/planner.md). Given a
// model, a sequence length, a global batch and a machine (ranks, cores and memory per host,
// GEMM speed per core, link bandwidth), it enumerates the layouts the trainer runs (data x
// context x tensor x pipeline parallel, ZeRO stage, micro-batch, activation recomputation), predicts each
// one's per-rank peak memory and step time, drops what does not fit or what the trainer
// refuses, and ranks the rest by step time.
//
// Memory: the memory estimator's rows (memory_estimate.h) on a tensor-parallel rank's slices
// (its local parameters, its activations from the same planner the Transformer carves with,
// vocabulary-parallel head), and for a pipeline stage its own units' gradients and optimizer
// state, its blocks' activations times the micro-batches 1F1B keeps in flight there (the
// executor's slot walk over the schedule), plus a fixed runtime (binary, MPI, allocator).
// Time: each rank's training FLOPs over (GEMM GFLOP/s per core x a calibrated efficiency x its
// threads); tensor-parallel all-reduces, pipeline sends and data-parallel reductions as bus
// bytes over the link bandwidth; the 1F1B bubble as (m + P - 1) micro-batch times of the
// slowest stage; and never less than the host's total work spread over its cores (ranks that
// outnumber the cores take turns: a waiting rank gives its core up: dist_wait_cpu).
// It deliberately is not: a simulator of the kernels (one efficiency for all of them), a
// model of overlap (communication is counted as exposed, the cp ring's too).
// Expert parallelism (mixture-of-experts models): a rank holds the dense part and E / (tp ep) of the
// experts (its state sharded over the dp x cp / ep holders), keeps its experts' side of the exchange,
// sends each routed row (C fp32) of its TP block out and back forward and backward ((ep - 1) / ep of
// them leave the rank, balanced routing) and all-reduces the dense gradients over the expert group.
// Context parallelism: a cp rank computes and keeps the activations of T / cp rows (attention's
// causal T^2 work split evenly by the zigzag chunks), holds the ring's buffers, sends its K / V
// blocks around the ring (and dK / dV in backward) and reduces gradients over dp x cp ranks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/config.h"
#include "nn/block.h"

namespace zt::parallel {

struct PlanLayout {
  int dp = 1, tp = 1, pp = 1;
  bool sp = false;         // sequence parallel (tp > 1)
  int zero = 0;            // 0 = DDP
  int micro_batch = 1;     // B, sequences per micro-batch per data-parallel rank
  int accumulation = 1;    // m: micro-batches per step (a pipeline's micro-batches)
  bool recompute = false;  // full activation recomputation
  int cp = 1;              // context parallel ranks (last: the aggregate initialisers above stay)
  // Expert parallel ranks (mixture-of-experts models): folded over the dp x cp ranks, each holding
  // E / ep of every layer's experts; the DP / ZeRO engine runs over the dp x cp / ep holders.
  int ep = 1;
  // "--tensor-model-parallel-size 2 --zero_stage 1 ..." (the trainer's flags for it).
  std::string flags() const;
  std::string name() const;  // "dp2 tp1 pp1 zero1 B4 m1" (" cp2", " ep2" after pp when above 1)
};

// The machine a plan is for. Defaults: this repository's calibration (docs/planner.md).
struct PlanMachine {
  int nproc = 1;                // N ranks in all
  int nodes = 1;                // hosts; ranks per host = N / nodes
  double cores_per_host = 1;    // cores the ranks of a host share
  double gemm_gflops_core = 0;  // one core's fp32 sgemm GFLOP/s on large matrices (measured, or given)
  // Rows (B x T of a micro-batch) at which the sgemm runs at half that speed: a GEMM of r rows
  // runs at r / (r + gemm_half_rows) of it (measured from two sizes, or the default).
  double gemm_half_rows = 0;
  double efficiency = 0;         // training's achieved fraction of it (calibrated)
  double link_gbps = 0;          // a collective's bus bandwidth, GB/s (bench-comm's busbw)
  double latency_us = 20;        // per collective call
  double mem_gbps = 0;           // one core's memory copy bandwidth (the optimizer's update)
  int64_t memory_per_rank = -1;  // bytes a rank may use; < 0 = no limit
  // With more ranks than cores: the fraction of the cores' speed the ranks still get together
  // (context switches, caches shared by several ranks; calibrated).
  double oversubscribed_efficiency = 1;
  int64_t runtime_bytes = 0;  // per rank: the binary, MPI and the allocator (measured)
  int ranks_per_host() const { return nproc / (nodes > 0 ? nodes : 1); }
  // Compute threads a rank gets (--threads): the host's cores shared out, at least one.
  int threads_per_rank() const;
};
// This machine's calibration (docs/planner.md, bench/bench_planner.sh --calibrate, quiet machine):
// the efficiency against the measured sgemm from data-parallel runs with every core busy, the
// oversubscribed efficiency from runs with twice the ranks, the runtime bytes from their peak
// RSS; link and memory speeds from bench-comm and a copy. `ztrain plan` measures the sgemm and
// memory speeds unless given; --auto_parallel uses these defaults, so every run plans alike.
constexpr double kDefaultEfficiency = 0.95;
constexpr double kDefaultGemmGflopsCore = 150;
constexpr double kDefaultGemmHalfRows = 0;
constexpr double kDefaultLinkGbps = 1.5;
constexpr double kDefaultMemGbps = 20;
constexpr double kDefaultOversubscribedEfficiency = 1.0;
constexpr int64_t kDefaultRuntimeBytes = int64_t(80) << 20;

// What the search may vary; a field set (>= 0 / non-empty) pins it (flags a user gave).
struct PlanConstraints {
  int tp = -1, pp = -1, zero = -1, recompute = -1, sp = -1;
  int micro_batch = -1;
  int cp = -1;
  int ep = -1;
};

struct PlanInputs {
  ModelConfig cfg;
  int seq_len = 1;           // T
  int64_t global_batch = 1;  // sequences per optimizer step, all ranks
  nn::Precision precision = nn::Precision::fp32;
  std::string optim = "adamw_torch";
  // What the trainer's context parallelism does not run with yet (check_cp_args): --packing,
  // and --validation_file with pipeline stages.
  bool packing = false, validation = false;
};

struct LayoutMemory {
  int64_t params = 0, grads = 0, optim = 0, activations = 0, temporary = 0, comm = 0, runtime = 0;
  int64_t cp_ring = 0;  // context parallelism's ring buffers and shard rows (cp_ring_bytes)
  // The end of the run, on top of the rest: the streamed export's buffers (checkpoint/hf_export.h:
  // the largest tensor and one rank's pieces of it on the chief).
  int64_t export_extra = 0;
  int stage = 0;  // the pipeline stage with the most (0 without stages)
  int slots = 1;  // micro-batches in flight on that stage
  int64_t training() const { return params + grads + optim + activations + temporary + comm + runtime + cp_ring; }
  int64_t total() const { return training() + export_extra; }
};
struct LayoutTime {
  int threads = 1;
  double core_share = 1;  // a rank's share of the host's cores: its threads, or cores / ranks when fewer
  double compute_s = 0;   // slowest rank's FLOPs / its speed (one step, no bubble)
  double bubble = 0;      // pipeline: idle fraction (P - 1) / (m + P - 1)
  double tp_comm_s = 0, pp_comm_s = 0, dp_comm_s = 0, optimizer_s = 0;
  double cp_comm_s = 0;    // the cp ring's K / V (and dK / dV) sends, every layer and micro-batch
  double ep_comm_s = 0;    // the experts' all-to-all rows: dispatch and combine, forward and backward
  double critical_s = 0;   // the slowest rank's path: compute with the bubble, communication, update
  double cpu_bound_s = 0;  // the host's work over its cores
  double step_s = 0;       // max of the two
};
struct PlanRow {
  PlanLayout layout;
  LayoutMemory memory;
  LayoutTime time;
  double tokens_per_s = 0;
  bool fits = true;
  std::string reason;  // one line: what dominates, what it costs
};

// "" when the trainer runs the layout, else why not (the trainer's own error line).
std::string layout_refusal(const PlanInputs& in, const PlanLayout& l, int nproc);
LayoutMemory layout_memory(const PlanInputs& in, const PlanLayout& l, int64_t runtime_bytes);
LayoutTime layout_time(const PlanInputs& in, const PlanLayout& l, const PlanMachine& m);
// Context parallelism's own memory on a rank: ContextParallel's ring buffers at their largest (two
// K / V blocks, two dK / dV accumulators, a block's partial output, its lse and D) and the
// shard's rows (inputs, targets, positions per slot), for B rows of T / cp tokens; with RoPE the
// whole context's cos / sin table the model extends to for the global positions.
int64_t cp_ring_bytes(const ModelConfig& c, int B, int T, int cp, int tp, int slots);
// Seconds of one micro-batch's ring traffic per layer: (cp - 1) K / V blocks forward, twice
// that backward (K / V and dK / dV), a recomputed forward's again; each block a message.
double cp_ring_seconds(const ModelConfig& c, int B, int T, int cp, int tp, bool recompute, const PlanMachine& m);
// Seconds of one micro-batch's expert-parallel exchanges per MoE layer (tokens: the micro-batch's
// rows on this rank): dispatch and combine, forward and backward (three passes recomputed).
double ep_exchange_seconds(const PlanInputs& in, const PlanLayout& l, double tokens, const PlanMachine& m);
// Every layout of N ranks the trainer accepts under the constraints, fitting first, each group
// by predicted step time (then memory). Throws zt::Error when nothing can run (naming why).
std::vector<PlanRow> plan_layouts(const PlanInputs& in, const PlanMachine& m, const PlanConstraints& c = {});
// Checks the request (one error line each: N < 1, nodes not dividing N, a batch that no
// data-parallel degree divides, T beyond the context).
void check_plan_request(const PlanInputs& in, const PlanMachine& m);

// `ztrain train`'s "will it fit?" under tensor, pipeline or context parallelism (memory_fit.h's check for
// the other layouts): the layout's largest rank x the ranks on this host against the memory
// available (or `limit`), one error naming both. Selective recomputation is counted as none.
void check_model_parallel_memory(const ModelConfig& cfg, int T, const PlanLayout& l, nn::Precision precision,
                                 const std::string& optim, int64_t limit = -1);

// Measurements for `ztrain plan` (one process, planner_measure.cpp): one core's sgemm speed on
// the model's MLP GEMM at 2048 and 128 rows (the large-matrix GFLOP/s, and the half-speed rows
// r0 of r / (r + r0) through both), and one core's memory copy bandwidth in GB/s.
struct GemmSpeed {
  double gflops = 0, half_rows = 0;
};
GemmSpeed measure_gemm_speed(const ModelConfig& cfg, double seconds = 0.3);
double measure_copy_gbps(double seconds = 0.3);

}  // namespace zt::parallel
