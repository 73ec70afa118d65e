// optimizer.h: the optimizer interface. An optimizer updates parameters from gradients over
// pieces (params, grads, where their state sits, the decay flag, which tensor they belong to),
// so the same code updates a flat buffer or a shard cut per tensor. Its state lives in "state
// coordinates" [0, numel): the engine's packed offsets of what this rank owns (the whole model
// for one process or DDP, the rank's shard for ZeRO). Elementwise optimizers (AdamW, Lion, SGD,
// Sophia) keep named slots of numel values (fp32 or bf16); others (Adafactor's factored moments,
// 8-bit AdamW's codes and scales, Muon's momentum for hidden matrices only) keep their own, laid
// out from the pieces the engine declares once (set_layout). The engines (parallel/
// data_parallel.h) construct it through make_optimizer; checkpoints save it through the state
// interface (core/state.h) as pieces per tensor. docs/optimizers.md has each one's arithmetic.
// It deliberately is not gradient clipping (clip.h) or the LR schedule (schedule.h).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/state.h"

namespace zt::optim {

// Hyper-parameters, as HF TrainingArguments names them (adam_beta1, ...). Doubles, like
// PyTorch's Python-float hyper-parameters; an optimizer rounds them to fp32 only where
// PyTorch does. An optimizer reads the fields it has; `args` holds HF's --optim_args
// ("key=value,..."), each optimizer taking the keys it knows and refusing the others.
struct OptimizerConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  DType state_dtype = DType::f32;  // --optim_state_dtype: f32, or bf16 (stochastically rounded)
  std::map<std::string, std::string> args;
  // Tokens in one optimizer step over all data-parallel ranks (Sophia's `bs`); set by the trainer.
  int64_t tokens_per_step = 0;
  // Offload to disk (parallel/offload_engine.cpp): the elementwise slots are not allocated; the
  // engine streams windows of them through host memory (bind_window) and keeps the rest in files.
  bool external_state = false;
};

// One contiguous stretch of an update: numel values of params / grads whose state sits at
// state_offset, with one weight-decay setting. tensor (>= 0) indexes the layout's tensors and
// tensor_begin is the stretch's first element in that tensor; -1: a run that may span tensors
// (elementwise optimizers only).
struct StepPiece {
  float* params;
  const float* grads;
  int64_t state_offset, numel;
  bool decay;
  int tensor = -1;
  int64_t tensor_begin = 0;
};

// A contiguous range of a flat buffer with one decay setting (state_offset = offset).
struct ParamRange {
  int64_t offset, numel;
  bool decay;
};
std::vector<StepPiece> flat_pieces(float* params, const float* grads, const std::vector<ParamRange>& ranges);

// A tensor an optimizer's pieces belong to, as this rank's model holds it.
struct TensorInfo {
  std::string name;
  int64_t rows = 1, cols = 1;  // 2-D: its shape; otherwise 1 x numel
  bool matrix = false;         // rank >= 2 (Adafactor factors it)
  bool hidden = false;         // a 2-D weight inside a block (Muon's), not an embedding or the head
  int64_t numel() const { return rows * cols; }
};

// Sums n values in place over the ranks that hold other pieces of the same tensors (ZeRO's
// shard group); every such rank calls it with the same n. Null: this rank holds whole tensors.
using GroupSum = std::function<void(float* data, int64_t n)>;

// What an engine tells the optimizer once, before the first step or load: the tensors, the pieces
// it will step (the same every step; a step may pass a subset, as ZeRO-Offload does), and the sum.
struct OptimizerLayout {
  std::vector<TensorInfo> tensors;
  std::vector<StepPiece> pieces;
  GroupSum group_sum;
};

// Where external state lives (an offload engine's files), for checkpoints: read_all fills whole
// slots (numel values each, of the state dtype), write_all stores them back.
class StateStore {
 public:
  virtual ~StateStore() = default;
  // Slot `slot`'s values at state coordinates [begin, begin + n), in the slot's dtype: what a
  // checkpoint streams, one piece at a time, instead of the whole state.
  virtual void read_range(size_t slot, int64_t begin, int64_t n, void* dst) = 0;
  virtual void write_range(size_t slot, int64_t begin, int64_t n, const void* src) = 0;
};

// Where a stretch of the state belongs in the model, for checkpoints: count elements of the
// global tensor `tensor` (shape `shape`) from its element `begin`, at state_offset.
struct StateSpan {
  std::string tensor;
  std::vector<int64_t> shape;
  int64_t begin, count, state_offset;
};

