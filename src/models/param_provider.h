// param_provider.h: where the Transformer takes each unit's parameters and gradients
// from during a pass, and how it says that a unit's gradients are complete. Units are the
// model's unit list (models/layout.h: embedding, blocks, head); `u` is an index into it.
//
// A provider hands out typed views: a 1-D view of the unit's elements (unit.size()), in
// whatever dtype the step computes in. The single-device implementation
// (FlatParamProvider) hands out slices of the flat fp32 buffers, so the serial path runs
// the same code at the cost of a few pointer assignments per unit. src/parallel
// implements it for data parallelism: a gradient bucket's all-reduce starts from
// grads_done() while backward goes on (DDP), gradients are reduce-scattered into a shard
// (ZeRO-2), parameters are all-gathered just before acquire() returns them and dropped by
// release() (ZeRO-3). Later: bf16 compute copies of fp32 masters, a tensor-parallel
// shard, parameters streamed from disk, all without the model knowing which.
// It deliberately knows nothing about communication (models never include dist).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/layout.h"

namespace zt {

class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  // A pass starts: forward only (evaluation) or forward + backward (training). The call
  // sequence that follows is fixed by the model (see ModelRuntime::forward_backward), so an
  // implementation may prefetch the next unit.
  virtual void begin_pass(bool backward) {}
  // Unit u's parameters, valid until release(u). `backward`: the backward pass needs them
  // (a block's second use).
  virtual TensorView acquire(int u, bool backward) = 0;
  virtual void release(int u) {}
  // Where backward accumulates (+=) unit u's gradients in this pass; the same memory until
  // grads_done(u) (the tied embedding gets its LM-head part first, its embedding part at
  // the very end).
  virtual TensorView grads(int u) = 0;
  // Unit u's gradients of this backward pass are complete.
  virtual void grads_done(int u) {}
};

// Where a rank's initial parameter values come from, by range [begin, begin + n) of the model's
// flat parameter vector (this rank's layout): the model's random initialisation (RandomParams in
// models/transformer.h), an HF folder (checkpoint/hf_model.h) or nothing (ZeroParams: a resume,
// whose checkpoint sets every element). An engine that keeps part of the parameters (ZeRO)
// reads only that part, so no rank holds the whole model at start.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual void read(int64_t begin, int64_t n, float* dst) const = 0;
};

class ZeroParams final : public ParamSource {
 public:
  void read(int64_t, int64_t n, float* dst) const override {
    for (int64_t i = 0; i < n; ++i) dst[i] = 0.f;
  }
};

// A sequence of acquires, as (unit, backward) in call order (ModelRuntime::forward_acquires /
// backward_acquires): what a provider may prefetch by.
using AcquireOrder = std::vector<std::pair<int, bool>>;

// The single-device provider: slices of one flat parameter and one flat gradient buffer.
class FlatParamProvider : public ParamProvider {
 public:
  FlatParamProvider() = default;
  void set_buffers(TensorView params, TensorView grads) { flat_params_ = params, flat_grads_ = grads; }
  void set_units(const std::vector<Unit>* units) { units_ = units; }
  TensorView acquire(int u, bool) override { return slice(flat_params_, u); }
  TensorView grads(int u) override { return slice(flat_grads_, u); }
  const std::vector<Unit>& units() const { return *units_; }

 protected:
  TensorView slice(const TensorView& flat, int u) const {
    if (!flat) return {};
    const Unit& k = (*units_)[u];
    return flat.sub(k.begin, {k.size()});
  }
  TensorView flat_params_, flat_grads_;
  const std::vector<Unit>* units_ = nullptr;
};

}  // namespace zt
