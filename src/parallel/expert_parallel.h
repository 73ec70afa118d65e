// expert_parallel.h: expert parallelism (Megatron's --expert-model-parallel-size): the ranks of an
// expert group (dist::ProcessGrid::ep(), folded over the data-parallel ranks) each compute E / size of
// every MoE layer's experts for the tokens of the whole group. This is the nn::EpRegion the layers call
// (nn/moe.h): the per-expert row counts go first (a fixed all-to-all), then the rows themselves, peer by
// peer (exact sizes, no padding), out in dispatch and back in combine, forward and backward.
// What it is not (yet): a sharding of the expert parameters. Every rank still holds every expert; the
// gradients of the experts a rank does not compute stay zero there, so the data-parallel reduction
// (which sums over all ranks) gives each expert its whole gradient, and ZeRO shards the experts like any
// other parameter.
#pragma once
#include <cstdint>

#include "dist/communicator.h"
#include "nn/moe.h"

namespace zt::parallel {

class ExpertParallel final : public nn::EpRegion {
 public:
  explicit ExpertParallel(dist::Communicator& group) : group_(group) {}
  int size() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  void exchange_counts(const int32_t* send, int32_t* recv, int per_peer) override;
  void exchange_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                     int C) override;
  // Bytes of rows this rank has sent so far (dispatch and combine, forward and backward), its own
  // block included (the all-to-all convention of dist/communicator.h: S = what one rank holds).
  double row_bytes() const { return row_bytes_; }

 private:
  dist::Communicator& group_;
  double row_bytes_ = 0;
};

}  // namespace zt::parallel
