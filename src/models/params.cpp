// params.cpp: see params.h.
#include "models/params.h"

namespace zt {

int64_t ParamTable::add(const std::string& name, std::vector<int64_t> shape, ParamInit init) {
  ParamInfo p;
  p.name = name;
  p.shape = std::move(shape);
  p.global_shape = p.shape;
  p.numel = 1;
  for (auto s : p.shape) p.numel *= s;
  p.offset = total_;
  p.init = init;
  total_ += p.numel;
  params_.push_back(std::move(p));
  return params_.back().offset;
}

const ParamInfo* ParamTable::find(const std::string& name) const {
  for (auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace zt
