// gpu_engine.h: the training engine of a model on one GPU (see gpu_engine.cpp). Built with the
// CUDA backend only; DataParallel::create picks it for a model whose device is cuda.
#pragma once
#include <memory>

#include "parallel/data_parallel.h"

namespace zt::parallel {

std::unique_ptr<DataParallel> make_gpu_engine(Transformer& model, const dist::ProcessGrid& grid,
                                              const DataParallelOptions& opt);

}  // namespace zt::parallel
