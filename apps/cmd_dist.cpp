// cmd_dist.cpp: the distribution commands. `ztrain bench-comm` times every collective over
// a range of sizes (nccl-tests' table: time, algbw, busbw), `ztrain launch` builds and execs
// the mpirun command line for N ranks, `ztrain estimate-memory` prints per-rank memory of a
// model under DDP / ZeRO-1/2/3 / hpZ / hybrid sharding.
// It is not a launcher of its own (mpirun starts and wires the ranks).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "auto_fit.h"
#include "commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "dist/communicator.h"
#include "flags.h"
#include "models/config.h"
#include "models/layout.h"
#include "optim/optimizer.h"
#include "parallel/expert_parallel.h"
#include "parallel/offload_engine.h"
#include "plan/memory_estimate.h"
#include "plan/memory_fit.h"
#include "precision.h"

namespace zt::app {
namespace {

// bench-comm's largest message: 1 TiB, beyond any machine's two buffers (the memory check says so).
constexpr double kMaxBenchBytes = double(int64_t(1) << 40);

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  for (size_t b = 0, e; b <= s.size(); b = e + 1) {
    e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
  }
  return out;
}

struct BenchBuffers {
  std::vector<char> a, b;
};

// One timed collective of payload S bytes on comm; returns the seconds per call (the
// slowest rank's, as that is what a training step waits for) and sets *payload to the S
// actually moved (rounded down so every rank gets whole float32 elements).
double bench_one(dist::Communicator& c, dist::Collective kind, size_t bytes, int iters, int warmup, bool nonblocking,
                 BenchBuffers& buf, size_t* payload) {
  using dist::Collective;
  const size_t n = size_t(c.size());
  char* a = buf.a.data();
  char* b = buf.b.data();
  std::function<dist::Request()> op;
  switch (kind) {
    case Collective::all_reduce: {
      size_t count = bytes / 4;
      *payload = count * 4;
      op = [&c, a, count] { return c.iall_reduce(reinterpret_cast<float*>(a), count); };
      break;
    }
    case Collective::reduce_scatter: {
      size_t count = bytes / 4 / n;
      *payload = count * 4 * n;
      op = [&c, a, b, count] {
        return c.ireduce_scatter(reinterpret_cast<float*>(a), reinterpret_cast<float*>(b), count);
      };
      break;
    }
    case Collective::all_gather: {
      size_t per = bytes / 4 / n * 4;
      *payload = per * n;
      op = [&c, a, b, per] { return c.iall_gather(a, b, per); };
      break;
    }
    case Collective::broadcast:
      *payload = bytes;
      op = [&c, a, bytes] { return c.ibroadcast(a, bytes, 0); };
      break;
    case Collective::all_to_all: {
      size_t per = bytes / 4 / n * 4;
      *payload = per * n;
      op = [&c, a, b, per] { return c.iall_to_all(a, b, per); };
      break;
    }
    default:
      ZT_ASSERT(false, "not benchmarked");
  }
  if (*payload == 0) return -1;
  // The blocking path is what a trainer uses between computations; the non-blocking path
  // adds the hand-off to the communication thread.
  auto run = [&] {
    if (nonblocking) return op().wait();
    switch (kind) {
      case Collective::all_reduce:
        return c.all_reduce(reinterpret_cast<float*>(a), *payload / 4);
      case Collective::reduce_scatter:
        return c.reduce_scatter(reinterpret_cast<float*>(a), reinterpret_cast<float*>(b), *payload / 4 / n);
      case Collective::all_gather:
        return c.all_gather(a, b, *payload / n);
      case Collective::broadcast:
        return c.broadcast(a, *payload, 0);
      default:
        return c.all_to_all(a, b, *payload / n);
    }
  };
  for (int i = 0; i < warmup; ++i) run();
  c.barrier();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run();
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  c.all_reduce(&t, 1, dist::ReduceOp::max);
  return t;
}

// The message sizes of bench-comm's rows: min_bytes, then each step_factor times the one before
// but at least 4 x ranks bytes more (so no two rows time the same payload, which a factor barely
// above 1 gave for hours), up to max_bytes. More than 4096 rows is refused.
std::vector<size_t> bench_sizes(int64_t min_bytes, int64_t max_bytes, double factor, int ranks) {
  constexpr size_t kMaxRows = 4096;
  std::vector<size_t> sizes;
  const size_t grain = 4 * size_t(ranks);
  for (double s = double(min_bytes); s <= double(max_bytes) * 1.0000001;) {
    sizes.push_back(size_t(s));
    ZT_CHECK(sizes.size() <= kMaxRows, "ztrain bench-comm: --step_factor ", factor, " makes more than ", kMaxRows,
             " message sizes between --min_bytes ", min_bytes, " and --max_bytes ", max_bytes,
             "; raise --step_factor or narrow the range");
    s = std::max(s * factor, double(sizes.back() + grain));
  }
  return sizes;
}

}  // namespace

