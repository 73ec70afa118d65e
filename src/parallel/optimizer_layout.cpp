// optimizer_layout.cpp: see optimizer_layout.h.
#include "parallel/optimizer_layout.h"

#include "core/error.h"

namespace zt::parallel {

std::vector<optim::TensorInfo> optimizer_tensors(const Transformer& model) {
  std::vector<optim::TensorInfo> out;
  const ModelLayout& layout = model.layout();
  for (const ParamInfo& p : model.params().list()) {
    optim::TensorInfo t;
    t.name = p.name;
    t.matrix = p.shape.size() >= 2;
    t.cols = p.shape.empty() ? 1 : p.shape.back();
    t.rows = t.cols > 0 ? p.numel / t.cols : 0;
    if (!t.matrix) {
      t.rows = 1;
      t.cols = p.numel;
    }
    t.hidden = p.shape.size() == 2 && p.unit >= 0 && layout.units[size_t(p.unit)].kind == UnitKind::block;
    out.push_back(std::move(t));
  }
  return out;
}

void check_optimizer_fits(const optim::Optimizer& opt, const Transformer& model) {
  if (!opt.needs_layout() && opt.curvature_interval() == 0) return;
  for (const ParamInfo& p : model.params().list())
    ZT_CHECK(p.split == Split::none, "--optim ", opt.name(),
             " does not run with tensor parallelism yet: its per-matrix statistics (Sophia: its sampled labels) "
             "would see only this rank's slice of ",
             p.name, "; use --tensor_parallel_size 1 (ZeRO and pipeline parallelism work) or adamw_torch");
}

}  // namespace zt::parallel
