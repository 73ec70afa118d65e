// cmd_info.cpp: `ztrain info`, what this machine gives ztrain (like `ds_report` or torch's
// collect_env): the CPU, the kernel levels it can run and the one chosen (ZT_ISA), oneDNN's GEMM
// ISA, whether bf16 GEMMs are native, and with --peak the GEMM peaks MFU is reported against
// (measured or from the cache). --json for scripts (tests and bench read the levels from it).
#include <omp.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "data/sft_data.h"
#include "flags.h"
#include "kernels/isa.h"
#include "plan/gemm_peak.h"

namespace zt::app {

int cmd_info(const Args& args) {
  bool json = false, peak = false;
  int threads = 0;
  FlagSet f("info");
  f.add("json", &json, "print one JSON object instead of lines");
  f.add("peak", &peak, "also the fp32 and bf16 GEMM peaks (measured once, then cached)");
  f.add("threads", &threads, "threads for --peak, 0 = all cores (0)", range::closed(0, 4096));
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  if (threads > 0) omp_set_num_threads(threads);
  nlohmann::json j{{"cpu_model", kernels::cpu_model_name()},
                   {"kernel_isa", kernels::isa_current()},
                   {"kernel_isas_available", kernels::isa_available()},
                   {"kernel_isas_known", kernels::isa_known()},
                   {"gemm_isa", kernels::gemm_isa()},
                   {"gemm_bf16_native", kernels::gemm_has_bf16()},
                   {"threads", omp_get_max_threads()}};
  if (peak) {
    const std::string dir = sft_default_cache_dir();
    for (DType t : {DType::f32, DType::bf16}) {
      const GemmPeak p = gemm_peak_measured(t, omp_get_max_threads(), dir);
      j[std::string("peak_gflops_") + dtype_name(t)] = p.gflops;
      j[std::string("peak_kind_") + dtype_name(t)] = p.what;
    }
  }
  if (json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  for (auto& [k, v] : j.items()) std::printf("%-22s %s\n", k.c_str(), v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
  return 0;
}

}  // namespace zt::app
