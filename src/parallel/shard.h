// shard.h: how a flat buffer (parameters, gradients, optimizer state) is cut into one
// contiguous shard per rank for ZeRO and hybrid sharding, and which parameters (or parts
// of them) each shard holds. Pure index arithmetic, unit-tested without MPI.
// It deliberately is not the sharded optimizer or the gather/scatter itself (those use a
// Communicator on these ranges).
#pragma once
#include <cstdint>
#include <vector>

#include "models/params.h"

namespace zt::parallel {

// A half-open range [begin, end) of elements of a flat buffer.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return size() == 0; }
  bool operator==(const Range&) const = default;
};
Range intersect(Range a, Range b);

// numel elements padded to a multiple of num_ranks * align, so every rank's shard has the
// same size (what reduce_scatter / all_gather exchange) and starts on an align-element
// boundary (align 16 floats = 64 bytes keeps SIMD loads and the Buffer alignment).
struct ShardLayout {
  int64_t numel = 0;   // real elements
  int64_t padded = 0;  // numel rounded up to a multiple of num_ranks * align
  int64_t shard = 0;   // padded / num_ranks: elements per rank, padding included
  int num_ranks = 1;
  int64_t align = 1;

  // Rank r's slot in the padded buffer: [r*shard, (r+1)*shard).
  Range padded_range(int r) const { return {int64_t(r) * shard, int64_t(r + 1) * shard}; }
  // The real elements rank r owns: its slot clipped to numel (the last ranks may own
  // fewer, or none when numel is tiny).
  Range range(int r) const { return intersect(padded_range(r), {0, numel}); }
  // The rank whose shard holds element i (0 <= i < numel).
  int owner(int64_t i) const { return int(i / shard); }
};
ShardLayout shard_layout(int64_t numel, int num_ranks, int64_t align = 1);

// One parameter's overlap with a shard: elements [param_begin, param_begin + count) of
// parameter `param` (index into ParamTable::list()) sit at flat offsets [flat_begin, ...).
struct ShardPiece {
  int param = 0;
  int64_t param_begin = 0;
  int64_t flat_begin = 0;
  int64_t count = 0;
};
// The pieces of rank r's shard in parameter order (a sharded AdamW needs them for the
// per-tensor weight-decay rule; a checkpoint for per-tensor names).
std::vector<ShardPiece> shard_pieces(const ParamTable& table, const ShardLayout& layout, int rank);

}  // namespace zt::parallel
