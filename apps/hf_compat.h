// hf_compat.h: Hugging Face TrainingArguments flags that `ztrain train` resolves here, in apps/,
// rather than handing them to the library as they are: they read the environment (--local_rank),
// convert units (--ddp_bucket_cap_mb -> --reduce_bucket_size), map onto another flag (--use_cpu /
// --no_cuda -> --device cpu), or are taken only with the value that asks for nothing
// (--label_smoothing_factor 0, --dataloader_num_workers 0). Each is honoured or refused with its
// reason, never parsed and ignored (docs/flags.md#hugging-face-trainer-flags).
#pragma once
#include <set>
#include <string>

#include "flags.h"
#include "train_args.h"

namespace zt::app {

struct HfCompatFlags {
  int local_rank = -1;                // HF's default -1: not launched by a launcher that passes it
  double ddp_bucket_cap_mb = 0;       // PyTorch DDP's bucket size in MiB; 0 = not given
  bool use_cpu = false, no_cuda = false;  // no_cuda: HF's older name of use_cpu
  double label_smoothing_factor = 0;  // only 0: the fused LM head has no label smoothing
  int dataloader_num_workers = 0;     // only 0: the loader is one thread, not worker processes
};

// Declares those flags on f, and the reasons for refusing HF names that have a ztrain equivalent.
void add_hf_compat_flags(FlagSet& f, HfCompatFlags& h);

// After parsing: applies them to a (given: the flags on the command line). Throws zt::Error, one
// line naming the flag, for a value ztrain cannot honour or one that contradicts another flag.
void apply_hf_compat_flags(const HfCompatFlags& h, const std::set<std::string>& given, TrainArgs& a);

// The launcher's local rank of this process: OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK, MPICH's
// MPI_LOCALRANKID, or LOCAL_RANK (torch / DeepSpeed launchers); 0 without a launcher. *source
// gets the variable's name, or "no launcher".
int launcher_local_rank(std::string* source);

// --local_rank N (not -1) must be this process's local rank; call it once the world exists, so a
// mismatch on one rank ends the whole job.
void check_local_rank(const HfCompatFlags& h);

}  // namespace zt::app
