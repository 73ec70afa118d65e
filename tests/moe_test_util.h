// moe_test_util.h: the activation and scratch views an nn::Moe layer's test passes in (one buffer,
// carved as the model carves its arena). The views point into `mem`, which moves with the struct.
#pragma once
#include <vector>

#include "core/memory.h"
#include "nn/moe.h"

namespace zt::test {

struct MoeBuffers {
  std::vector<double> mem;
  nn::MoeActs acts;
  nn::MoeScratch scratch;
};

inline MoeBuffers moe_buffers(const nn::MoeShape& s, int64_t N) {
  Carver size;
  nn::Moe::carve_acts(size, s, N);
  nn::Moe::carve_scratch(size, s, N);
  MoeBuffers b;
  b.mem.resize(size.used() / sizeof(double) + 8);
  Carver carve(b.mem.data());
  b.acts = nn::Moe::carve_acts(carve, s, N);
  b.scratch = nn::Moe::carve_scratch(carve, s, N);
  return b;
}

}  // namespace zt::test
