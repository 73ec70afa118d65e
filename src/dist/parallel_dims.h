// parallel_dims.h: the process grid. ParallelDims is the plain config (how many ways each
// kind of parallelism splits the ranks); ProcessGrid splits a world communicator ONCE into
// one sub-communicator per kind, so every strategy gets its group by name instead of doing
// rank arithmetic of its own. The rank <-> coordinates mapping and the group membership are
// pure functions (grid_coords, grid_rank, group_ranks), unit-tested without MPI.
//
// Rank layout (docs/distributed.md, "Process grid"): pp outermost, then dp_replicate,
// dp_shard, cp, and tp innermost:
//     rank = (((pp * R + dp_replicate) * S + dp_shard) * CP + cp) * TP + tp
// so TP peers (the chattiest group: two all-reduces per layer) are neighbouring ranks, on one
// host when TP divides the ranks per host (Megatron's order), and a dp_shard group is a run of
// consecutive ranks (the ZeRO hybrid layout of src/parallel/zero.cpp: shard within a host,
// replicate across hosts).
//
// Expert parallelism does not add ranks: like torchtitan, ep is folded over the dp_shard x cp
// ranks (each expert group is a run of ep consecutive positions of the flattened
// dp_shard x cp index), so ep must divide dp_shard x cp and be a multiple of cp.
//
// It deliberately is not: a launcher or a topology probe (it never asks which host a rank is
// on), a parser of flags or configs (the trainer fills ParallelDims), a device mesh of
// arbitrary dimensions (the five dims and their order are fixed), or an owner of the world
// communicator (which must outlive the grid).
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace zt::dist {

struct ParallelDims {
  int dp_replicate = 1;  // DDP-style replicas (hybrid sharding: the groups across hosts)
  int dp_shard = -1;     // ZeRO / FSDP shard group; -1 = whatever the other dims leave of the world
  int cp = 1;            // context parallel: the sequence split across ranks
  int tp = 1;            // tensor (and sequence) parallel: the innermost, neighbouring ranks
  int pp = 1;            // pipeline stages: the outermost
  int ep = 1;            // expert parallel, folded over dp_shard x cp (does not multiply the world)

  // Checks the dims against the number of ranks and returns them with dp_shard -1 resolved.
  // Throws zt::Error naming the numbers (e.g. "... tp 3 x pp 1 = 12 does not equal the world
  // size 8; ...").
  [[nodiscard]] ParallelDims validate(int world_size) const;
  // The product dp_replicate x dp_shard x cp x tp x pp (of resolved dims).
  int world_size() const;
  int dp() const { return dp_replicate * dp_shard; }  // data-parallel degree (data loader ranks)
  // "pp 2 x dp_replicate 1 x dp_shard 2 x cp 1 x tp 2 (ep 1)", in the rank order above.
  std::string to_string() const;
};

// One rank's position on each axis (0-based).
struct GridCoords {
  int pp = 0, dp_replicate = 0, dp_shard = 0, cp = 0, tp = 0;
  bool operator==(const GridCoords&) const = default;
};

// The rank layout above, for resolved dims (validate first). Both throw zt::Error when the
// rank or a coordinate is out of range.
GridCoords grid_coords(const ParallelDims& d, int rank);
int grid_rank(const ParallelDims& d, const GridCoords& c);

// The sub-communicators a grid builds. A group is the set of ranks that differ only along
// its axes; ranks in it are ordered by world rank, which is row-major in the axes (so the
// dp rank is dp_replicate * dp_shard_size + dp_shard).
enum class Group {
  dp,            // dp_replicate x dp_shard: data loader, loss all-reduce, the DP / ZeRO engine
  dp_replicate,  // across replicas: hybrid sharding's all-reduce of the shards
  dp_shard,      // within a replica: ZeRO / FSDP reduce-scatter and all-gather
  cp,            // context parallel ring
  tp,            // tensor parallel all-reduces
  pp,            // pipeline neighbours (send / recv between stages)
  dp_cp,         // dp x cp: every rank holding other tokens of the same model shard (loss, tokens,
                 // and gradient reduction once cp > 1)
  dp_shard_cp,   // dp_shard x cp: the ZeRO shard group once cp > 1 (cp ranks hold the same weights)
  ep,            // expert parallel all-to-all (see above)
  // Expert data parallelism (Megatron's expert-data-parallel group): the ranks of dp_cp / dp_shard_cp
  // at this rank's position in its ep group, which hold the same experts. With ep 1 they are dp_cp
  // and dp_shard_cp; under expert parallelism the DP / ZeRO engine runs over them.
  edp_cp,
  edp_shard_cp,
  count
};
constexpr size_t kNumGroups = static_cast<size_t>(Group::count);
const char* group_name(Group g);

// The world ranks of rank's group g, in group-rank order (rank's group rank is its index).
std::vector<int> group_ranks(const ParallelDims& d, Group g, int rank);

// Splits a world communicator into every Group once, at construction (a collective: every
// rank of world must construct its grid with the same dims at the same point). Size-1 groups
// still get a (size-1) communicator, so callers never branch on whether a kind is in use.
class ProcessGrid {
 public:
  ProcessGrid(Communicator& world, const ParallelDims& dims);

  const ParallelDims& dims() const { return dims_; }  // resolved
  const GridCoords& coords() const { return coords_; }
  Communicator& world() const { return world_; }
  Communicator& group(Group g) const { return *groups_[static_cast<size_t>(g)]; }
  Communicator& dp() const { return group(Group::dp); }
  Communicator& dp_replicate() const { return group(Group::dp_replicate); }
  Communicator& dp_shard() const { return group(Group::dp_shard); }
  Communicator& cp() const { return group(Group::cp); }
  Communicator& tp() const { return group(Group::tp); }
  Communicator& pp() const { return group(Group::pp); }
  Communicator& dp_cp() const { return group(Group::dp_cp); }
  Communicator& dp_shard_cp() const { return group(Group::dp_shard_cp); }
  Communicator& ep() const { return group(Group::ep); }
  Communicator& edp_cp() const { return group(Group::edp_cp); }
  Communicator& edp_shard_cp() const { return group(Group::edp_shard_cp); }

 private:
  Communicator& world_;
  ParallelDims dims_;
  GridCoords coords_;
  std::array<std::unique_ptr<Communicator>, kNumGroups> groups_;
};

}  // namespace zt::dist
