// local_sgd.cpp: see local_sgd.h.
#include "parallel/local_sgd.h"

#include <cstring>

namespace zt::parallel {

LocalSgd::LocalSgd(float* params, const ParamTable& table, dist::Communicator& across, const LocalSgdOptions& o)
    : params_(params), table_(table), across_(across), options_(o), n_(table.total()) {
  ZT_ASSERT(options_.steps >= 1, "LocalSgd needs steps >= 1");
  // The anchor (what all groups last agreed on) and the outer momentum are optimizer state:
  // 8 bytes per parameter; delta is the outer gradient's buffer.
  anchor_ = Buffer(size_t(n_) * 4, MemCategory::optimizer_state);
  momentum_ = Buffer(size_t(n_) * 4, MemCategory::optimizer_state);
  delta_ = Buffer(size_t(n_) * 4, MemCategory::temporary);
  std::memcpy(anchor_.data(), params_, size_t(n_) * 4);
  std::memset(momentum_.data(), 0, size_t(n_) * 4);
}

bool LocalSgd::after_step(int64_t step) {
  if ((step + 1) % options_.steps != 0) return false;
  float* a = anchor_.as<float>();
  float* v = momentum_.as<float>();
  float* d = delta_.as<float>();
  const int64_t n = n_;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = a[i] - params_[i];
  const int groups = across_.size();
  if (groups > 1) {
    across_.all_reduce(d, size_t(n));
    bytes_across_ += dist::bus_bytes(dist::Collective::all_reduce, double(n) * 4, groups);
  }
  const float inv = 1.0f / float(groups), mu = float(options_.momentum), lr = float(options_.outer_lr);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = d[i] * inv;
    v[i] = mu * v[i] + g;
    a[i] -= lr * (g + mu * v[i]);
    params_[i] = a[i];
  }
  return true;
}

std::vector<StatePiece> LocalSgd::pieces() const {
  std::vector<StatePiece> out;
  for (const char* slot : {"local_sgd_anchor", "local_sgd_momentum"}) {
    float* base = std::strcmp(slot, "local_sgd_anchor") == 0 ? anchor_.as<float>() : momentum_.as<float>();
    for (const ParamInfo& p : table_.list())
      out.push_back({p.name, p.global_shape, slot, TensorSlice{0, p.numel}, base + p.offset});
  }
  return out;
}

void LocalSgd::save_state(StateWriter& w) const {
  for (const StatePiece& p : pieces()) w.put_tensor(p);
}

void LocalSgd::load_state(StateReader& r) {
  for (const StatePiece& p : pieces()) r.get_tensor(p);
}

}  // namespace zt::parallel
