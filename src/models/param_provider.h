// param_provider.h: where the Transformer takes each unit's parameters and gradients
// from during a pass, and how it says that a unit's gradients are complete. A unit is a
// contiguous range of the flat parameter layout: unit 0 the embeddings (wte, wpe), units
// 1..L the transformer blocks, unit L+1 the head (final norm, untied LM head).
//
// The single-device implementation (FlatParamProvider) hands out slices of the flat
// buffers, so the serial path runs the same code at the cost of a few pointer
// assignments per unit. src/parallel implements it for data parallelism: a gradient
// bucket's all-reduce starts from grads_done() while backward goes on (DDP), gradients
// are reduce-scattered into a shard (ZeRO-2), parameters are all-gathered just before
// acquire() returns them and dropped by release() (ZeRO-3).
// It deliberately knows nothing about communication (models never include dist).
#pragma once
#include <cstdint>
#include <vector>

namespace zt {

struct ParamUnit {
  int64_t begin = 0, end = 0;  // floats of the flat layout, [begin, end)
  int64_t size() const { return end - begin; }
};

class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  // A pass starts: forward only (evaluation) or forward + backward (training). The call
  // sequence that follows is fixed by the model (see Transformer::run), so an
  // implementation may prefetch the next unit.
  virtual void begin_pass(bool backward) {}
  // Unit u's parameters (unit.size() floats), valid until release(u). `backward`: the
  // backward pass needs them (a block's second use).
  virtual float* acquire(int u, bool backward) = 0;
  virtual void release(int u) {}
  // Where backward accumulates (+=) unit u's gradients in this pass; the same pointer
  // until grads_done(u) (the tied embedding gets its LM-head part first, its
  // embedding part at the very end).
  virtual float* grads(int u) = 0;
  // Unit u's gradients of this backward pass are complete.
  virtual void grads_done(int u) {}
};

// The single-device provider: slices of one flat parameter and one flat gradient buffer.
class FlatParamProvider : public ParamProvider {
 public:
  FlatParamProvider() = default;
  FlatParamProvider(float* params, float* grads, std::vector<ParamUnit> units)
      : P_(params), G_(grads), units_(std::move(units)) {}
  void set_buffers(float* params, float* grads) { P_ = params, G_ = grads; }
  void set_units(std::vector<ParamUnit> units) { units_ = std::move(units); }
  float* acquire(int u, bool) override { return P_ + units_[u].begin; }
  float* grads(int u) override { return G_ ? G_ + units_[u].begin : nullptr; }
  const std::vector<ParamUnit>& units() const { return units_; }

 protected:
  float* P_ = nullptr;
  float* G_ = nullptr;
  std::vector<ParamUnit> units_;
};

}  // namespace zt
