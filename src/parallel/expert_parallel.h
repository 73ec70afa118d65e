// expert_parallel.h: expert parallelism (Megatron's --expert-model-parallel-size): the ranks of an
// expert group (dist::ProcessGrid::ep(), folded over the data-parallel ranks) each compute E / size of
// every MoE layer's experts for the tokens of the whole group. This is the nn::EpRegion the layers call
// (nn/moe.h): the per-expert row counts go first (a fixed all-to-all), then the rows themselves, peer by
// peer (exact sizes, no padding), out in dispatch and back in combine, forward and backward.
// The experts are sharded: a rank's layout holds its experts only (LayerCut::experts, whole tensors
// under their global names), so its parameters, gradients and optimizer state are the dense part plus
// E / size of the experts. The DP / ZeRO engine runs over the ranks holding the same experts
// (dist::Group::edp_cp, Megatron's expert-data-parallel group); the dense tensors' gradients are then
// summed over the expert group too (parallel/parallelize.cpp), which makes theirs the sum over every
// data-parallel rank.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_set>

#include "core/state.h"
#include "dist/communicator.h"
#include "models/layout.h"
#include "models/params.h"
#include "nn/moe.h"

namespace zt::parallel {

// The layout's expert cut for rank `rank` of an expert group of `size` (models/layout.h): experts
// [rank E / size, + E / size) of each MoE layer; nothing for size 1 or a dense model. Given a tensor-
// parallel cut (a TP rank's block of E / tp experts), the group splits that block: [block begin +
// rank E / (tp size), + E / (tp size)) (Moe::spread reads the block back).
void expert_parallel_cut(const ModelConfig& c, int size, int rank, LayerCut& cut);

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

// Checkpoints under sharded expert parallelism: every rank writes its own experts' tensors (whole,
// under their global names); the tensors every rank of the expert group holds are written by its
// rank 0 only. Loading asks for what the rank holds, which the checkpoint assembles from whichever
// files hold it: a checkpoint of one expert-parallel size resumes at any other, or in one process.
class EpStateAdapter final : public Stateful {
 public:
  EpStateAdapter(Stateful& inner, const ParamTable& local, int ep_rank);
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override { inner_.load_state(r); }

 private:
  Stateful& inner_;
  std::unordered_set<std::string> shared_;  // the tensors every rank of the group holds
  int rank_;
};

}  // namespace zt::parallel
