// local_sgd.h: hierarchical synchronisation for slow links between hosts (seed 001's idea;
// DiLoCo, Douillard et al. 2023). Ranks are grouped (normally by host): within a group the DDP
// engine all-reduces gradients every step as usual (the grid's dp_shard group); across groups
// (the grid's dp_replicate group) nothing moves until every H-th optimizer step, when each rank
// takes its outer gradient, delta = anchor - params (how far H inner steps moved it from the
// parameters all groups last agreed on), averages it across the groups, and applies the outer
// optimizer, SGD with Nesterov momentum as DiLoCo does:
//     v = mu v + mean(delta);  anchor -= lr_outer (mean(delta) + mu v);  params = anchor.
// Inner optimizer states stay per group (DiLoCo keeps them). With one group, lr_outer 1 and mu 0
// the sync gives back the parameters up to the rounding of anchor - (anchor - params) (1e-9
// relative in losses against plain DDP, a test).
// Checkpoints are taken at syncs (--save_steps a multiple of H), when the groups hold the same
// parameters; a checkpoint keeps one copy of them and group 0's inner optimizer state (the
// engine's), plus the anchor and the outer momentum. A resume with several groups therefore
// restarts every group from group 0's inner moments: it continues from a consistent state but is
// not bit-exact against an uninterrupted run (with one group it is).
// It deliberately is not: a sharded engine (ZeRO shards would need the outer step per shard),
// a data sampler (the loader's global batch is unchanged; each group trains on its share).
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "core/state.h"
#include "dist/communicator.h"
#include "models/params.h"

namespace zt::parallel {

struct LocalSgdOptions {
  int steps = 0;          // H: outer sync every H optimizer steps
  double outer_lr = 0.7;  // DiLoCo's outer learning rate
  double momentum = 0.9;  // Nesterov momentum of the outer SGD
};

class LocalSgd final : public Stateful {
 public:
  // params: the flat fp32 parameters every rank holds whole (DDP); across: the replicate group.
  LocalSgd(float* params, const ParamTable& table, dist::Communicator& across, const LocalSgdOptions& o);
  // After optimizer step `step` (0-based): the outer sync when (step + 1) % H == 0. Returns
  // whether it synced.
  bool after_step(int64_t step);
  // Bytes this rank has sent across groups so far (the all-reduce's bus bytes).
  double bytes_across() const { return bytes_across_; }
  int steps() const { return options_.steps; }

  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;

 private:
  std::vector<StatePiece> pieces() const;
  float* params_;
  const ParamTable& table_;
  dist::Communicator& across_;
  LocalSgdOptions options_;
  int64_t n_;
  Buffer anchor_, momentum_, delta_;
  double bytes_across_ = 0;
};

}  // namespace zt::parallel
