// adamw_8bit.cpp: see adamw_8bit.h.
#include "optim/adamw_8bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/quant8.h"

namespace zt::optim {

AdamW8bit::AdamW8bit(const OptimizerConfig& cfg, int64_t numel) : Optimizer("adamw_8bit", cfg, numel, {}) {
  refuse_unknown_args({});
  ZT_CHECK(cfg.state_dtype == DType::f32, "--optim_state_dtype bf16 does not apply to adamw_8bit (its state is 8-bit)");
}

void AdamW8bit::on_layout() {
  pieces_.clear();
  int64_t small = 0, big = 0, blocks = 0;
  for (const StepPiece& p : layout().pieces) {
    ZT_ASSERT(p.tensor >= 0, "adamw_8bit needs per-tensor pieces");
    const bool is_small = layout().tensors[size_t(p.tensor)].numel() < kMinSize;
    pieces_.push_back({p.state_offset, p.numel, is_small, is_small ? small : big, blocks});
    if (is_small) {
      small += p.numel;
    } else {
      big += p.numel;
      blocks += (p.numel + kBlock - 1) / kBlock;
    }
  }
  std::sort(pieces_.begin(), pieces_.end(),
            [](const Piece& a, const Piece& b) { return a.state_offset < b.state_offset; });
  for (int s = 0; s < 2; ++s) {
    codes_[s] = Buffer(size_t(big), MemCategory::optimizer_state);
    absmax_[s] = Buffer(size_t(blocks) * sizeof(float), MemCategory::optimizer_state);
    small_[s] = Buffer(size_t(small) * sizeof(float), MemCategory::optimizer_state);
    for (Buffer* b : {&codes_[s], &absmax_[s], &small_[s]})
      if (b->data()) std::memset(b->data(), 0, b->bytes());
  }
}

int64_t AdamW8bit::own_state_bytes() const {
  int64_t b = 0;
  for (int s = 0; s < 2; ++s) b += int64_t(codes_[s].bytes() + absmax_[s].bytes() + small_[s].bytes());
  return b;
}

const AdamW8bit::Piece& AdamW8bit::piece_of(int64_t state_offset) const {
  auto it = std::upper_bound(pieces_.begin(), pieces_.end(), state_offset,
                             [](int64_t v, const Piece& p) { return v < p.state_offset; });
  ZT_ASSERT(it != pieces_.begin() && state_offset < (it - 1)->state_offset + (it - 1)->numel,
            "adamw_8bit: state offset ", state_offset, " is in no piece of the layout");
  return *(it - 1);
}

namespace {
struct Scalars {
  float b1, b2, c1, c2, step_size, bc2_sqrt, eps;
};
}  // namespace

void AdamW8bit::step(std::span<const StepPiece> pieces, double lr) {
  ZT_ASSERT(!pieces_.empty() || pieces.empty(), "adamw_8bit: step before set_layout");
  ++t_;
  for (const StepPiece& r : pieces) {
    const Piece& q = piece_of(r.state_offset);
    ZT_ASSERT(q.state_offset == r.state_offset && q.numel == r.numel,
              "adamw_8bit: a step piece differs from the layout's");
    if (!q.small) {
      step_quantized(q, r, lr);
      continue;
    }
    adamw_update(config(), t_, lr, r, small_[0].as<float>() + q.at, small_[1].as<float>() + q.at);
  }
}

void AdamW8bit::step_quantized(const Piece& q, const StepPiece& r, double lr) {
  const OptimizerConfig& cfg = config();
  const double bc1 = 1.0 - std::pow(cfg.beta1, double(t_)), bc2 = 1.0 - std::pow(cfg.beta2, double(t_));
  const Scalars k{float(cfg.beta1), float(cfg.beta2),      float(1.0 - cfg.beta1), float(1.0 - cfg.beta2),
                  float(lr / bc1),  float(std::sqrt(bc2)), float(cfg.eps)};
  const float decay = r.decay ? float(1.0 - lr * cfg.weight_decay) : 1.0f;
  const int64_t nb = (r.numel + kBlock - 1) / kBlock;
  uint8_t* cm = codes_[0].as<uint8_t>() + q.at;
  uint8_t* cv = codes_[1].as<uint8_t>() + q.at;
  float* am = absmax_[0].as<float>() + q.block0;
  float* av = absmax_[1].as<float>() + q.block0;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = b * kBlock, n = std::min(kBlock, r.numel - i0);
    float m[kBlock], v[kBlock];
    dequantize_block(kDynamicSigned, cm + i0, n, am[b], m);
    dequantize_block(kDynamicUnsigned, cv + i0, n, av[b], v);
    float* p = r.params + i0;
    const float* g = r.grads + i0;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      m[i] = m[i] * k.b1 + g[i] * k.c1;
      v[i] = v[i] * k.b2 + g[i] * g[i] * k.c2;
      p[i] = p[i] * decay - k.step_size * m[i] / (std::sqrt(v[i]) / k.bc2_sqrt + k.eps);
    }
    am[b] = quantize_block(kDynamicSigned, m, n, cm + i0);
    av[b] = quantize_block(kDynamicUnsigned, v, n, cv + i0);
  }
}

