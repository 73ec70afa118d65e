// shard.cpp: see shard.h.
#include "parallel/shard.h"

#include <algorithm>

#include "core/error.h"

namespace zt::parallel {

Range intersect(Range a, Range b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

ShardLayout shard_layout(int64_t numel, int num_ranks, int64_t align) {
  ZT_CHECK(num_ranks >= 1, "shard_layout: the number of ranks must be at least 1, got ", num_ranks);
  ZT_CHECK(align >= 1, "shard_layout: alignment must be at least 1 element, got ", align);
  ZT_CHECK(numel >= 0, "shard_layout: negative element count ", numel);
  ShardLayout l;
  l.numel = numel;
  l.num_ranks = num_ranks;
  l.align = align;
  const int64_t unit = int64_t(num_ranks) * align;
  l.padded = (numel + unit - 1) / unit * unit;
  l.shard = l.padded / num_ranks;
  return l;
}

std::vector<ShardPiece> shard_pieces(const ParamTable& table, const ShardLayout& layout, int rank) {
  ZT_CHECK(rank >= 0 && rank < layout.num_ranks, "shard_pieces: rank ", rank, " out of [0, ", layout.num_ranks, ")");
  ZT_CHECK(table.total() == layout.numel, "shard_pieces: the layout covers ", layout.numel,
           " elements but the parameter table has ", table.total());
  std::vector<ShardPiece> out;
  const Range mine = layout.range(rank);
  const auto& list = table.list();
  for (size_t i = 0; i < list.size(); ++i) {
    Range p{list[i].offset, list[i].offset + list[i].numel};
    Range o = intersect(p, mine);
    if (o.empty()) continue;
    out.push_back({int(i), o.begin - p.begin, o.begin, o.size()});
  }
  return out;
}

}  // namespace zt::parallel
