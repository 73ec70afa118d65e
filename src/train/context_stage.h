// context_stage.h: a long-context stage (docs/training.md#long-context-stages). Continued
// pretraining at a longer context, as every Llama-3 / Qwen report does after the main stage, is a
// resume: `--resume_from_checkpoint` with a new `--model_max_length` (and batch) and a new
// `--rope_scaling`. Weights, optimizer state, LR schedule and step carry over; the data cursor is
// re-cut at the new length: in file order (--no_shuffle) the next stage's windows start at the
// token where the last stage stopped, so no token is repeated or skipped. A shuffled order is a
// permutation of windows of the old length, which no cut at another length continues; such a
// run starts a fresh permutation at the new length only with --resume_allow_changes data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/loader.h"
#include "models/config.h"

namespace zt::train_internal {

// The model config with --rope_scaling (a JSON object with transformers' keys, or null) in place
// of config.json's, and max_position_embeddings raised to model_max_length when that is longer:
// what HF users write into config.json for the stage, so the exported folder carries it too.
// GPT-2's learned position table cannot be stretched: refused.
ModelConfig with_rope_scaling(const ModelConfig& cfg, const std::string& rope_scaling_json, int model_max_length);

// What a resume at another geometry needs to start the next stage.
struct StageSwitch {
  int64_t step = 0;          // the resumed step: the new stage's first
  int64_t offset_steps = 0;  // data steps skipped by loss-spike rollbacks (LoaderConfig::step_offset)
  int T = 0;                 // the new sequence length
  int64_t per_step = 0;      // the new sequences per optimizer step
  bool shuffle = true;
  bool allow_data_change = false;  // --resume_allow_changes data
  bool single_token_file = true;   // not SFT records, not named channels
  int64_t file_tokens = 0;         // the train file's tokens
};

// `stages` (the checkpoint's, the last one current) followed by the stage this resume starts: in
// file order it starts at the token where the last stage's next window would have; shuffled, at a
// fresh permutation of the new windows. Refusals name the reason and what to do.
std::vector<DataStage> next_data_stage(std::vector<DataStage> stages, const StageSwitch& s);

// The log_history entry that records the switch in trainer_state.json.
nlohmann::json stage_history_entry(const DataStage& from, const DataStage& to, const ModelConfig& cfg,
                                   const std::string& context_change);

}  // namespace zt::train_internal