class Optimizer : public Stateful {
 public:
  // Elementwise slots: numel values each, of cfg.state_dtype.
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
  // Whether its whole state is its elementwise slots, so an engine may keep them elsewhere and
  // step windows of them (offload to disk): AdamW, Lion, SGD, Sophia.
  virtual bool offloadable() const { return false; }
  // External state: the slots of state coordinates [begin, begin + n) are at slots[i] (n values
  // each) until unbind_window; steps and curvature updates must stay inside that window.
  void bind_window(int64_t begin, int64_t n, const std::vector<void*>& slots);
  void unbind_window() { window_.clear(); }
  // External state: where checkpoints read and write it (the engine that holds the files).
  void set_state_store(StateStore* s) { store_ = s; }
  // Whether it needs set_layout's tensors (per-tensor pieces) before stepping: the factored,
  // quantized and matrix optimizers. An engine that cannot describe them refuses it.
  virtual bool needs_layout() const { return false; }
  void set_layout(OptimizerLayout layout);
  const OptimizerLayout& layout() const { return layout_; }

  // Sophia: every interval() steps the trainer runs a pass on labels sampled from the model and
  // hands the reduced gradient to update_curvature (0: never).
  virtual int64_t curvature_interval() const { return 0; }
  virtual void update_curvature(std::span<const StepPiece>) {}

  const std::string& name() const { return name_; }  // the --optim name it was made with
  const OptimizerConfig& config() const { return cfg_; }
  int64_t numel() const { return numel_; }  // elements of the parameter range its state covers
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  DType slot_dtype() const { return cfg_.state_dtype; }
  float* slot(size_t i) const;                 // an fp32 elementwise slot (bf16 ones: slot_data)
  float* slot(const std::string& name) const;  // an unknown name is our bug
  void* slot_data(size_t i) const;
  // Bytes of optimizer state per optimized parameter, as allocated (AdamW: 8; 8-bit AdamW about 2).
  double state_bytes_per_param() const;
  int64_t steps() const { return t_; }
  // Calls f(bytes, count) for every piece of state that covers state coordinates [offset, offset+n)
  // of tensor `tensor` (a pipeline's tied copy is synchronised this way).
  virtual void for_each_state(int64_t offset, int64_t n, int tensor, const std::function<void(void*, size_t)>& f);

  // Checkpoints: which tensor pieces the state covers (set by the engine that owns the
  // layout). save_state writes every slot of every span plus {name, step} under
  // "ztrain.optimizer"; load_state reads them back for this layout from any writer's.
  void set_state_spans(std::vector<StateSpan> spans) { spans_ = std::move(spans); }
  const std::vector<StateSpan>& state_spans() const { return spans_; }
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;

 protected:
  virtual void on_layout() {}
  virtual int64_t own_state_bytes() const { return 0; }  // beyond the elementwise slots
  virtual void save_own(StateWriter&) const {}
  virtual void load_own(StateReader&) {}
  // An fp32 buffer of n values that stays valid until the next save (StateWriter keeps pointers).
  float* save_scratch(int64_t n) const;
  // HF's optim_args: the value of `key` or `fallback`; refuse() rejects a key outside `known`.
  double arg(const std::string& key, double fallback) const;
  bool arg_flag(const std::string& key, bool fallback) const;
  std::string arg_text(const std::string& key, const std::string& fallback) const;
  void refuse_unknown_args(const std::vector<std::string>& known) const;

  int64_t t_ = 0;  // steps taken

 private:
  std::string name_;
  OptimizerConfig cfg_;
  int64_t numel_;
  std::vector<std::string> slot_names_;
  std::vector<Buffer> slots_;
  std::vector<StateSpan> spans_;
  OptimizerLayout layout_;
  mutable std::vector<std::vector<float>> scratch_;
  // External state: the bound window (state coordinates [window_begin_, + window_n_)) and store.
  std::vector<void*> window_;
  int64_t window_begin_ = 0, window_n_ = 0;
  StateStore* store_ = nullptr;
};

// The optimizer that HF's --optim `name` selects, with state for numel parameters. Known:
// optimizer_names(); another name is an Error suggesting the nearest.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerConfig& cfg, int64_t numel);
std::vector<std::string> optimizer_names();
// Bytes of state per parameter of that optimizer without allocating it: exact for elementwise
// ones, an upper bound for the layout-dependent ones (Muon: AdamW's; Adafactor: its 1-D tensors').
double optimizer_state_bytes_per_param(const std::string& name, const OptimizerConfig& cfg = {});
// HF's --optim_args "k=v,k2=v2" (spaces around items ignored); an item without '=' is an Error.
std::map<std::string, std::string> parse_optim_args(const std::string& text);

}  // namespace zt::optim
