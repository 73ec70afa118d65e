// state_pack.h: helpers the optimizers share. PackedState keeps elementwise state for some of
// an optimizer's pieces only (Muon: momentum for hidden matrices, AdamW moments for the rest;
// 8-bit AdamW: fp32 moments for small tensors), packed one piece after another, so state bytes
// are what the method needs, not numel per slot. StateValue reads and writes an fp32 or bf16
// state element; bf16 stores round stochastically (an EMA with beta2 = 0.999 changes v by a
// thousandth per step, below bf16's half-ulp of 2^-9: round-to-nearest would freeze it).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace zt::optim {

class PackedState {
 public:
  PackedState() = default;
  // State for the pieces `select` picks, `slots` values of `dtype` per element, zeroed.
  PackedState(std::span<const StepPiece> pieces, const std::function<bool(const StepPiece&)>& select, int slots,
              DType dtype)
      : dtype_(dtype) {
    for (const StepPiece& p : pieces)
      if (select(p)) {
        runs_.push_back({p.state_offset, p.numel, size_});
        size_ += p.numel;
      }
    std::sort(runs_.begin(), runs_.end(), [](const Run& a, const Run& b) { return a.state_offset < b.state_offset; });
    for (int s = 0; s < slots; ++s) {
      slots_.emplace_back(size_t(size_) * dtype_size(dtype), MemCategory::optimizer_state);
      if (slots_.back().data()) std::memset(slots_.back().data(), 0, slots_.back().bytes());
    }
  }
  // The packed index of state coordinate s, or -1 when its piece was not selected.
  int64_t at(int64_t s) const {
    auto it =
        std::upper_bound(runs_.begin(), runs_.end(), s, [](int64_t v, const Run& r) { return v < r.state_offset; });
    if (it == runs_.begin()) return -1;
    --it;
    return s < it->state_offset + it->numel ? it->packed + (s - it->state_offset) : -1;
  }
  int64_t size() const { return size_; }
  int64_t bytes() const {
    int64_t b = 0;
    for (const Buffer& s : slots_) b += int64_t(s.bytes());
    return b;
  }
  DType dtype() const { return dtype_; }
  void* data(int slot) const { return slots_[size_t(slot)].data(); }
  float* f32(int slot) const { return slots_[size_t(slot)].as<float>(); }
  size_t slots() const { return slots_.size(); }

 private:
  struct Run {
    int64_t state_offset, numel, packed;
  };
  DType dtype_ = DType::f32;
  std::vector<Run> runs_;
  int64_t size_ = 0;
  std::vector<Buffer> slots_;
};

// A counter-based hash (splitmix64's finaliser) of (step, element): the stochastic rounding's
// noise is a function of where and when, so a resumed run and any ZeRO layout round alike.
inline uint32_t rounding_noise(uint64_t step, uint64_t element) {
  uint64_t z = step * 0x9E3779B97F4A7C15ull + element + 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return uint32_t(z ^ (z >> 31));
}

// fp32 -> bf16 rounding up with probability equal to the dropped fraction (unbiased).
inline uint16_t f32_to_bf16_stochastic(float f, uint32_t noise) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return f32_to_bf16(f);  // inf / NaN as they are
  u += noise & 0xffffu;
  return uint16_t(u >> 16);
}

// Elementwise state views: fp32, or bf16 stored with stochastic rounding keyed by the state
// coordinate (origin + i). The update loops are templates over them, so the fp32 loop stays a
// plain vector loop.
struct F32State {
  float* p;
  float get(int64_t i) const { return p[i]; }
  void set(int64_t i, float v, uint64_t) const { p[i] = v; }
};
struct Bf16State {
  uint16_t* p;
  int64_t origin;
  float get(int64_t i) const { return bf16_to_f32(p[i]); }
  void set(int64_t i, float v, uint64_t step) const {
    p[i] = f32_to_bf16_stochastic(v, rounding_noise(step, uint64_t(origin + i)));
  }
};

// Calls f(a_view, b_view) with views at state coordinate `offset` of slots a and b (b may be
// null for a one-slot optimizer: its view is then unused), fp32 or bf16 alike.
template <class F>
void with_state(DType dtype, void* a, void* b, int64_t offset, F&& f) {
  if (dtype == DType::bf16) {
    auto at = [&](void* s, int64_t salt) {
      return Bf16State{s ? static_cast<uint16_t*>(s) + offset : nullptr, offset + salt};
    };
    f(at(a, 0), at(b, int64_t(1) << 40));  // the second slot's noise is independent of the first's
  } else {
    auto at = [&](void* s) { return F32State{s ? static_cast<float*>(s) + offset : nullptr}; };
    f(at(a), at(b));
  }
}

}  // namespace zt::optim
