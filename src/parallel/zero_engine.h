// zero_engine.h: the ZeRO stages 1-3 engine behind DataParallel::create (zero.cpp).
#pragma once
#include <memory>

#include "parallel/data_parallel.h"

namespace zt::parallel {

std::unique_ptr<DataParallel> make_zero_engine(Transformer& model, const dist::ProcessGrid& grid,
                                               const DataParallelOptions& opt);

}  // namespace zt::parallel
