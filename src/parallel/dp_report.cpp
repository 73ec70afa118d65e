// dp_report.cpp: what a data-parallel run reports at its end (train_results.json's
// "data_parallel" and the printed summary): bytes moved per step by collective against the
// engine's plan and the ZeRO paper, and model-state bytes held against the paper.
#include <algorithm>
#include <cstdio>

#include "core/memory.h"
#include "parallel/dp_report.h"

namespace zt::parallel {

nlohmann::json zero_paper_bytes(int64_t psi, int stage, int group, double optim_bytes_per_param) {
  // fp32 masters and gradients; the optimizer's state bytes per parameter (AdamW: 8).
  // Stage 1 shards the optimizer state over the sharding group, stage 2 also the gradients,
  // stage 3 also the parameters.
  const double p = double(dtype_size(DType::f32)) * double(psi), o = optim_bytes_per_param * double(psi), g = group;
  return {{"parameters", stage >= 3 ? p / g : p},
          {"gradients", stage >= 2 ? p / g : p},
          {"optimizer_state", stage >= 1 ? o / g : o}};
}

nlohmann::json comm_report(const DataParallel& dp, int64_t steps, int accumulation) {
  dist::CommStats total;
  for (const dist::Communicator* c : dp.comms()) {
    dist::CommStats s = c->stats();
    for (size_t k = 0; k < dist::kNumCollectives; ++k) total.by_kind[k].add(s.by_kind[k]);
  }
  nlohmann::json j, per;
  double bus = 0, wait = 0;
  for (size_t k = 0; k < dist::kNumCollectives; ++k) {
    const dist::CollectiveStats& c = total.by_kind[k];
    if (c.calls == 0) continue;
    per[dist::collective_name(dist::Collective(k))] = {{"calls_per_step", double(c.calls) / steps},
                                                       {"payload_bytes_per_step", c.bytes / steps},
                                                       {"bus_bytes_per_step", c.bus_bytes / steps},
                                                       {"seconds", c.seconds},
                                                       {"wait_seconds", c.wait_seconds}};
    bus += c.bus_bytes;
    wait += c.wait_seconds;
  }
  j["by_collective"] = per;
  j["bus_bytes_per_step"] = bus / steps;
  j["wait_seconds_per_step"] = wait / steps;
  j["planned_bus_bytes_per_step"] = dp.planned_bus_bytes(accumulation);
  j["paper_bus_bytes_per_step"] = dp.paper_bus_bytes(accumulation);
  return j;
}

void print_dp_report(const nlohmann::json& report, const nlohmann::json& model_states) {
  const auto& cr = report["communication"];
  std::printf("***** data parallel (per rank per step) *****\n");
  std::printf(
      "  bus bytes measured %.0f, planned %.0f, ZeRO paper %.0f (gradient + parameter traffic; the\n"
      "  loss / norm scalar all-reduces are not counted)\n",
      cr["bus_bytes_per_step"].get<double>(), cr["planned_bus_bytes_per_step"].get<double>(),
      cr["paper_bus_bytes_per_step"].get<double>());
  std::printf("  buckets %d, time blocked waiting for reductions %.4f s per step\n", report.value("buckets", 0),
              cr["wait_seconds_per_step"].get<double>());
  for (auto& [k, v] : cr["by_collective"].items())
    std::printf("  %-15s calls %.2f payload %.0f bus %.0f bytes; run: blocked %.3f s of %.3f s in flight\n", k.c_str(),
                v["calls_per_step"].get<double>(), v["payload_bytes_per_step"].get<double>(),
                v["bus_bytes_per_step"].get<double>(), v["wait_seconds"].get<double>(), v["seconds"].get<double>());
  const auto& zp = report["zero_paper_model_state_bytes"];
  for (const char* k : {"parameters", "gradients", "optimizer_state"})
    std::printf("  %-15s %s held (ZeRO paper: %s)\n", k, format_bytes(model_states.value(k, 0.0)).c_str(),
                format_bytes(zp[k].get<double>()).c_str());
}

void print_offload_report(const nlohmann::json& o) {
  std::printf(
      "  Offload to disk: %s per optimizer step moved (%s read, %s written over %lld steps), I/O busy %.3f s per "
      "step at %.2f GB/s; step's stream %.3f s (waiting on reads %.3f s, updating %.3f s), forward/backward waiting "
      "on parameter reads %.3f s; %lld chunks of %lld elements through %d windows of %s%s\n",
      format_bytes(o["bytes_per_step"].get<double>()).c_str(), format_bytes(o["bytes_read"].get<double>()).c_str(),
      format_bytes(o["bytes_written"].get<double>()).c_str(), (long long)o["optimizer_steps"].get<int64_t>(),
      o["io_busy_s"].get<double>() / std::max<double>(1.0, o["optimizer_steps"].get<double>()),
      o["io_GBps"].get<double>(), o["step_stream_s"].get<double>(), o["step_read_wait_s"].get<double>(),
      o["step_update_s"].get<double>(), o["param_read_wait_s"].get<double>(), (long long)o["chunks"].get<int64_t>(),
      (long long)o["chunk_elements"].get<int64_t>(), o["step_windows"].get<int>(),
      format_bytes(o["window_bytes"].get<double>()).c_str(), o["o_direct"].get<bool>() ? "" : " (no O_DIRECT)");
}

}  // namespace zt::parallel
