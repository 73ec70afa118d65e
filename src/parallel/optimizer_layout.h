// optimizer_layout.h: what the data-parallel engines tell their optimizer about the tensors it
// updates (optim::OptimizerLayout): each parameter's matrix shape and whether it is a hidden
// block weight (Muon's), and the refusal where a per-matrix optimizer would see only a tensor-
// parallel slice of a matrix.
#pragma once
#include <vector>

#include "models/transformer.h"
#include "optim/optimizer.h"

namespace zt::parallel {

// One entry per model parameter (its index in the ParamTable), as this rank holds it.
std::vector<optim::TensorInfo> optimizer_tensors(const Transformer& model);

// An Error when opt needs a layout (Adafactor, 8-bit AdamW, Muon) and some parameter is a tensor-
// parallel slice: its statistics would be this rank's slice's, not the matrix's.
void check_optimizer_fits(const optim::Optimizer& opt, const Transformer& model);

}  // namespace zt::parallel
