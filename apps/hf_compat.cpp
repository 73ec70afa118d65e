// hf_compat.cpp: see hf_compat.h.
#include "hf_compat.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"

namespace zt::app {

void add_hf_compat_flags(FlagSet& f, HfCompatFlags& h) {
  f.add("local_rank", &h.local_rank,
        "accepted from the DeepSpeed / torch launchers: must equal this process's local rank "
        "(OMPI_COMM_WORLD_LOCAL_RANK; 0 without a launcher); -1 = not given (-1)",
        range::closed(0, 65535).or_value(-1));
  f.add("ddp_bucket_cap_mb", &h.ddp_bucket_cap_mb,
        "PyTorch DDP's gradient bucket in MiB: sets --reduce_bucket_size to MiB x 2^20 / 4 fp32 elements",
        range::above(0, 1e6));
  f.add("use_cpu", &h.use_cpu, "train on the CPU: --device cpu (HF's flag)");
  f.add("no_cuda", &h.no_cuda, "HF's older name of --use_cpu: --device cpu");
  f.add("label_smoothing_factor", &h.label_smoothing_factor,
        "only 0 (HF's default): label smoothing is not implemented in the fused LM head", range::below(0, 1));
  f.add("dataloader_num_workers", &h.dataloader_num_workers,
        "only 0: the loader is one prefetch thread over memory-mapped tokens (--dataloader_prefetch sets its depth)",
        range::closed(0, 1024));
  f.refuse_because("dataloader_prefetch_factor",
                   "is PyTorch's per-worker prefetch, and ztrain has no worker processes; use --dataloader_prefetch N "
                   "(micro-batches its loader thread prepares ahead)");
}

namespace {

// --ddp_bucket_cap_mb as fp32 elements: PyTorch's bytes int(MiB x 2^20), 4 bytes each.
int64_t bucket_elements(double mib) { return int64_t(mib * 1024.0 * 1024.0) / 4; }

}  // namespace

void apply_hf_compat_flags(const HfCompatFlags& h, const std::set<std::string>& given, TrainArgs& a) {
  ZT_CHECK(h.label_smoothing_factor == 0, "--label_smoothing_factor ", h.label_smoothing_factor,
           " is not implemented: ztrain's fused LM head (CPU and GPU) computes the plain cross-entropy; drop the "
           "flag or pass 0");
  ZT_CHECK(h.dataloader_num_workers == 0, "--dataloader_num_workers ", h.dataloader_num_workers,
           ": ztrain's loader is one background thread over memory-mapped tokens and starts no worker processes; "
           "drop the flag (or pass 0) and set how far ahead it prepares micro-batches with --dataloader_prefetch");
  if (given.count("ddp_bucket_cap_mb")) {
    const int64_t n = bucket_elements(h.ddp_bucket_cap_mb);
    ZT_CHECK(n >= 1, "--ddp_bucket_cap_mb ", h.ddp_bucket_cap_mb, " is less than one fp32 element; use a larger size");
    ZT_CHECK(!given.count("reduce_bucket_size") || a.reduce_bucket_size == n, "--ddp_bucket_cap_mb ",
             h.ddp_bucket_cap_mb, " (", n, " fp32 elements) and --reduce_bucket_size ", a.reduce_bucket_size,
             " disagree; give one of them");
    a.reduce_bucket_size = n;
    // A DeepSpeed config's reduce_bucket_size must now agree with it, as with the flag itself.
    a.explicit_flags.insert("reduce_bucket_size");
  }
  for (const auto& [flag, on] : {std::pair{"--use_cpu", h.use_cpu}, {"--no_cuda", h.no_cuda}}) {
    if (!on) continue;
    ZT_CHECK(!given.count("device") || a.device == "cpu" || a.device == "auto", flag,
             " asks for the CPU but --device is ", quote(a.device), "; drop one of them");
    a.device = "cpu";
  }
}

int launcher_local_rank(std::string* source) {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK"}) {
    const char* s = std::getenv(v);
    if (!s || !*s) continue;
    char* end = nullptr;
    errno = 0;
    const long r = std::strtol(s, &end, 10);
    if (*end || errno || r < 0 || r > INT32_MAX) continue;  // not a rank: not our launcher's
    *source = v;
    return int(r);
  }
  *source = "no launcher";
  return 0;
}

void check_local_rank(const HfCompatFlags& h) {
  if (h.local_rank == -1) return;
  std::string source;
  const int mine = launcher_local_rank(&source);
  ZT_CHECK(h.local_rank == mine, "--local_rank ", h.local_rank, " does not match this process's local rank ", mine,
           " (", source, "); a launcher passes each process its own --local_rank. Under mpirun or `ztrain launch` "
           "drop the flag: ztrain reads the local rank from the MPI launcher");
}

}  // namespace zt::app
