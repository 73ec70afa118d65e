// run_identity.cpp: see run_identity.h.
#include "run_identity.h"

#include <set>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "checkpoint/hf_model.h"

namespace zt {
namespace {

// Settings that only a DeepSpeed config sets (no flag of that name).
const std::set<std::string> kDeepSpeedOnly = {
    "contiguous_gradients", "steps_per_print",  "wall_clock_breakdown", "warmup_min_lr",   "warmup_max_lr",
    "warmup_type",          "warmup_min_ratio", "cos_min_ratio",        "total_num_steps", "ds_precision"};

std::string setting_name(const std::string& key) {
  return kDeepSpeedOnly.count(key) ? "the DeepSpeed setting " + key : "--" + key;
}

std::string value_of(const nlohmann::json& group, const std::string& key) {
  return group.contains(key) ? group[key].dump() : std::string("none");
}

std::string data_value(const nlohmann::json& group, const std::string& key) {
  const nlohmann::json& v = group.contains(key) ? group[key] : nlohmann::json();
  if (!v.is_object()) return "no such file";
  return str_cat(v.value("bytes", uint64_t(0)), " bytes, first MiB hash ", v.value("prefix_hash", std::string()));
}

// The message for the first difference between rank 0's identity and rank r's.
std::string describe_difference(const nlohmann::json& zero, const nlohmann::json& other, int r) {
  const std::string who = str_cat("rank ", r, " disagrees with rank 0 on ");
  auto group = [](const nlohmann::json& id, const char* g) {
    return id.is_object() && id.contains(g) && id[g].is_object() ? id[g] : nlohmann::json::object();
  };
  const nlohmann::json a0 = group(zero, "args"), ar = group(other, "args");
  std::string k = config_first_difference(a0, ar);
  if (!k.empty())
    return str_cat(who, setting_name(k), ": rank 0 has ", value_of(a0, k), ", rank ", r, " has ", value_of(ar, k),
                   "; launch every rank with the same arguments");
  const nlohmann::json m0 = group(zero, "model"), mr = group(other, "model");
  k = config_first_difference(m0, mr);
  if (!k.empty())
    return str_cat(who, "the model config ", quote(k), ": rank 0 has ", value_of(m0, k), ", rank ", r, " has ",
                   value_of(mr, k), "; give every rank the same model config");
  const nlohmann::json d0 = group(zero, "data"), dr = group(other, "data");
  k = config_first_difference(d0, dr);
  const std::string what =
      k == "model_weights" ? "the model weights (model.safetensors or its index)" : "the contents of --" + k;
  return str_cat(who, what, ": rank 0 has ", data_value(d0, k), "; rank ", r, " has ", data_value(dr, k),
                 "; give every rank the same files");
}

}  // namespace

nlohmann::json train_args_json(const TrainArgs& a) {
  nlohmann::json j;
#define ZT_ARG(name) j[#name] = a.name
  // Not here, legitimately per rank: model_name_or_path, model_config_path, train_file,
  // validation_file, eval_tasks, eval_probes, deepspeed (paths: contents are compared, or applied to the values below),
  // threads, dataloader_prefetch (speed only), explicit_flags (how a value was given, not the
  // value), the test hooks test_fail_rank / test_fail_step / test_flash_pause / test_spike_*, and the SFT paths
  // tokenizer_name, chat_template_path, cache_dir (each rank reads its own copy; the data's identity is compared).
  ZT_ARG(eval_steps), ZT_ARG(max_eval_samples), ZT_ARG(output_dir), ZT_ARG(overwrite_output_dir);
  ZT_ARG(per_device_train_batch_size), ZT_ARG(gradient_accumulation_steps), ZT_ARG(model_max_length);
  ZT_ARG(rope_scaling);
  ZT_ARG(offload_optimizer), ZT_ARG(offload_param), ZT_ARG(max_device_memory);
  ZT_ARG(optim), ZT_ARG(learning_rate), ZT_ARG(weight_decay), ZT_ARG(adam_beta1), ZT_ARG(adam_beta2);
  ZT_ARG(adam_epsilon), ZT_ARG(max_grad_norm), ZT_ARG(lr_scheduler_type), ZT_ARG(warmup_ratio), ZT_ARG(warmup_steps);
  ZT_ARG(lr_scheduler_kwargs), ZT_ARG(moe_capacity_factor), ZT_ARG(router_z_loss_coef);
  ZT_ARG(expert_model_parallel_size);
  ZT_ARG(max_steps), ZT_ARG(num_train_epochs), ZT_ARG(logging_steps), ZT_ARG(save_strategy), ZT_ARG(save_steps);
  ZT_ARG(save_total_limit), ZT_ARG(resume_from_checkpoint), ZT_ARG(resume_allow_changes), ZT_ARG(save_dtype);
  ZT_ARG(flash_checkpoint), ZT_ARG(spike_policy), ZT_ARG(spike_window), ZT_ARG(spike_zscore);
  ZT_ARG(spike_max_rollbacks);
  ZT_ARG(seed), ZT_ARG(logging_dir), ZT_ARG(report_to), ZT_ARG(plot), ZT_ARG(disable_tqdm), ZT_ARG(packing);
  ZT_ARG(eos_token_id), ZT_ARG(zero_stage), ZT_ARG(overlap_comm), ZT_ARG(reduce_bucket_size);
  ZT_ARG(allgather_bucket_size), ZT_ARG(contiguous_gradients), ZT_ARG(reduce_scatter), ZT_ARG(zero_hpz_partition_size);
  ZT_ARG(tensor_model_parallel_size), ZT_ARG(sequence_parallel), ZT_ARG(context_parallel_size);
  ZT_ARG(zero_quantized_weights), ZT_ARG(zero_quantized_gradients), ZT_ARG(steps_per_print);
  ZT_ARG(wall_clock_breakdown), ZT_ARG(train_batch_size), ZT_ARG(warmup_min_lr), ZT_ARG(warmup_max_lr);
  ZT_ARG(warmup_type), ZT_ARG(warmup_min_ratio), ZT_ARG(cos_min_ratio), ZT_ARG(total_num_steps), ZT_ARG(no_shuffle);
  ZT_ARG(peak_gflops), ZT_ARG(bf16), ZT_ARG(fp16), ZT_ARG(gradient_checkpointing), ZT_ARG(recompute_granularity);
  ZT_ARG(recompute_num_layers), ZT_ARG(max_memory), ZT_ARG(auto_find_batch_size);
  ZT_ARG(max_shard_size), ZT_ARG(tokenizer_name), ZT_ARG(eval_strategy);
  ZT_ARG(logging_strategy), ZT_ARG(do_train), ZT_ARG(do_eval), ZT_ARG(per_device_eval_batch_size);
  ZT_ARG(load_best_model_at_end), ZT_ARG(metric_for_best_model), ZT_ARG(greater_is_better);
  ZT_ARG(save_safetensors), ZT_ARG(data_seed), ZT_ARG(logging_first_step), ZT_ARG(run_name);
  ZT_ARG(completion_only_loss), ZT_ARG(assistant_only_loss), ZT_ARG(train_file_weights);
#undef ZT_ARG
  j["ds_precision"] = deepspeed_precision_json(a.ds_precision);
  return j;
}

nlohmann::json job_identity(const TrainArgs& a, const ModelConfig& cfg, const FileIdentity& train_file) {
  nlohmann::json data = {
      {"train_file", train_file.to_json()}, {"validation_file", nullptr}, {"model_weights", nullptr}};
  if (!a.validation_file.empty())
    data["validation_file"] = file_identity(a.validation_file, "--validation_file").to_json();
  if (!a.model_name_or_path.empty()) {
    // model.safetensors, or a sharded folder's index (which names every shard).
    std::string w = hf_weights_file(a.model_name_or_path);
    if (w.empty()) w = a.model_name_or_path + "/" + kHfWeights;  // file_identity names it missing
    data["model_weights"] = file_identity(w, "--model_name_or_path's weights").to_json();
  }
  return {{"args", train_args_json(a)}, {"model", config_resolved_json(cfg)}, {"data", data}};
}

void check_ranks_agree(dist::Communicator& world, const nlohmann::json& identity) {
  if (world.size() == 1) return;
  const std::string mine = identity.dump();
  uint64_t h = hash64(mine.data(), mine.size());
  std::vector<uint64_t> all(size_t(world.size()));
  world.all_gather(&h, all.data(), sizeof h);
  int r = 1;
  while (r < world.size() && all[size_t(r)] == all[0]) ++r;
  if (r == world.size()) return;
  // Every rank learns both identities, so every rank throws the same message.
  const nlohmann::json zero = nlohmann::json::parse(dist::broadcast_string(world, mine, 0));
  const nlohmann::json other = nlohmann::json::parse(dist::broadcast_string(world, mine, r));
  throw JobError(describe_difference(zero, other, r));
}

}  // namespace zt