void AdamW8bit::for_each_state(int64_t offset, int64_t n, int, const std::function<void(void*, size_t)>& f) {
  const Piece& q = piece_of(offset);
  const int64_t d = offset - q.state_offset;
  for (int s = 0; s < 2; ++s) {
    if (q.small) {
      f(small_[s].as<float>() + q.at + d, size_t(n) * sizeof(float));
      continue;
    }
    ZT_ASSERT(d % kBlock == 0, "adamw_8bit: a state range starts inside a block");
    f(codes_[s].as<uint8_t>() + q.at + d, size_t(n));
    f(absmax_[s].as<float>() + q.block0 + d / kBlock, size_t((n + kBlock - 1) / kBlock) * sizeof(float));
  }
}

namespace {
const char* const kSlot[2] = {"exp_avg", "exp_avg_sq"};
const char* const kAbsmax[2] = {"exp_avg.absmax", "exp_avg_sq.absmax"};
const float* map_of(int s) { return s == 0 ? kDynamicSigned : kDynamicUnsigned; }
}  // namespace

void AdamW8bit::save_own(StateWriter& w) const {
  for (const StateSpan& sp : state_spans()) {
    const Piece& q = piece_of(sp.state_offset);
    const int64_t d = sp.state_offset - q.state_offset;
    for (int s = 0; s < 2; ++s) {
      if (q.small) {
        w.put_tensor({sp.tensor, sp.shape, kSlot[s], {sp.begin, sp.count}, small_[s].as<float>() + q.at + d});
        continue;
      }
      ZT_ASSERT(d % kBlock == 0, "adamw_8bit: a checkpoint span starts inside a block");
      float* values = save_scratch(sp.count);
      float* scales = save_scratch(sp.count);
      for (int64_t i0 = 0; i0 < sp.count; i0 += kBlock) {
        const int64_t n = std::min(kBlock, sp.count - i0);
        const float a = absmax_[s].as<float>()[q.block0 + (d + i0) / kBlock];
        dequantize_block(map_of(s), codes_[s].as<uint8_t>() + q.at + d + i0, n, a, values + i0);
        std::fill_n(scales + i0, n, a);
      }
      w.put_tensor({sp.tensor, sp.shape, kSlot[s], {sp.begin, sp.count}, values});
      w.put_tensor({sp.tensor, sp.shape, kAbsmax[s], {sp.begin, sp.count}, scales});
    }
  }
}

void AdamW8bit::load_own(StateReader& r) {
  std::vector<float> values, scales;
  for (const StateSpan& sp : state_spans()) {
    const Piece& q = piece_of(sp.state_offset);
    const int64_t d = sp.state_offset - q.state_offset;
    for (int s = 0; s < 2; ++s) {
      if (q.small) {
        r.get_tensor({sp.tensor, sp.shape, kSlot[s], {sp.begin, sp.count}, small_[s].as<float>() + q.at + d});
        continue;
      }
      values.resize(size_t(sp.count));
      scales.resize(size_t(sp.count));
      r.get_tensor({sp.tensor, sp.shape, kSlot[s], {sp.begin, sp.count}, values.data()});
      r.get_tensor({sp.tensor, sp.shape, kAbsmax[s], {sp.begin, sp.count}, scales.data()});
      for (int64_t i0 = 0; i0 < sp.count; i0 += kBlock) {
        const int64_t n = std::min(kBlock, sp.count - i0);
        // The saved block's absmax (the largest where a resharded block joins two saved ones):
        // value / absmax then lands within an ulp of its code, so the codes come back unchanged.
        float a = 0.f;
        for (int64_t i = 0; i < n; ++i) a = std::max(a, scales[size_t(i0 + i)]);
        ZT_CHECK(a >= 0.f && std::isfinite(a), r.source(), ": ", sp.tensor, " ", kAbsmax[s],
                 " holds a scale that is negative or not finite; the checkpoint is damaged");
        uint8_t* codes = codes_[s].as<uint8_t>() + q.at + d + i0;
        for (int64_t i = 0; i < n; ++i)  // a = 0: a block never stepped, all zero
          codes[i] = a > 0.f ? quantize_nearest(map_of(s), values[size_t(i0 + i)] / a) : 0;
        absmax_[s].as<float>()[q.block0 + (d + i0) / kBlock] = a;
      }
    }
  }
}

}  // namespace zt::optim
