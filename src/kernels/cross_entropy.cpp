// cross_entropy.cpp: see cross_entropy.h. Per chunk: one GEMM for the logits, a
// row-parallel softmax that turns logits into their gradient in place, then two GEMMs
// for dx and dw.
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/convert.h"
#include "kernels/fast_math.h"
#include "kernels/gemm.h"

namespace zt::kernels {

namespace {
// A row's logits z (n real columns of V) after its softmax (exp values summing to sum) become
// d(loss)/d(logits): z * grad_scale / sum, minus grad_scale at the target column t (if this
// row holds it), then lowered to the GEMMs' dtype while the row is in cache.
inline void row_gradient(float* z, int n, int V, float sum, int64_t t, float grad_scale, uint16_t* low_row,
                         const LmHeadCompute& k, const float* dcap = nullptr) {
  const float ks = grad_scale / sum;
#pragma omp simd
  for (int v = 0; v < n; ++v) z[v] *= ks;
  if (t >= 0 && t < n) z[t] -= grad_scale;
  if (dcap)  // soft-capped logits: through c tanh(z / c), whose derivative is 1 - tanh^2
#pragma omp simd
    for (int v = 0; v < n; ++v) z[v] *= dcap[v];
  if (low_row) to_lowp(k.t, low_row, z, V);
  if (k.round_f16) round_to_f16(z, z, V);
}

// Gemma 2's final soft-capping of a chunk's logits in place (the first n columns of each of rows
// rows of V), keeping 1 - tanh^2 in dcap (rows x V) for the gradient. std::tanh: the cap saturates
// large logits, where an approximation would lose the gradient's digits.
void softcap_logits(float* z, float* dcap, int64_t rows, int n, int V, float c) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    for (int v = 0; v < n; ++v) {
      const float t = std::tanh(z[i * V + v] / c);
      z[i * V + v] = c * t;
      dcap[i * V + v] = 1.0f - t * t;
    }
}

// A chunk's backward: dx (=) and dw (+=; none when dw is null) from the logits' gradient (low in the GEMMs' dtype, or
// the fp32 scratch).
inline void chunk_backward(const LmHeadCompute& k, const uint16_t* low, const float* scratch, int64_t rows, int C,
                           int V, const void* xc, float* dx, float* dw) {
  const void* g = low ? static_cast<const void*>(low) : scratch;
  gemm_typed(k.t, false, false, rows, C, V, 1.0f, g, V, k.w, C, 0.0f, dx, C);
  if (dw) gemm_typed(k.t, true, false, V, C, rows, 1.0f, g, V, xc, C, 1.0f, dw, C);  // null: frozen (LoRA)
}

}  // namespace

int32_t sample_label(const float* z, int V, float sum, double u) {
  // Inverse CDF in double: the first label whose running sum passes u * sum; a label of zero
  // probability is never drawn (the last positive one takes any rounding left over).
  const double target = u * double(sum);
  double run = 0.0;
  int32_t last = 0;
  for (int v = 0; v < V; ++v) {
    if (z[v] <= 0.f) continue;
    last = v;
    run += double(z[v]);
    if (run > target) return v;
  }
  return last;
}

double sample_uniform(uint64_t seed, int64_t row) {
  uint64_t x = seed + uint64_t(row) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return double(x >> 11) * 0x1.0p-53;
}

double lmhead_ce(float* dx, float* dw, const float* x, const float* w, const int32_t* targets, const LmHeadDims& d,
                 float grad_scale, float* scratch, int64_t* count, const LmHeadCompute* compute, double* token_loss) {
  const int C = d.C, V = d.V;
  LmHeadCompute fp32{DType::f32, x, w, nullptr, false};
  const LmHeadCompute& k = compute ? *compute : fp32;
  const size_t es = dtype_size(k.t);
  check_lm_targets(targets, d.N, V);
  double loss = 0.0;
  int64_t counted = 0;
  std::vector<float> dcap(d.softcap > 0.f ? size_t(std::min(d.chunk, d.N)) * V : 0);
  for (int64_t r0 = 0; r0 < d.N; r0 += d.chunk) {
    int64_t rows = std::min(d.chunk, d.N - r0);
    const void* xc = static_cast<const char*>(k.x) + size_t(r0) * C * es;
    gemm_typed(k.t, false, true, rows, V, C, 1.0f, xc, C, k.w, C, 0.0f, scratch, V);
    if (d.softcap > 0.f) softcap_logits(scratch, dcap.data(), rows, V, V, d.softcap);
    uint16_t* low = k.t != DType::f32 ? static_cast<uint16_t*>(k.dlogits) : nullptr;
    double chunk_loss = 0.0;
    int64_t chunk_count = 0;
#pragma omp parallel for schedule(static) reduction(+ : chunk_loss, chunk_count)
    for (int64_t i = 0; i < rows; ++i) {
      float* z = scratch + i * V;
      int32_t tgt = targets[r0 + i];
      if (tgt == kIgnoreIndex) {
        std::fill_n(z, V, 0.f);
        if (dx && low) std::fill_n(low + i * V, V, uint16_t(0));
        if (token_loss) token_loss[r0 + i] = 0.0;
        if (d.token_rank) d.token_rank[r0 + i] = 0;
        continue;
      }
      if (d.token_rank) {  // before the row becomes probabilities: ties in exp() would merge logits
        const float zt = z[tgt];
        int64_t above = 0;
        for (int v = 0; v < V; ++v) above += z[v] > zt;
        d.token_rank[r0 + i] = above + 1;
      }
      float mx = z[0];
#pragma omp simd reduction(max : mx)
      for (int v = 0; v < V; ++v) mx = std::max(mx, z[v]);
      // The target's logit relative to the max, kept before the row becomes probabilities:
      // log(sum) - shifted logit never underflows the way log(p_target) can.
      float shifted = z[tgt] - mx;
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < V; ++v) {
        z[v] = fast_exp(z[v] - mx);
        sum += z[v];
      }
      if (d.sample_seed) {  // Sophia: the model's own sample is the target
        tgt = sample_label(z, V, sum, sample_uniform(d.sample_seed, r0 + i));
        shifted = std::log(z[tgt]);
      }
      const double li = std::log(static_cast<double>(sum)) - static_cast<double>(shifted);
      chunk_loss += li;
      if (token_loss) token_loss[r0 + i] = li;
      ++chunk_count;
      if (dx)
        row_gradient(z, V, V, sum, tgt, grad_scale, low ? low + i * V : nullptr, k,
                     dcap.empty() ? nullptr : dcap.data() + i * V);
    }
    loss += chunk_loss;
    counted += chunk_count;
    if (dx) chunk_backward(k, low, scratch, rows, C, V, xc, dx + r0 * C, dw);
  }
  if (count) *count = counted;
  return loss;
}

}  // namespace zt::kernels

