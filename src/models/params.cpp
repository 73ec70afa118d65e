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
  p.stream = next_stream_++;
  total_ += p.numel;
  by_name_.emplace(p.name, params_.size());  // the first of a name, as a scan would find
  params_.push_back(std::move(p));
  return params_.back().offset;
}

int64_t ParamTable::add_split(const std::string& name, std::vector<int64_t> shape, std::vector<int64_t> global_shape,
                              Split split, int dim, int64_t split_offset, ParamInit init, int parts) {
  const int64_t off = add(name, std::move(shape), init);
  ParamInfo& p = params_.back();
  p.global_shape = std::move(global_shape);
  if (p.global_shape != p.shape) {  // one rank (tp 1): nothing is split
    p.split = split;
    p.split_dim = dim;
    p.split_offset = split_offset;
    p.split_parts = parts;
  }
  return off;
}

const ParamInfo* ParamTable::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &params_[it->second];
}

}  // namespace zt
