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
#include <memory>

#include "parallel/data_parallel.h"

namespace zt::parallel {

std::unique_ptr<DataParallel> make_offload_engine(Transformer& model, const dist::ProcessGrid& grid,
                                                  const DataParallelOptions& opt);

}  // namespace zt::parallel
