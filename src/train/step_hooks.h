// step_hooks.h: what runs around each optimizer step of the trainer's loop (Trainer::run in
// trainer_loop.cpp). The loop takes the step, then hands it to its hooks (trainer_hooks.cpp):
// the straggler check, flash checkpoints, spike handling, logging, evaluation and saves. Every
// phase calls the hooks in the order they were registered. Not an API.
#pragma once
#include <cstddef>
#include <cstdint>

#include "optim/spike_guard.h"

namespace zt::train_internal {

struct StepResult {
  double loss = 0, grad_norm = 0;
  bool skipped = false;  // mixed precision: inf/NaN gradients, no optimizer step
  SpikeVerdict spike;    // non-finite or a spike: no update was applied (the caller's policy decides)
};

// One optimizer step as the hooks see it.
struct StepContext {
  int64_t step = 0;  // 0-based: the log, the checkpoints and the messages call it step + 1
  StepResult result;
  double step_s = 0;       // the step's wall time, up to the vote
  int64_t resume_at = -1;  // after a rollback: the step the run goes on from
  bool best_now = false;   // this step's evaluation is the best so far (--load_best_model_at_end)
};

struct StepHook {
  virtual ~StepHook() = default;
  // At the step's start, before its first micro-batch.
  virtual void before_step(int64_t /*step*/) {}
  // The step's update was not applied (non-finite, or a spike): true when the hook rolled the run
  // back (c.resume_at set); the loop then goes on from there.
  virtual bool after_rejected(StepContext& /*c*/) { return false; }
  // The step boundary's vote (Trainer::step_vote): a hook's slots, MAX-reduced over the ranks
  // with everyone else's in one all-reduce; vote_get reads the result.
  virtual size_t vote_slots() const { return 0; }
  virtual void vote_put(const StepContext& /*c*/, double* /*slots*/) {}
  virtual void vote_get(const StepContext& /*c*/, const double* /*slots*/) {}
  // After the vote: logging, evaluation, saves.
  virtual void after_step(StepContext& /*c*/) {}
};

}  // namespace zt::train_internal
