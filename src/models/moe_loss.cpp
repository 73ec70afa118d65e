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
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/model_runtime.h"

namespace zt {

double ModelRuntime::moe_losses(int slot, float grad_scale, int64_t count, bool backward) {
  const MoeConfig& m = cfg_.moe;
  if (!m.on()) return 0.0;
  const int L = cfg_.n_layer, E = m.num_experts;
  // Every layer's routing: the totals received with the chunk (a pipeline's earlier layers) and the
  // summaries of this chunk's layers (nn::MoeActs::summary: counts, probability sums, lse^2 sum),
  // then this rank's counted tokens and rows; under context parallelism summed over the group.
  std::vector<double> tot(size_t(moe_totals_size()) + 2);
  moe_totals(slot, moe_first_.size() > size_t(slot) ? moe_first_[size_t(slot)] : 0, L, tot.data());
  tot[size_t(2 * E + 2)] = double(count);
  tot[size_t(2 * E + 3)] = double(B_) * T_;
  if (moe_reduce_) moe_reduce_(tot.data(), int(tot.size()));
  const double M = double(L) * tot[size_t(2 * E + 3)], n_all = tot[size_t(2 * E + 2)];
  const double* C = tot.data();
  const double* S = C + E;
  double aux = 0;
  for (int e = 0; e < E; ++e) aux += (C[e] / M) * (S[e] / M);
  aux *= E;
  const double z = tot[size_t(2 * E)] / M;
  if (backward) {  // statistics of training passes only (evaluation's would land in the next step's log)
    ++moe_stats_.passes;
    moe_stats_.aux_loss += aux;
    moe_stats_.z_loss += z;
  }
  const double aux_coef = m.aux_loss ? double(m.aux_loss_coef) : 0.0, n = double(count);
  if (backward) {
    // d (n_all coef aux) / d p_{l,t,e}, times the pass's gradient scale (the LM head's); the same at
    // every layer. n_all: the micro-batch's counted tokens over a context-parallel group.
    float* g = moe_loss_grads(slot);
    for (int e = 0; e < E; ++e) g[e] = aux_coef > 0 ? float(grad_scale * n_all * aux_coef * E * C[e] / (M * M)) : 0.f;
    g[E] = float(grad_scale * n_all * double(m.z_loss_coef) / M);
  }
  return n * (aux_coef * aux + double(m.z_loss_coef) * z);  // the group's sum is n_all's share
}

void ModelRuntime::add_moe_layer_stats(int first, int last, const SlotActs& a) {
  const int E = cfg_.moe.num_experts;
  if (moe_stats_.load.empty()) moe_stats_.load.assign(size_t(cfg_.n_layer) * E, 0);
  for (int l = first; l < last; ++l) {
    const double* sum = a.blocks[l].moe.summary.as<const double>();
    for (int e = 0; e < E; ++e) moe_stats_.load[size_t(l) * E + size_t(e)] += int64_t(sum[e]);
    moe_stats_.dropped += int64_t(sum[2 * E + 1]);
  }
}

void ModelRuntime::set_moe_incoming(int slot, const double* totals) {
  if (moe_in_.size() <= size_t(slot)) moe_in_.resize(size_t(slot) + 1);
  std::vector<double>& in = moe_in_[size_t(slot)];
  in.assign(size_t(moe_totals_size()), 0.0);
  if (totals) std::copy_n(totals, in.size(), in.begin());
}

void ModelRuntime::moe_totals(int slot, int first, int last, double* out) const {
  const size_t n = size_t(moe_totals_size());
  std::fill_n(out, n, 0.0);
  if (size_t(slot) < moe_in_.size() && moe_in_[size_t(slot)].size() == n)
    std::copy_n(moe_in_[size_t(slot)].data(), n, out);
  for (int l = first; l < last; ++l) {
    const double* sum = slots_[slot].blocks[l].moe.summary.as<const double>();
    for (size_t i = 0; i < n; ++i) out[i] += sum[i];
  }
}

float* ModelRuntime::moe_loss_grads(int slot) {
  if (moe_grad_.size() <= size_t(slot)) moe_grad_.resize(size_t(slot) + 1);
  std::vector<float>& g = moe_grad_[size_t(slot)];
  if (g.empty()) g.assign(size_t(cfg_.moe.num_experts) + 1, 0.f);
  return g.data();
}

MoeStats ModelRuntime::take_moe_stats() {
  MoeStats s = std::move(moe_stats_);
  moe_stats_ = MoeStats{};
  return s;
}

}  // namespace zt
