// parallel_dims.cpp: validation of the grid's dims, the rank layout, group membership, and
// the one-time split of the world into the groups. See parallel_dims.h for the layout.
#include "dist/parallel_dims.h"

#include <cstdint>

#include "core/error.h"

namespace zt::dist {
namespace {

// The axes in layout order, outermost first: the order of the rank formula.
enum Axis { kPp, kDpReplicate, kDpShard, kCp, kTp, kNumAxes };
using Axes = std::array<int, kNumAxes>;

Axes axis_sizes(const ParallelDims& d) { return {d.pp, d.dp_replicate, d.dp_shard, d.cp, d.tp}; }
Axes axis_values(const GridCoords& c) { return {c.pp, c.dp_replicate, c.dp_shard, c.cp, c.tp}; }
GridCoords coords_from(const Axes& v) { return {v[kPp], v[kDpReplicate], v[kDpShard], v[kCp], v[kTp]}; }

// Which axes a group spans (ep is not a set of axes: it cuts the flattened dp_shard x cp).
unsigned group_axes(Group g) {
  switch (g) {
    case Group::dp:
      return 1u << kDpReplicate | 1u << kDpShard;
    case Group::dp_replicate:
      return 1u << kDpReplicate;
    case Group::dp_shard:
      return 1u << kDpShard;
    case Group::cp:
      return 1u << kCp;
    case Group::tp:
      return 1u << kTp;
    case Group::pp:
      return 1u << kPp;
    case Group::dp_cp:
      return 1u << kDpReplicate | 1u << kDpShard | 1u << kCp;
    case Group::dp_shard_cp:
      return 1u << kDpShard | 1u << kCp;
    case Group::ep:
    case Group::edp_cp:
    case Group::edp_shard_cp:
    case Group::count:
      break;
  }
  ZT_ASSERT(false, "group ", static_cast<int>(g), " has no axes");
  return 0;
}

// "pp 1 x dp_replicate 2 x cp 1 x tp 3" for the dims that are set (dp_shard left out when -1).
std::string product_text(const ParallelDims& d, bool with_dp_shard) {
  std::string s = str_cat("pp ", d.pp, " x dp_replicate ", d.dp_replicate);
  if (with_dp_shard) s += str_cat(" x dp_shard ", d.dp_shard);
  return s + str_cat(" x cp ", d.cp, " x tp ", d.tp);
}

void check_positive(const char* name, int v, const char* extra = "") {
  ZT_CHECK(v >= 1, "parallel dim ", name, " is ", v, "; every dim must be at least 1", extra);
}

}  // namespace

ParallelDims ParallelDims::validate(int world_size) const {
  ZT_CHECK(world_size >= 1, "the world size is ", world_size, "; a process grid needs at least one rank");
  check_positive("pp", pp);
  check_positive("dp_replicate", dp_replicate);
  check_positive("cp", cp);
  check_positive("tp", tp);
  check_positive("ep", ep);
  if (dp_shard != -1) check_positive("dp_shard", dp_shard, " (or -1: whatever the other dims leave)");
  ParallelDims r = *this;
  // int64: a product of five ints can overflow int before it is compared with the world size.
  const int64_t others = int64_t(pp) * dp_replicate * cp * tp;
  if (dp_shard == -1) {
    ZT_CHECK(others <= world_size && world_size % others == 0, "parallel dims ", product_text(*this, false), " = ",
             others, " do not divide the world size ", world_size,
             "; dp_shard -1 takes whatever is left, so the other dims must divide the number of ranks");
    r.dp_shard = int(world_size / others);
  }
  const int64_t product = others * r.dp_shard;
  ZT_CHECK(product == world_size, "parallel dims ", product_text(r, true), " = ", product,
           " does not equal the world size ", world_size,
           "; their product must be the number of ranks (mpirun -np), or set dp_shard -1 to take whatever is left");
  if (ep > 1) {
    // torchtitan's rule: expert groups borrow whole cp groups of the dp_shard x cp ranks.
    const int64_t sc = int64_t(r.dp_shard) * cp;
    ZT_CHECK(sc % ep == 0 && ep % cp == 0, "parallel dim ep ", ep, " must divide dp_shard ", r.dp_shard, " x cp ", cp,
             " = ", sc, " and be a multiple of cp ", cp, "; experts are spread over the dp_shard x cp ranks");
  }
  return r;
}

int ParallelDims::world_size() const { return pp * dp_replicate * dp_shard * cp * tp; }

std::string ParallelDims::to_string() const { return str_cat(product_text(*this, true), " (ep ", ep, ")"); }

GridCoords grid_coords(const ParallelDims& d, int rank) {
  const Axes n = axis_sizes(d);
  ZT_CHECK(d.dp_shard >= 1, "grid_coords needs resolved dims (dp_shard is ", d.dp_shard, "; call validate first)");
  ZT_CHECK(rank >= 0 && rank < d.world_size(), "rank ", rank, " is outside the grid ", d.to_string(), " of ",
           d.world_size(), " ranks");
  Axes v{};
  for (int a = kNumAxes - 1; a >= 0; --a) {  // innermost (tp) is the fastest-varying digit
    v[a] = rank % n[a];
    rank /= n[a];
  }
  return coords_from(v);
}

int grid_rank(const ParallelDims& d, const GridCoords& c) {
  const Axes n = axis_sizes(d), v = axis_values(c);
  static const char* names[kNumAxes] = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};
  int rank = 0;
  for (int a = 0; a < kNumAxes; ++a) {
    ZT_CHECK(v[a] >= 0 && v[a] < n[a], "grid coordinate ", names[a], " ", v[a], " is outside 0..", n[a] - 1, " of ",
             d.to_string());
    rank = rank * n[a] + v[a];
  }
  return rank;
}

