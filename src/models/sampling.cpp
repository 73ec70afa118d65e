// sampling.cpp: see sampling.h.
#include "models/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zt {

int32_t sample_token(TensorView logits_view, const SamplingConfig& cfg, Rng& rng) {
  const float* logits = logits_view.as<const float>();
  const int V = int(logits_view.numel());
  if (cfg.temperature <= 0) return int32_t(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  int keep = cfg.top_k > 0 ? std::min(cfg.top_k, V) : V;
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  idx.resize(keep);
  std::vector<double> p(keep);
  double mx = logits[idx[0]], sum = 0;
  for (int i = 0; i < keep; ++i) sum += (p[i] = std::exp((logits[idx[i]] - mx) / cfg.temperature));
  // Nucleus: the smallest prefix (by probability) whose mass reaches top_p.
  double cum = 0;
  int n = keep;
  for (int i = 0; i < keep; ++i) {
    cum += p[i] / sum;
    if (cum >= cfg.top_p) {
      n = i + 1;
      break;
    }
  }
  double total = 0;
  for (int i = 0; i < n; ++i) total += p[i];
  double r = rng.uniform() * total;
  for (int i = 0; i < n; ++i) {
    r -= p[i];
    if (r <= 0) return idx[i];
  }
  return idx[n - 1];
}

}  // namespace zt