int cmd_bench_comm(const Args& args) {
  int64_t min_bytes = 8, max_bytes = int64_t(256) << 20;
  int iters = 20, warmup = 5;
  double step_factor = 2;
  bool nonblocking = false;
  std::string collectives = "all_reduce,reduce_scatter,all_gather,broadcast,all_to_all";
  FlagSet f("bench-comm");
  f.add("min_bytes", &min_bytes, "smallest message in bytes (8)", range::closed(1, kMaxBenchBytes));
  f.add("max_bytes", &max_bytes, "largest message in bytes (268435456 = 256 MiB)", range::closed(1, kMaxBenchBytes));
  f.add("step_factor", &step_factor, "size multiplier between rows (2)", range::above(1, 1024));
  f.add("iters", &iters, "timed iterations per size (20)", range::closed(1, 1e9));
  f.add("warmup", &warmup, "untimed iterations per size (5)", range::closed(0, 1e9));
  f.add("collectives", &collectives, "comma-separated: all_reduce,reduce_scatter,all_gather,broadcast,all_to_all");
  f.add("nonblocking", &nonblocking,
        "time i<collective>() + wait() (the communication thread) instead of the "
        "blocking call");
  if (wants_help(args, f.help() + "\nRun under MPI: mpirun -np 2 ztrain bench-comm (or ztrain launch "
                                  "--nproc_per_node 2 -- bench-comm). Sizes are the whole tensor S as in "
                                  "nccl-tests; busbw applies the ring factors in docs/distributed.md.\n"))
    return 0;
  f.parse(args);
  ZT_CHECK(max_bytes >= min_bytes, "ztrain bench-comm: --min_bytes ", min_bytes, " exceeds --max_bytes ", max_bytes,
           "; lower it or raise --max_bytes");
  // Two buffers of max_bytes per rank, touched up front.
  parallel::check_memory_fits(2 * max_bytes, parallel::ranks_on_this_host(), "bench-comm's buffers", "",
                              "lower --max_bytes");
  std::vector<dist::Collective> kinds;
  for (auto& name : split_list(collectives)) {
    bool found = false;
    for (size_t k = 0; k < size_t(dist::Collective::send); ++k)
      if (name == dist::collective_name(dist::Collective(k))) {
        kinds.push_back(dist::Collective(k));
        found = true;
      }
    ZT_CHECK(found, "--collectives: unknown collective \"", name,
             "\"; choose from all_reduce, reduce_scatter, all_gather, broadcast, all_to_all");
  }
  auto world = dist::make_world();
  const bool root = world->rank() == 0;
  const std::vector<size_t> sizes = bench_sizes(min_bytes, max_bytes, step_factor, world->size());
  BenchBuffers buf;
  buf.a.assign(size_t(max_bytes), 1);  // touched up front: page faults stay out of the timings
  buf.b.assign(size_t(max_bytes), 1);
  if (root)
    std::printf(
        "# ztrain bench-comm: %d rank(s) (%s), float32 sum for reductions, %d iterations after %d warm-up, "
        "%s calls; time is the slowest rank's mean\n",
        world->size(), dist::launched_by_mpi() ? "MPI" : "local", iters, warmup,
        nonblocking ? "non-blocking" : "blocking");
  for (auto kind : kinds) {
    if (root) {
      std::printf("#\n# %s\n", dist::collective_name(kind));
      std::printf("# %12s %12s %6s %12s %12s %12s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
                  "busbw(GB/s)");
    }
    double bus_sum = 0;
    int rows = 0;
    for (const size_t s : sizes) {
      size_t payload = 0;
      double t = bench_one(*world, kind, s, iters, warmup, nonblocking, buf, &payload);
      if (t < 0) continue;
      double algbw = payload / t / 1e9, busbw = dist::bus_bytes(kind, double(payload), world->size()) / t / 1e9;
      bus_sum += busbw;
      ++rows;
      bool bytes_op = kind == dist::Collective::all_gather || kind == dist::Collective::broadcast ||
                      kind == dist::Collective::all_to_all;
      if (root)
        std::printf("  %12zu %12zu %6s %12.2f %12.3f %12.3f\n", payload, bytes_op ? payload : payload / 4,
                    bytes_op ? "byte" : "float", t * 1e6, algbw, busbw);
    }
    if (root && rows) std::printf("# average busbw: %.3f GB/s\n", bus_sum / rows);
  }
  return 0;
}