const char* group_name(Group g) {
  switch (g) {
    case Group::dp:
      return "dp";
    case Group::dp_replicate:
      return "dp_replicate";
    case Group::dp_shard:
      return "dp_shard";
    case Group::cp:
      return "cp";
    case Group::tp:
      return "tp";
    case Group::pp:
      return "pp";
    case Group::dp_cp:
      return "dp_cp";
    case Group::dp_shard_cp:
      return "dp_shard_cp";
    case Group::ep:
      return "ep";
    case Group::edp_cp:
      return "edp_cp";
    case Group::edp_shard_cp:
      return "edp_shard_cp";
    case Group::count:
      break;
  }
  return "?";
}

std::vector<int> group_ranks(const ParallelDims& d, Group g, int rank) {
  const GridCoords home = grid_coords(d, rank);
  std::vector<int> ranks;
  if (g == Group::edp_cp || g == Group::edp_shard_cp) {
    // The dp_cp / dp_shard_cp ranks at this rank's position within its ep run.
    const auto ep_position = [&](const GridCoords& c) { return (c.dp_shard * d.cp + c.cp) % d.ep; };
    for (int r : group_ranks(d, g == Group::edp_cp ? Group::dp_cp : Group::dp_shard_cp, rank))
      if (ep_position(grid_coords(d, r)) == ep_position(home)) ranks.push_back(r);
    return ranks;
  }
  if (g == Group::ep) {
    // Runs of ep consecutive positions of the flattened (dp_shard, cp) index.
    const int flat = home.dp_shard * d.cp + home.cp, first = flat - flat % d.ep;
    for (int f = first; f < first + d.ep; ++f) {
      GridCoords c = home;
      c.dp_shard = f / d.cp;
      c.cp = f % d.cp;
      ranks.push_back(grid_rank(d, c));
    }
    return ranks;
  }
  // Every combination of the group's axes, the others held at this rank's values, enumerated
  // row-major (innermost axis fastest): ascending world ranks, and the group rank is the index.
  const unsigned mask = group_axes(g);
  const Axes n = axis_sizes(d);
  int total = 1;
  for (int a = 0; a < kNumAxes; ++a)
    if (mask >> a & 1u) total *= n[a];
  for (int i = 0; i < total; ++i) {
    Axes v = axis_values(home);
    int rest = i;
    for (int a = kNumAxes - 1; a >= 0; --a) {
      if (!(mask >> a & 1u)) continue;
      v[a] = rest % n[a];
      rest /= n[a];
    }
    ranks.push_back(grid_rank(d, coords_from(v)));
  }
  return ranks;
}

ProcessGrid::ProcessGrid(Communicator& world, const ParallelDims& dims)
    : world_(world), dims_(dims.validate(world.size())), coords_(grid_coords(dims_, world.rank())) {
  const int me = world.rank();
  for (size_t i = 0; i < kNumGroups; ++i) {
    const Group g = static_cast<Group>(i);
    const std::vector<int> members = group_ranks(dims_, g, me);
    // Color: the group's first (lowest) world rank, the same for all its members and unique
    // to it; key: this rank's position, so the group rank is its index in members.
    int key = 0;
    while (members[key] != me) ++key;
    groups_[i] = world.split(members.front(), key, group_name(g));
    ZT_ASSERT(groups_[i] && groups_[i]->size() == int(members.size()) && groups_[i]->rank() == key, "group ",
              group_name(g));
  }
}

}  // namespace zt::dist
