// moe_ep.cpp: the expert-parallel path of the MoE layer (nn/moe.h). This rank's grouped rows are
// already in expert order, so peer p's experts [p El, (p + 1) El) are one contiguous block of them:
// the block goes to p, and p's blocks for this rank's experts arrive in peer order (each in expert
// order). The local experts need them grouped by expert (peers inside), so the rows are permuted
// between the two orders (to_peer / from_peer) around the grouped GEMMs. Backward retraces the same
// route with the gradients. The layer's views hold this rank's experts only (the layout's expert cut)
// or, in unit tests, every expert (the others' gradients then stay zero here). Under TP x EP the
// group spreads this TP rank's block of experts only (Moe::spread); the other blocks' rows stay zero
// here, computed on the other TP ranks, and the layer's output is reduced over TP like a dense one.
#include <algorithm>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/dispatch.h"
#include "nn/moe.h"

namespace zt::nn {

namespace {
// The expert side's sizes and orders from this rank's per-expert counts (of the group's experts)
// and what each peer sends.
int64_t plan_expert_side(MoeExpertSide& x, const int32_t* counts, const std::vector<int32_t>& recv_counts, int P,
                         int El) {
  x.send_rows.assign(size_t(P), 0);
  x.recv_rows.assign(size_t(P), 0);
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < El; ++j) {
      x.send_rows[size_t(p)] += counts[p * El + j];
      x.recv_rows[size_t(p)] += recv_counts[size_t(p * El + j)];
    }
  // Where peer p's rows for local expert j start in the peer order.
  std::vector<int64_t> start(size_t(P) * El);
  int64_t at = 0;
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < El; ++j) start[size_t(p * El + j)] = at, at += recv_counts[size_t(p * El + j)];
  const int64_t Rr = at;
  x.offsets.assign(size_t(El) + 1, 0);
  x.to_peer.resize(size_t(Rr));
  x.from_peer.resize(size_t(Rr));
  int64_t dst = 0;
  for (int j = 0; j < El; ++j) {
    for (int p = 0; p < P; ++p)
      for (int64_t i = 0; i < recv_counts[size_t(p * El + j)]; ++i, ++dst) {
        const int64_t src = start[size_t(p * El + j)] + i;
        x.to_peer[size_t(dst)] = int32_t(src);
        x.from_peer[size_t(src)] = int32_t(dst);
      }
    x.offsets[size_t(j) + 1] = int32_t(dst);
  }
  return Rr;
}
}  // namespace

Moe::Spread Moe::spread(const EpRegion& ep) const {
  const int P = ep.size(), held = shape.experts_held();
  if (held == shape.E) {  // every expert in the views (unit tests): the group spreads all of them
    ZT_ASSERT(shape.E % P == 0, "expert parallelism over ", P, " ranks does not divide ", shape.E, " experts");
    const int El = shape.E / P;
    return {0, shape.E, El, int64_t(ep.rank()) * El * expert_stride()};
  }
  const int begin = shape.held_begin - ep.rank() * held;
  ZT_ASSERT(begin >= 0 && begin + held * P <= shape.E, "MoE layer holds experts [", shape.held_begin, ", +", held,
            ") which expert-parallel rank ", ep.rank(), " of ", P, " cannot compute");
  return {begin, held * P, held, 0};
}

// Rows [off[begin], off[begin + count]) of the grouped rows are the group's experts' (in expert
// order, so peer p's block is contiguous): they go out, and come back into the same rows.
void Moe::ep_forward(const MoeActs& a, const Spread& sp, EpRegion& ep, MoeExpertSide& x) const {
  const int P = ep.size(), El = sp.El, C = shape.C;
  const int64_t F = shape.F, r0 = a.offsets.as<const int32_t>()[sp.begin];
  const int32_t* counts = a.counts.as<const int32_t>() + sp.begin;
  std::vector<int32_t> recv_counts(size_t(P) * El);
  ep.exchange_counts(counts, recv_counts.data(), El);
  const int64_t Rr = plan_expert_side(x, counts, recv_counts, P, El);
  for (auto [buf, width] : {std::pair{&x.xe, int64_t(C)},
                            {&x.h, 2 * F},
                            {&x.act, F},
                            {&x.stage, int64_t(C)},
                            {&x.ye, int64_t(C)},
                            {&x.dact, F},
                            {&x.dh, 2 * F}})
    buf->resize(size_t(Rr * width));
  ep.exchange_rows(a.xp.as<const float>() + r0 * C, x.send_rows.data(), x.stage.data(), x.recv_rows.data(), C);
  kernels::moe_gather(dev, x.xe.data(), x.stage.data(), x.to_peer.data(), Rr, C);
  if (lowp()) {  // the bf16 operands' rows, as many as arrived
    const size_t width = size_t(std::max<int64_t>(C, 2 * F));
    x.lo1.resize(size_t(Rr) * width);
    x.lo2.resize(size_t(Rr) * width);
  }
  run_experts({x.offsets.data(), El, sp.first, x.lo1.data(), x.lo2.data()}, x.xe.data(), x.h.data(), x.act.data(),
              x.ye.data());
  kernels::moe_gather(dev, x.stage.data(), x.ye.data(), x.from_peer.data(), Rr, C);
  ep.exchange_rows(x.stage.data(), x.recv_rows.data(), a.yp.as<float>() + r0 * C, x.send_rows.data(), C);
}

void Moe::ep_backward(const MoeActs& a, const MoeScratch& sc, const Spread& sp, EpRegion& ep, MoeExpertSide& x) const {
  const int C = shape.C;
  const int64_t Rr = int64_t(x.to_peer.size()), r0 = a.offsets.as<const int32_t>()[sp.begin];
  ep.exchange_rows(sc.dyp.as<const float>() + r0 * C, x.send_rows.data(), x.stage.data(), x.recv_rows.data(), C);
  kernels::moe_gather(dev, x.ye.data(), x.stage.data(), x.to_peer.data(), Rr, C);
  run_experts_backward({x.offsets.data(), sp.El, sp.first, x.lo1.data(), x.lo2.data()}, x.xe.data(), x.h.data(),
                       x.act.data(), x.ye.data(), x.dact.data(), x.dh.data());
  kernels::moe_gather(dev, x.stage.data(), x.ye.data(), x.from_peer.data(), Rr, C);
  ep.exchange_rows(x.stage.data(), x.recv_rows.data(), sc.dyp.as<float>() + r0 * C, x.send_rows.data(), C);
}

}  // namespace zt::nn