namespace {

std::string mib(int64_t b) {
  char s[32];
  if (b >= (int64_t(10) << 30))
    std::snprintf(s, sizeof s, "%.2f GiB", b / double(1 << 30));
  else
    std::snprintf(s, sizeof s, "%.1f MiB", b / double(1 << 20));
  return s;
}

// Offload to disk (--offload_optimizer nvme [--offload_param nvme], one CPU process): what the
// offload engine holds in host memory and on disk, sized as the engine sizes itself
// (parallel::plan_offload), under --max_host_memory as `ztrain train` would give it.
int print_offload_estimate(const parallel::ModelMemoryInputs& in, const std::string& optim, bool params,
                           const std::string& cap_text) {
  optim::OptimizerConfig oc;
  oc.external_state = true;  // refuses the optimizers whose state cannot stream
  const int slots = int(optim::make_optimizer(optim, oc, 0)->slot_names().size());
  parallel::DiskOffload d;
  d.optimizer = true;
  d.params = params;
  const int64_t rest = in.activation_bytes + in.temporary_bytes + in.compute_copy_bytes;
  if (!cap_text.empty()) {
    d.host_budget = parse_memory_size(cap_text, "--max_host_memory") - rest - parallel::kOffloadProcessMargin;
    d.budget_source = "--max_host_memory " + cap_text;
  }
  const parallel::OffloadPlan p = parallel::plan_offload(in.unit_params, slots, 4, d);
  std::printf("HW: 1 process, offload to disk (%s%s): chunks of %lld elements.\n", "offload_optimizer nvme",
              params ? ", offload_param nvme, ZeRO-3" : "", (long long)p.chunk_elements);
  std::printf("  %-18s %10s %10s %10s %10s %10s %10s | %11s | %11s\n", "", "params", "grads", "windows", "acts", "temp",
              "margin", "host total", "on disk");
  const int64_t params_host = params ? p.unit_buffers : p.resident_params + in.compute_copy_bytes;
  const int64_t total = p.host() + rest + parallel::kOffloadProcessMargin;
  std::printf("  %-18s %10s %10s %10s %10s %10s %10s | %11s | %11s\n", "offload (nvme)", mib(params_host).c_str(),
              mib(p.grads).c_str(), mib(p.windows).c_str(), mib(in.activation_bytes).c_str(),
              mib(in.temporary_bytes).c_str(), mib(parallel::kOffloadProcessMargin).c_str(), mib(total).c_str(),
              mib(p.file_bytes).c_str());
  std::printf(
      "    params: %s; windows: 4 step windows of one chunk's record; margin: the process itself "
      "(docs/offload.md).\n",
      params ? "offload_param.buffer_count (5) unit buffers of the largest unit" : "the fp32 parameters");
  return 0;
}

}  // namespace

