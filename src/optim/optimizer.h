// optimizer.h: the optimizer interface. An optimizer owns named per-parameter state slots
// (AdamW: "exp_avg", "exp_avg_sq"), each a flat fp32 buffer as long as the parameter range it
// optimizes: the whole model (one process, DDP) or a rank's shard (ZeRO). A step runs over
// pieces (params, grads, where their state sits, the decay flag), so the same code updates a
// flat buffer or a shard cut per tensor. The engines (parallel/data_parallel.h) construct it
// through make_optimizer and shard whatever slots it declares; checkpoints save it through
// the state interface (core/state.h) as pieces of every slot per tensor.
// It deliberately is not gradient clipping (clip.h) or the LR schedule (schedule.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/state.h"

namespace zt::optim {

// Hyper-parameters, as HF TrainingArguments names them (adam_beta1, ...). Doubles, like
// PyTorch's Python-float hyper-parameters; an optimizer rounds them to fp32 only where
// PyTorch does. An optimizer reads the fields it has.
struct OptimizerConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// One contiguous stretch of an update: numel values of params / grads whose state sits at
// state_offset of every slot, with one weight-decay setting (decay applies per tensor).
struct StepPiece {
  float* params;
  const float* grads;
  int64_t state_offset, numel;
  bool decay;
};

// A contiguous range of a flat buffer with one decay setting (state_offset = offset).
struct ParamRange {
  int64_t offset, numel;
  bool decay;
};
std::vector<StepPiece> flat_pieces(float* params, const float* grads, const std::vector<ParamRange>& ranges);

// Where a stretch of the state belongs in the model, for checkpoints: count elements of the
// global tensor `tensor` (shape `shape`) from its element `begin`, at state_offset of every slot.
struct StateSpan {
  std::string tensor;
  std::vector<int64_t> shape;
  int64_t begin, count, state_offset;
};

class Optimizer : public Stateful {
 public:
  Optimizer(std::string name, const OptimizerConfig& cfg, int64_t numel, std::vector<std::string> slot_names);
  ~Optimizer() override = default;

  // One step with learning rate lr over the pieces; the step count advances once.
  virtual void step(std::span<const StepPiece> pieces, double lr) = 0;
  // More pieces of the step just taken, at the same step count: a step split over several
  // calls as its gradients arrive (ZeRO-Offload). Each piece must be in exactly one call.
  void step_continued(std::span<const StepPiece> pieces, double lr) {
    --t_;  // step() advances the count once, as its contract says
    step(pieces, lr);
  }

  const std::string& name() const { return name_; }  // the --optim name it was made with
  const OptimizerConfig& config() const { return cfg_; }
  int64_t numel() const { return numel_; }  // elements of the parameter range its state covers
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  float* slot(size_t i) const { return slots_[i].as<float>(); }
  float* slot(const std::string& name) const;  // an unknown name is our bug
  // Optimizer-state bytes per optimized parameter (AdamW: 8), for memory plans.
  int64_t state_bytes_per_param() const { return int64_t(slots_.size() * sizeof(float)); }
  int64_t steps() const { return t_; }

  // Checkpoints: which tensor pieces the state covers (set by the engine that owns the
  // layout). save_state writes every slot of every span plus {name, step} under
  // "ztrain.optimizer"; load_state reads them back for this layout from any writer's.
  void set_state_spans(std::vector<StateSpan> spans) { spans_ = std::move(spans); }
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;

 protected:
  int64_t t_ = 0;  // steps taken

 private:
  std::string name_;
  OptimizerConfig cfg_;
  int64_t numel_;
  std::vector<std::string> slot_names_;
  std::vector<Buffer> slots_;
  std::vector<StateSpan> spans_;
};

// The optimizer that HF's --optim `name` selects, with state for numel parameters. Known:
// "adamw_torch" (HF's default) and its alias "adamw"; another name is an Error listing them.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerConfig& cfg, int64_t numel);
// state_bytes_per_param() of that optimizer, without allocating its state.
int64_t optimizer_state_bytes_per_param(const std::string& name);

}  // namespace zt::optim
