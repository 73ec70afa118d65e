// cmd_plan.cpp: `ztrain plan` (docs/planner.md): the layouts of N ranks for a model, ranked by
// predicted step time among those that fit the memory, with the `ztrain train` flags of the best.
// The speeds it needs are measured here in one process (one core's sgemm on the model's MLP
// GEMM, one core's memory copy) unless given; the link bandwidth is given from
// `ztrain bench-comm` (its busbw at large sizes), else this machine's default (docs/planner.md).

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "flags.h"
#include "models/config.h"
#include "plan/planner.h"
#include "auto_fit.h"

namespace zt::app {

namespace {

std::string gib(int64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", double(b) / double(int64_t(1) << 30));
  return s;
}

nlohmann::json row_json(const parallel::PlanRow& r) {
  const auto& l = r.layout;
  const auto& m = r.memory;
  const auto& t = r.time;
  return {{"dp", l.dp},
          {"tp", l.tp},
          {"pp", l.pp},
          {"cp", l.cp},
          {"ep", l.ep},
          {"sequence_parallel", l.sp},
          {"zero_stage", l.zero},
          {"micro_batch", l.micro_batch},
          {"accumulation", l.accumulation},
          {"recompute", l.recompute},
          {"threads", t.threads},
          {"flags", l.flags()},
          {"fits", r.fits},
          {"memory_bytes",
           {{"total", m.total()},
            {"params", m.params},
            {"grads", m.grads},
            {"optim", m.optim},
            {"activations", m.activations},
            {"temporary", m.temporary},
            {"comm", m.comm},
            {"runtime", m.runtime},
            {"cp_ring", m.cp_ring},
            {"export_extra", m.export_extra},
            {"stage", m.stage},
            {"slots", m.slots}}},
          {"time_s",
           {{"step", t.step_s},
            {"compute", t.compute_s},
            {"bubble", t.bubble},
            {"tp_comm", t.tp_comm_s},
            {"pp_comm", t.pp_comm_s},
            {"cp_comm", t.cp_comm_s},
            {"ep_comm", t.ep_comm_s},
            {"dp_comm", t.dp_comm_s},
            {"optimizer", t.optimizer_s},
            {"critical", t.critical_s},
            {"cpu_bound", t.cpu_bound_s}}},
          {"tokens_per_s", r.tokens_per_s},
          {"reason", r.reason}};
}

}  // namespace

int cmd_plan(const Args& args) {
  std::string config_path, model_path, max_memory, optim = "adamw_torch";
  int T = 0, N = 0, nodes = 1, top = 5, tp = -1, pp = -1, cp = -1, ep = -1, zero = -1;
  int64_t G = 0;
  double cores = 0, gemm = 0, half_rows = -1, over = parallel::kDefaultOversubscribedEfficiency, link = 0, mem = 0,
         eff = parallel::kDefaultEfficiency, runtime_mb = -1;
  bool json = false, bf16 = false;
  FlagSet f("plan");
  f.add("model_config_path", &config_path, "config.json of the model");
  f.add("model_name_or_path", &model_path, "HF model folder (its config.json is read; weights are not)");
  f.add("model_max_length", &T, "sequence length T (min(1024, model context))", range::closed(1, limits::kMaxLength));
  f.add("global_batch", &G, "sequences per optimizer step over all ranks (required)",
        range::closed(1, limits::kMaxBatch * 1024));
  f.add("nproc", &N, "ranks in all (required)", range::closed(1, 1 << 16));
  f.add("nnodes", &nodes, "hosts; each runs nproc / nnodes ranks (1)", range::closed(1, 1 << 16));
  f.add("cores", &cores, "cores per host the ranks share (0: this host's)", range::closed(0, 1 << 16));
  f.add("max_memory", &max_memory, "memory per host training may use, e.g. 8GB (no limit)");
  f.add("gemm_gflops", &gemm, "one core's fp32 sgemm GFLOP/s (0: measured now on the model's MLP GEMM)",
        range::closed(0, 1e6));
  f.add("gemm_half_rows", &half_rows,
        "GEMM rows at which sgemm runs at half speed (-1: measured with the sgemm, else 0 with --gemm_gflops)",
        range::closed(0, 1 << 20).or_value(-1));
  f.add("oversubscribed_efficiency", &over,
        "with more ranks than cores, the fraction of its core share a rank gets (1, calibrated)", range::above(0, 1));
  f.add("efficiency", &eff, "training's achieved fraction of the sgemm speed (calibrated, docs/planner.md)",
        range::above(0, 1));
  f.add("link_gbps", &link,
        "collective bus bandwidth in GB/s: bench-comm's busbw at large sizes (0: 1.5, this "
        "machine's, docs/planner.md)",
        range::closed(0, 1e6));
  f.add("mem_gbps", &mem, "one core's memory bandwidth, GB/s read + written (0: measured)", range::closed(0, 1e6));
  f.add("runtime_mb", &runtime_mb, "per-rank memory of the binary, MPI and allocator (-1: the calibrated 80)",
        range::closed(0, 1 << 20).or_value(-1));
  f.add("optim", &optim, "optimizer whose state is counted: adamw_torch | adamw (adamw_torch)");
  f.add("bf16", &bf16, "bf16 mixed precision (compute copies, bf16 activations)");
  f.add("tensor-model-parallel-size", &tp, "pin tp (-1: search)", range::closed(1, 1 << 16).or_value(-1));
  f.add("pipeline-model-parallel-size", &pp, "pin pp (-1: search)", range::closed(1, 1 << 16).or_value(-1));
  f.add("context-parallel-size", &cp, "pin cp (-1: search)", range::closed(1, 1 << 16).or_value(-1));
  f.add("expert-model-parallel-size", &ep, "pin ep, mixture-of-experts models (-1: search)",
        range::closed(1, 1 << 16).or_value(-1));
  f.add("zero_stage", &zero, "pin the ZeRO stage (-1: search)", range::closed(0, 3).or_value(-1));
  f.add("top", &top, "layouts printed (5)", range::closed(1, 1 << 20));
  f.add("json", &json, "print JSON (every layout, best first) instead of the table");
  if (wants_help(args, f.help() + "\nThe printed command runs the best layout; `ztrain train --auto_parallel` picks "
                                  "it itself.\n"))
    return 0;
  f.parse(args);
  ZT_CHECK(config_path.empty() != model_path.empty(),
           "plan: give exactly one of --model_config_path or --model_name_or_path");
  ZT_CHECK(N > 0, "plan: --nproc is required (the ranks to lay out)");
  ZT_CHECK(G > 0, "plan: --global_batch is required (sequences per optimizer step over all ranks)");
  const std::string cfg_file = config_path.empty() ? model_path + "/config.json" : config_path;
  parallel::PlanInputs in;
  in.cfg = config_from_file(cfg_file);
  in.seq_len = T > 0 ? T : std::min(1024, in.cfg.max_position);
  in.global_batch = G;
  in.precision = bf16 ? nn::Precision::bf16 : nn::Precision::fp32;
  in.optim = optim;
  parallel::PlanMachine m;
  m.nproc = N;
  m.nodes = nodes;
  m.cores_per_host = cores > 0 ? cores : available_cores();
  m.efficiency = eff;
  m.oversubscribed_efficiency = over;
  m.runtime_bytes = runtime_mb >= 0 ? int64_t(runtime_mb * (1 << 20)) : parallel::kDefaultRuntimeBytes;
  if (!max_memory.empty()) m.memory_per_rank = parse_memory_size(max_memory, "--max_memory") / m.ranks_per_host();
  m.gemm_gflops_core = m.link_gbps = m.mem_gbps = 1;
  m.gemm_half_rows = 0;                 // placeholders for the request check
  parallel::check_plan_request(in, m);  // bad input fails before measuring
  const bool measured_gemm = gemm <= 0, measured_mem = mem <= 0;
  if (gemm > 0) {
    m.gemm_gflops_core = gemm;
    m.gemm_half_rows = half_rows >= 0 ? half_rows : parallel::kDefaultGemmHalfRows;
  } else {
    const parallel::GemmSpeed g = parallel::measure_gemm_speed(in.cfg);
    m.gemm_gflops_core = g.gflops;
    m.gemm_half_rows = half_rows >= 0 ? half_rows : g.half_rows;
  }
  const double copy = measured_mem ? parallel::measure_copy_gbps() : 0;
  m.mem_gbps = mem > 0 ? mem : copy;
  m.link_gbps = link > 0 ? link : parallel::kDefaultLinkGbps;
  parallel::PlanConstraints c;
  c.tp = tp;
  c.pp = pp;
  c.cp = cp;
  c.ep = ep;
  c.zero = zero;
  const std::vector<parallel::PlanRow> rows = parallel::plan_layouts(in, m, c);
  const parallel::PlanRow& best = rows.front();
  const std::string cmd = str_cat("mpirun -np ", N, " ztrain train ",
                                  config_path.empty() ? "--model_name_or_path " : "--model_config_path ", cfg_file,
                                  " --model_max_length ", in.seq_len, " ", best.layout.flags(), " --threads ",
                                  best.time.threads, bf16 ? " --bf16" : "", " --train_file ...");
  if (!best.fits) {
    int64_t least = rows.front().memory.total();
    for (const auto& r : rows) least = std::min(least, r.memory.total());
    throw Error(str_cat("plan: no layout of ", N, " ranks fits --max_memory ", max_memory, " (", gib(m.memory_per_rank),
                        " per rank); the smallest needs ", gib(least),
                        "; use more ranks, --bf16, or a shorter --model_max_length"));
  }
  if (json) {
    nlohmann::json j;
    j["machine"] = {{"nproc", N},
                    {"nnodes", nodes},
                    {"cores_per_host", m.cores_per_host},
                    {"gemm_gflops_core", m.gemm_gflops_core},
                    {"gemm_measured", measured_gemm},
                    {"efficiency", m.efficiency},
                    {"oversubscribed_efficiency", m.oversubscribed_efficiency},
                    {"gemm_half_rows", m.gemm_half_rows},
                    {"link_gbps", m.link_gbps},
                    {"mem_gbps", m.mem_gbps},
                    {"memory_per_rank", m.memory_per_rank},
                    {"runtime_bytes", m.runtime_bytes}};
    j["model"] = {{"config", cfg_file}, {"seq_len", in.seq_len}, {"global_batch", G}};
    j["layouts"] = nlohmann::json::array();
    for (const auto& r : rows) j["layouts"].push_back(row_json(r));
    j["command"] = cmd;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("# ztrain plan: %s, T=%d, global batch %lld sequences, %d rank(s) on %d host(s) of %g cores\n",
              cfg_file.c_str(), in.seq_len, (long long)G, N, nodes, m.cores_per_host);
  std::printf(
      "# speeds: sgemm %.1f GFLOP/s per core (%s; half speed at %.0f rows) x efficiency %.2f; link %.2f GB/s; "
      "memory %.1f GB/s%s\n",
      m.gemm_gflops_core, measured_gemm ? "measured" : "given", m.gemm_half_rows, m.efficiency, m.link_gbps, m.mem_gbps,
      link > 0 ? "" : " (link: the default; give --link_gbps from bench-comm's busbw)");
  std::printf("# memory limit per rank: %s\n", m.memory_per_rank < 0 ? "none" : gib(m.memory_per_rank).c_str());
  std::printf("# %zu layouts run; best first\n", rows.size());
  std::printf("%-4s %-34s %10s %9s %10s  %s\n", "rank", "layout", "memory", "step(s)", "tokens/s", "why");
  for (size_t i = 0; i < rows.size() && int(i) < top; ++i) {
    const auto& r = rows[i];
    std::printf("%-4zu %-34s %10s %9.3f %10.1f  %s\n", i + 1, r.layout.name().c_str(), gib(r.memory.total()).c_str(),
                r.time.step_s, r.tokens_per_s, r.reason.c_str());
  }
  std::printf("best: %s\n", cmd.c_str());
  return 0;
}

}  // namespace zt::app
