// rope.cpp: see rope.h. Each formula follows modeling_rope_utils (transformers 4.5x):
// the tensor arithmetic there is float32 (python scalars are cast to the tensor's dtype),
// the scalar arithmetic (yarn's correction range, dynamic's base) is double.
#include "models/rope.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace zt {
namespace {

// 1 / base^(2i/dim) in float32, as _compute_default_rope_parameters (and rope_table).
std::vector<float> default_inv_freq(float base, int dim) {
  std::vector<float> f(size_t(dim / 2));
  for (int i = 0; i < dim / 2; ++i)
    f[size_t(i)] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  return f;
}

void llama3(std::vector<float>& inv, const RopeScaling& r) {
  const float factor = float(r.factor);
  const float old_len = float(r.original_max_position);
  const float low_wavelen = float(double(r.original_max_position) / r.low_freq_factor);
  const float high_wavelen = float(double(r.original_max_position) / r.high_freq_factor);
  const float span = float(r.high_freq_factor - r.low_freq_factor);
  for (float& f : inv) {
    const float wavelen = float(2 * M_PI) / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;  // low frequencies: divided by factor
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const float smooth = (old_len / wavelen - float(r.low_freq_factor)) / span;
      f = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      f = scaled;
    }
  }
}

double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

float yarn(std::vector<float>& inv, const ModelConfig& c, float base, int dim) {
  const RopeScaling& r = c.rope;
  double factor = r.factor;
  double orig = c.max_position;
  if (r.original_max_position > 0) {  // DeepSeek-V3 / Qwen style: the factor is the context ratio
    orig = r.original_max_position;
    factor = double(c.max_position) / orig;
  }
  double att = r.attention_factor;
  if (att <= 0)
    att = r.mscale > 0 && r.mscale_all_dim > 0 ? yarn_mscale(factor, r.mscale) / yarn_mscale(factor, r.mscale_all_dim)
                                               : yarn_mscale(factor, 1.0);
  const double theta = c.raw.value("rope_theta", double(c.rope_theta));
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(theta));
  };
  double lo = correction_dim(r.beta_fast), hi = correction_dim(r.beta_slow);
  if (r.truncate) lo = std::floor(lo), hi = std::ceil(hi);
  lo = std::max(lo, 0.0);
  hi = std::min(hi, double(dim - 1));
  if (lo == hi) hi += 0.001;  // transformers: prevent a singular ramp
  const float ffactor = float(factor);
  for (int i = 0; i < dim / 2; ++i) {
    const float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (ffactor * pos_freq);
    const float ramp = std::clamp((float(i) - float(lo)) / float(hi - lo), 0.0f, 1.0f);
    const float extra_factor = 1.0f - ramp;
    inv[size_t(i)] = interpolation * (1.0f - extra_factor) + extrapolation * extra_factor;
  }
  return float(att);
}

// longrope (modeling_rope_utils' _compute_longrope_parameters): 1 / (ext * base^(2i/dim)) in
// float32 for the short and the long factors; attention factor sqrt(1 + ln s / ln orig) with s =
// max_position / original_max_position_embeddings when config.json has the latter (Phi-3), else
// rope_scaling's factor over max_position_embeddings.
void longrope(RopeFreqs& out, const ModelConfig& c, float base, int dim) {
  const RopeScaling& r = c.rope;
  const double orig = r.original_max_position > 0 ? r.original_max_position : c.max_position;
  const double factor = r.original_max_position > 0 ? double(c.max_position) / orig : r.factor;
  double att = r.attention_factor;
  if (att <= 0) att = factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(orig));
  out.scale = float(att);
  out.long_after = int(orig);
  auto freqs = [&](const std::vector<double>& ext) {
    std::vector<float> f(size_t(dim / 2));
    for (int i = 0; i < dim / 2; ++i)
      f[size_t(i)] =
          1.0f / (float(ext[size_t(i)]) * std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim)));
    return f;
  };
  out.inv_freq = freqs(r.short_factor);
  out.long_inv_freq = freqs(r.long_factor);
}

}  // namespace

RopeFreqs rope_freqs(const ModelConfig& c) {
  RopeFreqs out;
  const int dim = c.head_size;
  const std::string& type = c.rope.type;
  if (type == "dynamic") {
    // transformers rescales the base only for sequences longer than max_position_embeddings,
    // which ztrain never runs; at or below it the base is theta * 1^(dim/(dim-2)).
    const double theta = c.raw.value("rope_theta", double(c.rope_theta));
    const double L = c.max_position, f = c.rope.factor;
    const double base = theta * std::pow((f * L / L) - (f - 1), double(dim) / (dim - 2));
    out.inv_freq = default_inv_freq(float(base), dim);
    return out;
  }
  out.inv_freq = default_inv_freq(c.rope_theta, dim);
  if (type == "linear")
    for (float& f : out.inv_freq) f /= float(c.rope.factor);
  else if (type == "llama3")
    llama3(out.inv_freq, c.rope);
  else if (type == "yarn")
    out.scale = yarn(out.inv_freq, c, c.rope_theta, dim);
  else if (type == "longrope")
    longrope(out, c, c.rope_theta, dim);
  return out;
}

void rope_fill(const RopeFreqs& f, float* cos, float* sin, int rows, int seq_len) {
  const std::vector<float>& inv = f.for_length(seq_len > 0 ? seq_len : rows);
  kernels::rope_table_freqs(cos, sin, rows, int(inv.size()), inv.data(), f.scale);
}

}  // namespace zt