namespace {
// estimate-memory's PEFT flags (train's names and defaults): LoRA adapters over a frozen base, which
// may be quantized (QLoRA).
struct PeftEstimate {
  bool use_peft = false, use_dora = false, load_in_4bit = false, double_quant = false, load_in_8bit = false;
  int lora_r = 16;
  std::string targets;
  void add_to(FlagSet& f) {
    f.add("use_peft", &use_peft, "LoRA adapters on a frozen base: only they train (docs/peft.md) (false)");
    f.add("lora_r", &lora_r, "the adapters' rank (16)", range::closed(1, 1 << 16));
    f.add("lora_target_modules", &targets, "module names or all-linear (PEFT's default per architecture)");
    f.add("use_dora", &use_dora, "DoRA: a magnitude vector per adapted module (false)");
    f.add("load_in_4bit", &load_in_4bit, "QLoRA: the frozen base's linear weights in NF4 (false)");
    f.add("bnb_4bit_use_double_quant", &double_quant, "with --load_in_4bit: 8-bit block scales (false)");
    f.add("load_in_8bit", &load_in_8bit, "the frozen base's linear weights in int8 (false)");
  }
  void apply(const FlagSet& f, ModelConfig& cfg) const {
    for (const char* name : {"lora_r", "lora_target_modules", "use_dora", "load_in_4bit", "load_in_8bit"})
      ZT_CHECK(use_peft || !f.given().count(name), "estimate-memory: --", name,
               " applies to LoRA adapters; add --use_peft");
    ZT_CHECK(!(load_in_4bit && load_in_8bit), "estimate-memory: --load_in_8bit and --load_in_4bit: pick one");
    ZT_CHECK(!double_quant || load_in_4bit, "estimate-memory: --bnb_4bit_use_double_quant needs --load_in_4bit");
    if (!use_peft) return;
    cfg.lora.r = lora_r;
    cfg.lora.dora = use_dora;
    cfg.lora.nf4 = load_in_4bit;
    cfg.lora.nf4_double_quant = double_quant;
    cfg.lora.int8 = load_in_8bit;
    cfg.lora.targets = split_list(targets);
    lora_resolve_targets(cfg);  // an unknown module is one error naming the valid ones
  }
};
}  // namespace