namespace zt::kernels {

double lmhead_ce_vocab(float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                       const LmHeadDims& d, float grad_scale, float* scratch, int64_t* count, const VocabShard& vs,
                       const LmHeadCompute* compute, double* token_loss) {
  ZT_ASSERT(d.sample_seed == 0, "sampled labels need the whole vocabulary's softmax");
  ZT_CHECK(!d.token_rank,
           "the rank of a target among the vocabulary (--eval_probes) needs the whole-vocabulary LM "
           "head; it is not available under tensor parallelism");
  const int C = d.C, V = d.V, nv = vs.nv;
  LmHeadCompute fp32{DType::f32, x, w, nullptr, false};
  const LmHeadCompute& k = compute ? *compute : fp32;
  const size_t es = dtype_size(k.t);
  double loss = 0.0;
  int64_t counted = 0;
  std::vector<float> mx(size_t(d.chunk)), red(2 * size_t(d.chunk));  // maxima; sums of exp, target logits
  std::vector<float> dcap(d.softcap > 0.f ? size_t(std::min(d.chunk, d.N)) * V : 0);
  for (int64_t r0 = 0; r0 < d.N; r0 += d.chunk) {
    const int64_t rows = std::min(d.chunk, d.N - r0);
    const void* xc = static_cast<const char*>(k.x) + size_t(r0) * C * es;
    gemm_typed(k.t, false, true, rows, V, C, 1.0f, xc, C, k.w, C, 0.0f, scratch, V);
    if (d.softcap > 0.f) softcap_logits(scratch, dcap.data(), rows, nv, V, d.softcap);
    uint16_t* low = k.t != DType::f32 ? static_cast<uint16_t*>(k.dlogits) : nullptr;
    // This rank's maxima over its real columns, and the target logits it holds.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const float* z = scratch + i * V;
      float m = -INFINITY;
      for (int v = 0; v < nv; ++v) m = std::max(m, z[v]);
      mx[i] = m;
      const int64_t t = int64_t(targets[r0 + i]) - vs.v0;
      red[rows + i] = targets[r0 + i] != kIgnoreIndex && t >= 0 && t < nv ? z[t] : 0.f;
    }
    vs.max(mx.data(), rows);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      float* z = scratch + i * V;
      float sum = 0.f;
      if (targets[r0 + i] != kIgnoreIndex) {
        const float m = mx[i];
        for (int v = 0; v < nv; ++v) {
          z[v] = fast_exp(z[v] - m);
          sum += z[v];
        }
      }
      red[i] = sum;
    }
    vs.sum(red.data(), 2 * rows);
    double chunk_loss = 0.0;
    int64_t chunk_count = 0;
#pragma omp parallel for schedule(static) reduction(+ : chunk_loss, chunk_count)
    for (int64_t i = 0; i < rows; ++i) {
      float* z = scratch + i * V;
      const int32_t tgt = targets[r0 + i];
      if (tgt == kIgnoreIndex) {
        std::fill_n(z, V, 0.f);
        if (dx && low) std::fill_n(low + i * V, V, uint16_t(0));
        if (token_loss) token_loss[r0 + i] = 0.0;
        continue;
      }
      const float sum = red[i];
      const double li = std::log(double(sum)) - (double(red[rows + i]) - double(mx[i]));
      chunk_loss += li;
      if (token_loss) token_loss[r0 + i] = li;
      ++chunk_count;
      std::fill(z + nv, z + V, 0.f);  // padding rows of the vocabulary: no gradient
      if (dx)
        row_gradient(z, nv, V, sum, int64_t(tgt) - vs.v0, grad_scale, low ? low + i * V : nullptr, k,
                     dcap.empty() ? nullptr : dcap.data() + i * V);
    }
    loss += chunk_loss;
    counted += chunk_count;
    if (dx) chunk_backward(k, low, scratch, rows, C, V, xc, dx + r0 * C, dw);
  }
  if (count) *count = counted;
  return loss;
}

}  // namespace zt::kernels
