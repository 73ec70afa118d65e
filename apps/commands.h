// commands.h: the subcommands of the ztrain binary; each parses its own flags and
// returns an exit code (errors propagate as zt::Error to main).
#pragma once
#include <string>
#include <vector>

namespace zt::app {

using Args = std::vector<std::string>;
int cmd_train(const Args& args);
int cmd_tokenize(const Args& args);
int cmd_tokenizer_train(const Args& args);
int cmd_eval(const Args& args);
int cmd_generate(const Args& args);
// apps/cmd_dist.cpp: communication benchmark, memory estimator; apps/cmd_launch.cpp: the mpirun
// launcher and elastic agent.
int cmd_bench_comm(const Args& args);
int cmd_launch(const Args& args);
int cmd_estimate_memory(const Args& args);
// apps/cmd_disk.cpp: the disk's bandwidth through offload's io_uring path (docs/offload.md).
int cmd_bench_disk(const Args& args);
// apps/cmd_plan.cpp: the parallel layout planner (docs/planner.md).
int cmd_plan(const Args& args);
// apps/cmd_health.cpp: the pre-flight check (GEMM per rank, all-gather in pairs).
int cmd_health_check(const Args& args);
// apps/cmd_info.cpp: the machine as ztrain sees it (CPU, kernel levels, GEMM ISA, peaks).
int cmd_info(const Args& args);
// apps/cmd_plot.cpp: several runs' loss curves in one PNG.
int cmd_plot(const Args& args);
// apps/cmd_merge.cpp: a LoRA adapter merged into its base, written as an HF folder (docs/peft.md).
int cmd_merge_adapter(const Args& args);
// apps/cmd_version.cpp: `ztrain version` / `ztrain --version`.
int cmd_version(const Args& args);

// True (after printing help) when args ask for --help.
bool wants_help(const Args& args, const std::string& help);

}  // namespace zt::app