int cmd_estimate_memory(const Args& args) {
  std::string config_path, model_path, ranks = "1", optim = "adamw_torch", device = "cpu", offload = "none";
  std::string offload_param = "none", max_host_memory;
  int B = 8, T = 0, G = 0, ep = 1;
  double bucket_mb = 0;
  FlagSet f("estimate-memory");
  f.add("model_config_path", &config_path, "config.json of the model");
  f.add("model_name_or_path", &model_path, "HF model folder (its config.json is read; weights are not)");
  f.add("per_device_train_batch_size", &B, "sequences per micro-batch per rank (8)",
        range::closed(1, limits::kMaxBatch));
  f.add("model_max_length", &T, "sequence length T (min(1024, model context))", range::closed(1, limits::kMaxLength));
  f.add("num_ranks", &ranks, "data-parallel ranks N, or a comma-separated list (1)");
  f.add("zero_hpz_partition_size", &G, "G for the ZeRO++ hpZ and hybrid-shard rows (0: N/2 when N >= 4)",
        range::closed(0, limits::kMaxBatch));
  f.add("bucket_cap_mb", &bucket_mb,
        "DDP / ZeRO-1/2 gradient bucket in MiB (0: train's default, DDP 25, ZeRO 5e8 elements)",
        range::closed(0, 1 << 20));
  f.add("expert-model-parallel-size", &ep,
        "mixture-of-experts models: each rank holds 1 / EP of the experts and the engine runs over N / EP "
        "ranks (docs/moe.md) (1)",
        range::closed(1, limits::kMaxBatch));
  f.add("optim", &optim, "optimizer whose state is counted, HF's names: adamw_torch | adamw (adamw_torch)");
  f.add("device", &device, "cpu: per-rank rows by strategy; cuda: what one GPU holds (docs/gpu.md) (cpu)");
  f.add("offload_optimizer", &offload,
        "none | cpu | nvme: cpu with --device cuda, the optimizer state in host memory; nvme (CPU), the "
        "optimizer state on disk (docs/offload.md) (none)");
  f.add("offload_param", &offload_param,
        "none | nvme: with --offload_optimizer nvme, the parameters on disk too (none)");
  f.add("max_host_memory", &max_host_memory, "with offload to nvme: the cap the windows are sized under (none)");
  TrainArgs prec;  // the precision and recomputation flags of `ztrain train`, same meaning
  f.add("bf16", &prec.bf16, "bf16 mixed precision (bf16 compute copies and activations)");
  f.add("fp16", &prec.fp16, "fp16 mixed precision (fp32 storage of fp16-rounded values on this CPU)");
  f.add("gradient_checkpointing", &prec.gradient_checkpointing, "full activation recomputation");
  f.add("recompute-granularity", &prec.recompute_granularity, "activation recomputation: full | selective (none)");
  f.add("recompute-num-layers", &prec.recompute_num_layers, "recompute only the first N blocks (-1: all)",
        range::closed(0, 1 << 20).or_value(-1));
  PeftEstimate peft;
  peft.add_to(f);
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  ZT_CHECK(device == "cpu" || device == "cuda", "estimate-memory: --device ", quote(device),
           " is not a device: use cpu or cuda");
  ZT_CHECK(config_path.empty() != model_path.empty(),
           "estimate-memory: give exactly one of --model_config_path or --model_name_or_path");
  std::string cfg_file = config_path.empty() ? model_path + "/config.json" : config_path;
  ModelConfig cfg = config_from_file(cfg_file);
  peft.apply(f, cfg);
  ZT_CHECK(!peft.use_peft || (device == "cpu" && offload == "none"),
           "estimate-memory: --use_peft estimates CPU ranks without offload (as the trainer runs LoRA)");
  if (T <= 0) T = std::min(1024, cfg.max_position);
  ZT_CHECK(parallel::activation_bytes_bound(cfg, B, T) <= parallel::kExactPlanLimit, "estimate-memory: B=", B, " T=", T,
           " needs more than 1 EiB of activations per rank; lower --per_device_train_batch_size or "
           "--model_max_length");
  const nn::ActPlan plan = act_plan_from_args(prec, cfg);
  ZT_CHECK(ep == 1 || cfg.moe.on(), "estimate-memory: --expert-model-parallel-size applies to mixture-of-experts ",
           "models; ", cfg.model_type, " has no experts");
  LayerCut cut;  // expert parallelism: what rank 0 of an expert group holds (every rank holds as much)
  parallel::expert_parallel_cut(cfg, ep, 0, cut);
  auto in = parallel::memory_inputs(cfg, B, T, plan, cut);
  std::printf("Estimated per-rank memory for training with fp32 %s (4 + 4 + %g bytes per parameter unsharded):\n",
              optim.c_str(), optim::optimizer_state_bytes_per_param(optim));
  std::printf("    precision %s (compute copy %s), recomputation %s", nn::precision_name(plan.precision),
              mib(in.compute_copy_bytes).c_str(), nn::recompute_name(plan.recompute));
  if (plan.recompute != nn::Recompute::none)
    std::printf(" of the first %d of %d blocks", plan.recompute_layers, cfg.n_layer);
  std::printf(".\n");
  if (ep > 1) {
    const parallel::ModelMemoryInputs whole = parallel::memory_inputs(cfg, 1, 1, {});
    std::printf(
        "SW: %s model (%s) with %.2fM total params; expert parallel %d: %.2fM per rank (%d of %d experts "
        "per layer), %.2fM largest gathered unit (%s).\n",
        cfg.arch_name(), cfg_file.c_str(), whole.num_params / 1e6, ep, in.num_params / 1e6, cut.experts,
        cfg.moe.num_experts, in.largest_unit_params / 1e6, in.largest_unit.c_str());
  } else {
    std::printf("SW: %s model (%s) with %.2fM total params, %.2fM largest gathered unit (%s).\n", cfg.arch_name(),
                cfg_file.c_str(), in.num_params / 1e6, in.largest_unit_params / 1e6, in.largest_unit.c_str());
  }
  std::printf("    B=%d T=%d: activations %s and temporaries %s per rank under every strategy.\n", B, T,
              mib(in.activation_bytes).c_str(), mib(in.temporary_bytes).c_str());
  if (peft.use_peft)
    std::printf("    LoRA r %d: %.2fM trainable adapter params; the frozen base %s on every rank (%s%s), in params.\n",
                peft.lora_r, in.num_params / 1e6, mib(in.frozen_bytes).c_str(),
                peft.load_in_4bit   ? "NF4 linear weights"
                : peft.load_in_8bit ? "int8 linear weights"
                                    : "fp32",
                plan.precision == nn::Precision::fp32 ? "" : " + its compute copy");
  ZT_CHECK(offload_param == "none" || (offload_param == "nvme" && offload == "nvme"),
           "estimate-memory: --offload_param ", quote(offload_param), " needs --offload_optimizer nvme (none | nvme)");
  ZT_CHECK(ep == 1 || (device == "cpu" && offload == "none" && G == 0),
           "estimate-memory: --expert-model-parallel-size estimates CPU ranks without offload or hpZ (as the trainer "
           "runs it)");
  if (offload == "nvme") {
    ZT_CHECK(device == "cpu" && ranks == "1", "estimate-memory: offload to nvme runs in one process on the CPU");
    return print_offload_estimate(in, optim, offload_param == "nvme", max_host_memory);
  }
  if (device == "cuda") {
    ZT_CHECK(ranks == "1",
             "estimate-memory --device cuda: one GPU, one process (several GPUs are not implemented "
             "yet); drop --num_ranks");
    ZT_CHECK(offload == "none" || offload == "cpu", "estimate-memory: --offload_optimizer ", quote(offload),
             " is not one of none, cpu");
    const parallel::MemoryRow r = parallel::estimate_gpu_memory(cfg, in, B, T, plan, optim, offload == "cpu");
    std::printf("HW: 1 GPU (--device cuda; host mirrors of the checkpointed state are host memory%s).\n",
                offload == "cpu" ? "; offload_optimizer cpu: fp32 masters and optimizer state in host memory" : "");
    std::printf("  %-18s %10s %10s %10s %10s %10s %10s | %11s\n", "", "params", "grads", "optim", "acts", "temp",
                "gpu extra", "total");
    std::printf("  %-18s %10s %10s %10s %10s %10s %10s | %11s\n", "1 GPU", mib(r.params).c_str(), mib(r.grads).c_str(),
                mib(r.optim).c_str(), mib(r.activations).c_str(), mib(r.temporary).c_str(), mib(r.comm).c_str(),
                mib(r.total()).c_str());
    std::printf("    gpu extra: cuBLASLt's workspace, attention's bf16 copies, the LM head's row statistics, ids.\n");
    return 0;
  }
  const std::string cap = bucket_mb > 0 ? mib(int64_t(bucket_mb * (1 << 20))) : "DDP 25 MiB, ZeRO 5e8 elements";
  std::printf(
      "    comm: DDP one gradient bucket, ZeRO-1 the reduce-scatter ring's 16 MiB, ZeRO-2 three buckets + the\n"
      "    largest unit (bucket cap: %s; at most the whole gradient), ZeRO-3 / hpZ / hybrid\n"
      "    the two largest gathered units of parameters + of gradients.\n",
      cap.c_str());
  for (auto& r : split_list(ranks)) {
    parallel::MemoryEstimateOptions opt;
    char* end = nullptr;
    long n = std::strtol(r.c_str(), &end, 10);
    ZT_CHECK(end && *end == 0 && n >= 1 && n <= INT_MAX, "--num_ranks: \"", r, "\" is not a positive integer");
    ZT_CHECK(n % ep == 0, "estimate-memory: --expert-model-parallel-size ", ep, " must divide --num_ranks ", n);
    // Under expert parallelism the DP / ZeRO engine shards over the N / EP ranks holding the same experts.
    opt.num_ranks = int(n / ep);
    opt.hpz_partition_size = ep > 1 ? opt.num_ranks : G;  // the trainer runs no hpZ / hybrid rows under EP
    opt.bucket_bytes = int64_t(bucket_mb * (1 << 20));
    opt.optim = optim;
    auto rows = parallel::estimate_memory(in, opt);
    int g = parallel::resolved_group(opt);
    if (ep > 1)
      std::printf("HW: %ld ranks, expert parallel %d: the engine's %d rank(s)", n, ep, opt.num_ranks);
    else
      std::printf("HW: %d rank(s)", opt.num_ranks);
    if (g > 1 && g < opt.num_ranks)
      std::printf(", hpZ / hybrid group G=%d.\n", g);
    else
      std::printf(" (hpZ / hybrid rows need 1 < G < N; G=%d).\n", g);
    std::printf("  %-18s %10s %10s %10s %10s %10s %10s | %11s\n", "strategy", "params", "grads", "optim", "acts",
                "temp", "comm", "total");
    for (auto& row : rows) {
      std::string name = parallel::strategy_name(row.strategy);
      if (row.strategy == parallel::Strategy::zero3_hpz || row.strategy == parallel::Strategy::hybrid)
        name += " G=" + std::to_string(row.group);
      std::printf("  %-18s %10s %10s %10s %10s %10s %10s | %11s\n", name.c_str(), mib(row.params).c_str(),
                  mib(row.grads).c_str(), mib(row.optim).c_str(), mib(row.activations).c_str(),
                  mib(row.temporary).c_str(), mib(row.comm).c_str(), mib(row.total()).c_str());
    }
  }
  return 0;
}

}  // namespace zt::app
