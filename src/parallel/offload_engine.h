// offload_engine.h: offload to disk (DeepSpeed's ZeRO-Infinity on one process): the optimizer
// state (offload_optimizer nvme) and, with ZeRO-3's offload_param nvme, the fp32 parameters
// (the masters: an fp32 run computes with them, a bf16 run converts them per pass) live in a
// scratch file under nvme_path and stream through a bounded window of host memory with
// asynchronous I/O (core/async_file.h). docs/offload.md has the pipeline and its numbers.
//
// The file holds one record per chunk, a range of state coordinates inside one model unit:
// [parameters (offload_param) | slot 0 | slot 1 ...], each array 4 KiB aligned. A step streams
// the records through buffer_count windows: chunk c+1 is read while chunk c is updated and
// chunk c-1 written back. With offload_param a pass reads each unit's parameters from the
// records before the model asks for them (the next unit while the current one computes). The
// gradients stay in host memory (fp32, as DeepSpeed keeps them in CPU memory).
// It deliberately is not multi-rank (one process: DDP and ZeRO across ranks refuse it) and
// does not offload the non-elementwise optimizers (their state is not streamable in windows).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/data_parallel.h"

namespace zt::parallel {

std::unique_ptr<DataParallel> make_offload_engine(Transformer& model, const dist::ProcessGrid& grid,
                                                  const DataParallelOptions& opt);

// What the engine holds, from the units' sizes (the model's unit list), the optimizer's slots and
// the options alone: the engine sizes itself with it and `ztrain estimate-memory --offload_optimizer
// nvme` prints it. Bytes, but chunk_elements and largest_unit (elements). An Error when
// d.host_budget is set and too small (one line naming each need).
struct OffloadPlan {
  int64_t largest_unit = 0, chunk_elements = 0;
  int64_t grads = 0, resident_params = 0, unit_buffers = 0, windows = 0;  // host memory
  int64_t file_bytes = 0;                                                 // on disk
  int64_t host() const { return grads + resident_params + unit_buffers + windows; }
};
// What `--max_host_memory` leaves aside for the process itself (binary, oneDNN and OpenMP runtimes,
// data loader, the memory-mapped token file) beyond the estimator's numbers.
constexpr int64_t kOffloadProcessMargin = int64_t(512) << 20;
OffloadPlan plan_offload(const std::vector<int64_t>& units, int slots, int64_t slot_bytes, const DiskOffload& d);

}  // namespace zt::parallel
