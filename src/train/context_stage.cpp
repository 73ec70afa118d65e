// context_stage.cpp: see context_stage.h.
#include "train/context_stage.h"

#include <algorithm>

#include "core/error.h"
#include "data/token_data.h"

namespace zt::train_internal {

ModelConfig with_rope_scaling(const ModelConfig& cfg, const std::string& rope_scaling_json, int model_max_length) {
  if (rope_scaling_json.empty()) return cfg;
  nlohmann::json rope;
  try {
    rope = nlohmann::json::parse(rope_scaling_json);
  } catch (const nlohmann::json::exception&) {
    throw Error(str_cat("--rope_scaling ", quote(rope_scaling_json),
                        " is not JSON; give an object with transformers' keys, e.g. "
                        "'{\"rope_type\": \"linear\", \"factor\": 2.0}', or null"));
  }
  ZT_CHECK(rope.is_object() || rope.is_null(), "--rope_scaling must be a JSON object or null, got ",
           rope_scaling_json);
  ZT_CHECK(cfg.arch != Arch::gpt2, "--rope_scaling: ", cfg.model_type,
           " has learned position embeddings (n_positions rows), not RoPE: its context cannot be stretched; "
           "rope_scaling applies to the Llama-family models");
  nlohmann::json raw = cfg.raw;
  raw["rope_scaling"] = rope;
  if (model_max_length > cfg.max_position) raw["max_position_embeddings"] = model_max_length;
  return config_from_json(raw, "--rope_scaling");
}

std::vector<DataStage> next_data_stage(std::vector<DataStage> stages, const StageSwitch& s) {
  ZT_ASSERT(!stages.empty() && s.per_step > 0 && s.T > 0);
  // A stage that starts at the resumed step consumed nothing (a checkpoint saved as it began): replaced.
  if (stages.size() > 1 && stages.back().step == s.step) stages.pop_back();
  const DataStage& last = stages.back();
  const std::string change = str_cat("the checkpoint trained on ", last.per_step, " sequences of ", last.T,
                                     " tokens per step, this run on ", s.per_step, " of ", s.T);
  ZT_CHECK(s.single_token_file, change,
           "; a new data stage re-cuts one token file's windows, and SFT records or named channels have "
           "no such cut: resume with the checkpoint's --model_max_length and batch");
  ZT_CHECK(!s.shuffle || s.allow_data_change, change,
           "; the run is shuffled, a permutation of windows of ", last.T,
           " tokens that no cut at another length continues. Pass --resume_allow_changes data to start "
           "a fresh shuffled order at the new length (tokens of the interrupted epoch may repeat), or train "
           "stages with --no_shuffle on a pre-shuffled file so each continues where the last stopped");
  ZT_CHECK(s.step >= last.step, "the checkpoint's data stages start after its step; the checkpoint is damaged");
  DataStage next;
  next.step = s.step;
  next.T = s.T;
  next.per_step = s.per_step;
  next.first_sequence = (s.step + s.offset_steps) * s.per_step;
  if (!s.shuffle) {
    const int64_t consumed = (s.step + s.offset_steps) * last.per_step - last.first_sequence;
    ZT_CHECK(consumed >= 0, "the checkpoint's data stages start after its step; the checkpoint is damaged");
    next.first_token = stream_window_start(s.file_tokens, last.T, last.first_token, consumed);
  }
  stages.push_back(next);
  return stages;
}

nlohmann::json stage_history_entry(const DataStage& from, const DataStage& to, const ModelConfig& cfg,
                                   const std::string& context_change) {
  nlohmann::json rope = cfg.raw.contains("rope_scaling") ? cfg.raw["rope_scaling"] : nlohmann::json();
  return {{"step", to.step},
          {"data_stage",
           {{"model_max_length", to.T},
            {"previous_model_max_length", from.T},
            {"sequences_per_step", to.per_step},
            {"previous_sequences_per_step", from.per_step},
            {"first_token", to.first_token},
            {"rope_scaling", rope},
            {"max_position_embeddings", cfg.max_position},
            {"config_change", context_change}}}};
}

}  // namespace zt::train_internal
