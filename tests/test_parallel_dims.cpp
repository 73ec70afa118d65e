// test_parallel_dims.cpp: the process grid without MPI: validation messages, dp_shard -1,
// the rank <-> coordinates layout (pp outermost, tp innermost) against the formula in
// parallel_dims.h, group membership on the 8-rank example of docs/distributed.md, and a
// ProcessGrid on the size-1 local communicator. The MPI runs are in tests/dist/test_comm_mpi.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/parallel_dims.h"

using namespace zt;
using namespace zt::dist;

namespace {

std::string validate_error(const ParallelDims& d, int world) {
  try {
    (void)d.validate(world);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ParallelDims dims(int pp, int r, int s, int cp, int tp, int ep = 1) {
  ParallelDims d;
  d.pp = pp;
  d.dp_replicate = r;
  d.dp_shard = s;
  d.cp = cp;
  d.tp = tp;
  d.ep = ep;
  return d;
}

}  // namespace

TEST(DistGrid, ValidateResolvesAndNamesTheNumbers) {
  ParallelDims d;  // defaults: everything 1, dp_shard whatever is left: pure ZeRO / DDP
  ParallelDims r = d.validate(8);
  EXPECT_EQ(r.dp_shard, 8);
  EXPECT_EQ(r.dp(), 8);
  EXPECT_EQ(r.world_size(), 8);
  EXPECT_EQ(dims(2, 1, -1, 1, 2).validate(8).dp_shard, 2);
  EXPECT_EQ(dims(1, 1, 1, 1, 1).validate(1).to_string(), "pp 1 x dp_replicate 1 x dp_shard 1 x cp 1 x tp 1 (ep 1)");

  EXPECT_EQ(validate_error(dims(1, 2, 2, 1, 3), 8),
            "parallel dims pp 1 x dp_replicate 2 x dp_shard 2 x cp 1 x tp 3 = 12 does not equal the world size 8; "
            "their product must be the number of ranks (mpirun -np), or set dp_shard -1 to take whatever is left");
  EXPECT_EQ(validate_error(dims(1, 2, -1, 1, 3), 8),
            "parallel dims pp 1 x dp_replicate 2 x cp 1 x tp 3 = 6 do not divide the world size 8; dp_shard -1 "
            "takes whatever is left, so the other dims must divide the number of ranks");
  EXPECT_NE(validate_error(dims(1, 1, -1, 1, 16), 8).find("= 16 do not divide the world size 8"), std::string::npos);
  EXPECT_EQ(validate_error(dims(1, 1, -1, 0, 1), 8), "parallel dim cp is 0; every dim must be at least 1");
  EXPECT_NE(validate_error(dims(1, 1, -2, 1, 1), 8).find("dp_shard is -2"), std::string::npos);
  EXPECT_NE(validate_error(ParallelDims{}, 0).find("world size is 0"), std::string::npos);
  // No int overflow on absurd dims: 65536^2 would wrap a 32-bit product to 0.
  EXPECT_NE(validate_error(dims(65536, 65536, 1, 1, 1), 8).find("= 4294967296 does not equal"), std::string::npos);

  // ep folds over dp_shard x cp: it must divide it and be a multiple of cp.
  EXPECT_EQ(dims(1, 1, 4, 2, 1, 4).validate(8).ep, 4);
  EXPECT_EQ(dims(1, 2, 2, 1, 2, 2).validate(8).world_size(), 8);  // ep does not multiply the world
  EXPECT_EQ(validate_error(dims(1, 1, 4, 1, 2, 3), 8),
            "parallel dim ep 3 must divide dp_shard 4 x cp 1 = 4 and be a multiple of cp 1; experts are spread over "
            "the dp_shard x cp ranks");
  EXPECT_NE(validate_error(dims(1, 1, 2, 4, 1, 2), 8).find("multiple of cp 4"), std::string::npos);
}

TEST(DistGrid, RankLayoutIsTheFormula) {
  // Every axis above 1 and distinct sizes, so a swapped axis cannot go unnoticed.
  const ParallelDims d = dims(2, 3, 2, 2, 2).validate(48);
  std::set<int> seen;
  for (int p = 0; p < 2; ++p)
    for (int r = 0; r < 3; ++r)
      for (int s = 0; s < 2; ++s)
        for (int c = 0; c < 2; ++c)
          for (int t = 0; t < 2; ++t) {
            const GridCoords g{p, r, s, c, t};
            const int rank = (((p * 3 + r) * 2 + s) * 2 + c) * 2 + t;
            EXPECT_EQ(grid_rank(d, g), rank);
            EXPECT_EQ(grid_coords(d, rank), g);
            seen.insert(rank);
          }
  EXPECT_EQ(seen.size(), 48u);
  EXPECT_THROW(grid_coords(d, 48), Error);
  EXPECT_THROW(grid_coords(d, -1), Error);
  EXPECT_THROW(grid_rank(d, GridCoords{0, 3, 0, 0, 0}), Error);
  EXPECT_THROW(grid_coords(ParallelDims{}, 0), Error);  // unresolved dp_shard -1
}

// The worked example of docs/distributed.md: 8 ranks, pp 2 x dp 2 x tp 2.
TEST(DistGrid, GroupsOfTheEightRankExample) {
  const ParallelDims d = dims(2, 1, -1, 1, 2).validate(8);
  EXPECT_EQ(d.dp_shard, 2);
  EXPECT_EQ(grid_coords(d, 5), (GridCoords{1, 0, 0, 0, 1}));
  EXPECT_EQ(group_ranks(d, Group::tp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(group_ranks(d, Group::dp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_ranks(d, Group::dp_shard, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_ranks(d, Group::dp_replicate, 5), (std::vector<int>{5}));
  EXPECT_EQ(group_ranks(d, Group::pp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_ranks(d, Group::cp, 5), (std::vector<int>{5}));
  EXPECT_EQ(group_ranks(d, Group::dp_cp, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(group_ranks(d, Group::ep, 2), (std::vector<int>{2}));

  // Hybrid: dp_replicate 2 x dp_shard 2 x tp 2. dp spans both, replicas are 4 ranks apart.
  const ParallelDims h = dims(1, 2, 2, 1, 2).validate(8);
  EXPECT_EQ(group_ranks(h, Group::dp, 3), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(group_ranks(h, Group::dp_shard, 3), (std::vector<int>{1, 3}));
  EXPECT_EQ(group_ranks(h, Group::dp_replicate, 3), (std::vector<int>{3, 7}));
  // cp 2 x tp 2 with dp_shard 2 and ep 4: expert groups fold over dp_shard x cp.
  const ParallelDims e = dims(1, 1, 2, 2, 2, 4).validate(8);
  EXPECT_EQ(group_ranks(e, Group::ep, 6), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(group_ranks(e, Group::dp_shard_cp, 6), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(group_ranks(e, Group::dp_cp, 1), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(group_ranks(e, Group::cp, 1), (std::vector<int>{1, 3}));
  const ParallelDims e2 = dims(1, 1, 4, 1, 2, 2).validate(8);
  EXPECT_EQ(group_ranks(e2, Group::ep, 5), (std::vector<int>{5, 7}));
  // Expert data parallelism: the dp_cp / dp_shard_cp ranks at the same place in their ep runs.
  EXPECT_EQ(group_ranks(e2, Group::edp_shard_cp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_ranks(e2, Group::edp_cp, 7), (std::vector<int>{3, 7}));
  const ParallelDims e3 = dims(1, 2, 4, 1, 1, 2).validate(8);  // ranks: dp_replicate x dp_shard
  EXPECT_EQ(group_ranks(e3, Group::edp_shard_cp, 6), (std::vector<int>{4, 6}));
  EXPECT_EQ(group_ranks(e3, Group::edp_cp, 6), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(group_ranks(e3, Group::edp_cp, 1), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(group_ranks(e, Group::edp_cp, 6), (std::vector<int>{6}));
}

// Every group partitions the world, the sizes are the products of its axes, and every member
// sees the same member list (what makes split's color and key agree across ranks).
TEST(DistGrid, GroupsPartitionTheWorld) {
  for (const ParallelDims& raw : {dims(2, 3, 2, 2, 2, 4), dims(1, 2, 3, 1, 2, 3), dims(3, 1, 1, 1, 1)}) {
    const ParallelDims d = raw.validate(raw.pp * raw.dp_replicate * raw.dp_shard * raw.cp * raw.tp);
    const int n = d.world_size();
    for (size_t gi = 0; gi < kNumGroups; ++gi) {
      const Group g = static_cast<Group>(gi);
      std::vector<int> count(n, 0);
      for (int rank = 0; rank < n; ++rank) {
        const std::vector<int> m = group_ranks(d, g, rank);
        ASSERT_TRUE(std::is_sorted(m.begin(), m.end())) << group_name(g);
        ASSERT_NE(std::find(m.begin(), m.end(), rank), m.end()) << group_name(g);
        for (int q : m) ASSERT_EQ(group_ranks(d, g, q), m) << group_name(g) << " rank " << rank;
        count[rank] = int(m.size());
      }
      const int want = g == Group::dp             ? d.dp()
                       : g == Group::dp_replicate ? d.dp_replicate
                       : g == Group::dp_shard     ? d.dp_shard
                       : g == Group::cp           ? d.cp
                       : g == Group::tp           ? d.tp
                       : g == Group::pp           ? d.pp
                       : g == Group::dp_cp        ? d.dp() * d.cp
                       : g == Group::dp_shard_cp  ? d.dp_shard * d.cp
                       : g == Group::edp_cp       ? d.dp() * d.cp / d.ep
                       : g == Group::edp_shard_cp ? d.dp_shard * d.cp / d.ep
                                                  : d.ep;
      for (int rank = 0; rank < n; ++rank) EXPECT_EQ(count[rank], want) << group_name(g) << " " << d.to_string();
    }
  }
}

TEST(DistGrid, LocalWorldGetsSizeOneGroups) {
  auto world = make_world(Backend::local);
  ProcessGrid grid(*world, ParallelDims{});
  EXPECT_EQ(grid.dims().dp_shard, 1);
  EXPECT_EQ(grid.coords(), GridCoords{});
  EXPECT_EQ(&grid.world(), world.get());
  for (Communicator* c : {&grid.dp(), &grid.dp_replicate(), &grid.dp_shard(), &grid.cp(), &grid.tp(), &grid.pp(),
                          &grid.dp_cp(), &grid.dp_shard_cp(), &grid.ep(), &grid.edp_cp(), &grid.edp_shard_cp()}) {
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->rank(), 0);
    float x = 3.f;
    c->all_reduce(&x, 1);  // callers never branch on size 1
    EXPECT_EQ(x, 3.f);
  }
  EXPECT_EQ(grid.tp().name(), "tp");
  EXPECT_EQ(grid.group(Group::dp_shard_cp).name(), "dp_shard_cp");
  EXPECT_THROW(ProcessGrid(*world, dims(1, 1, 1, 1, 2)), Error);
}
