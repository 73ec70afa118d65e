// moe_loss.cpp: the mixture-of-experts auxiliary losses of a pass, over all layers at once, and
// the routers' statistics (see model_runtime.h).
//
// Load balancing (transformers' load_balancing_loss_func, which Mixtral and Qwen-MoE share): the
// routers' logits of every layer are concatenated (M = L N rows), so with C_e the assignments to
// expert e over all layers and S_e the sum of its probabilities over all rows,
//   aux = E sum_e (C_e / M) (S_e / M),   d aux / d p_{l,t,e} = E C_e / M^2   (the counts are constants).
// Router z-loss (ST-MoE): z = sum over the M rows of logsumexp(logits)^2 / M.
// The pass adds n (coef aux [output_router_logits] + z_coef z) to its loss sum, n its counted target
// tokens, so a step's loss (sum / tokens) is the mean cross-entropy plus the micro-batches' mean of the
// weighted auxiliary losses: HF's per-micro-batch loss + coef aux, averaged over the accumulation.
#include <cmath>

#include "core/error.h"
#include "models/model_runtime.h"

namespace zt {

double ModelRuntime::moe_losses(int slot, float grad_scale, int64_t count, bool backward) {
  const MoeConfig& m = cfg_.moe;
  if (!m.on()) return 0.0;
  const int L = cfg_.n_layer, E = m.num_experts;
  const int64_t N = int64_t(B_) * T_;
  const double M = double(L) * double(N);
  std::vector<double> C(size_t(E), 0.0), S(size_t(E), 0.0);
  // Statistics of training passes only (evaluation's would land in the next step's log).
  MoeStats discard;
  MoeStats& st = backward ? moe_stats_ : discard;
  if (st.load.empty()) st.load.assign(size_t(L) * E, 0);
  double z = 0;
  for (int l = 0; l < L; ++l) {
    // The layer's summary (nn::MoeActs::summary): counts, probability sums, lse^2 sum, dropped.
    const double* sum = slots_[slot].blocks[l].moe.summary.as<const double>();
    for (int e = 0; e < E; ++e) {
      C[size_t(e)] += sum[e];
      st.load[size_t(l) * E + size_t(e)] += int64_t(sum[e]);
      S[size_t(e)] += sum[E + e];
    }
    z += sum[2 * E];
    st.dropped += int64_t(sum[2 * E + 1]);
  }
  double aux = 0;
  for (int e = 0; e < E; ++e) aux += (C[size_t(e)] / M) * (S[size_t(e)] / M);
  aux *= E;
  z /= M;
  ++st.passes;
  st.aux_loss += aux;
  st.z_loss += z;
  const double aux_coef = m.aux_loss ? double(m.aux_loss_coef) : 0.0, n = double(count);
  if (backward) {
    // d (n coef aux) / d p_{l,t,e}, times the pass's gradient scale (the LM head's); the same at every layer.
    if (moe_dprob_.size() <= size_t(slot)) moe_dprob_.resize(size_t(slot) + 1), moe_z_grad_.resize(size_t(slot) + 1);
    std::vector<float>& dprob = moe_dprob_[size_t(slot)];
    dprob.assign(size_t(E), 0.f);
    if (aux_coef > 0)
      for (int e = 0; e < E; ++e) dprob[size_t(e)] = float(grad_scale * n * aux_coef * E * C[size_t(e)] / (M * M));
    moe_z_grad_[size_t(slot)] = float(grad_scale * n * double(m.z_loss_coef) / M);
  }
  return n * (aux_coef * aux + double(m.z_loss_coef) * z);
}

MoeStats ModelRuntime::take_moe_stats() {
  MoeStats s = std::move(moe_stats_);
  moe_stats_ = MoeStats{};
  return s;
}

}  // namespace zt
