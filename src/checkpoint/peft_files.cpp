// peft_files.cpp: see peft_files.h.
#include "checkpoint/peft_files.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "checkpoint/hf_model.h"
#include "core/error.h"
#include "core/file_io.h"
#include "kernels/gemm.h"
#include "kernels/scale_columns.h"

namespace zt {

namespace fs = std::filesystem;

namespace {
// The target_modules PEFT would store: each chosen module's last name, unless that name also
// covers a module left out (GPT-2's attn.c_proj and mlp.c_proj), then its path within the block.
std::vector<std::string> stored_names(const ModelConfig& cfg, const std::vector<std::string>& chosen) {
  auto last = [](const std::string& p) { return p.substr(p.rfind('.') + 1); };
  const std::unordered_set<std::string> picked(chosen.begin(), chosen.end());
  std::unordered_set<std::string> left_out;  // last names some module not chosen also has
  for (const ModuleSlot& m : block_modules(cfg, 0))
    if (!picked.count(module_in_block(m.path))) left_out.insert(last(m.path));
  std::vector<std::string> out;
  std::unordered_set<std::string> stored;
  for (const std::string& c : chosen) {
    const std::string name = left_out.count(last(c)) ? c : last(c);
    if (stored.insert(name).second) out.push_back(name);
  }
  return out;
}
std::vector<std::string> stored_targets(const ModelConfig& cfg) { return stored_names(cfg, lora_resolve_targets(cfg)); }

// IA3Config's fields as PEFT saves them.
nlohmann::ordered_json ia3_config(const ModelConfig& cfg, const std::string& base) {
  nlohmann::ordered_json j;
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base.empty() ? nlohmann::json(nullptr) : nlohmann::json(base);
  j["fan_in_fan_out"] = cfg.arch == Arch::gpt2;
  j["feedforward_modules"] = stored_names(cfg, ia3_feedforward_modules(cfg));
  j["inference_mode"] = true;
  j["init_ia3_weights"] = true;
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "IA3";
  j["revision"] = nullptr;
  j["target_modules"] = stored_targets(cfg);
  j["task_type"] = "CAUSAL_LM";
  return j;
}
}  // namespace

nlohmann::ordered_json peft_adapter_config(const ModelConfig& cfg, const std::string& base) {
  const LoraSpec& s = cfg.lora;
  if (s.ia3()) return ia3_config(cfg, base);
  nlohmann::ordered_json j;
  j["alpha_pattern"] = nlohmann::json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base.empty() ? nlohmann::json(nullptr) : nlohmann::json(base);
  j["bias"] = "none";
  // GPT-2's Conv1D stores weights (in, out): PEFT marks its adapters fan_in_fan_out.
  j["fan_in_fan_out"] = cfg.arch == Arch::gpt2;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = nlohmann::json::object();
  // PEFT keeps the number as given: an integral alpha is written as an integer.
  if (s.alpha == std::floor(s.alpha) && s.alpha < 1e9)
    j["lora_alpha"] = int64_t(s.alpha);
  else
    j["lora_alpha"] = s.alpha;
  j["lora_dropout"] = s.dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = s.r;
  j["rank_pattern"] = nlohmann::json::object();
  j["revision"] = nullptr;
  j["target_modules"] = stored_targets(cfg);
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = s.dora;
  j["use_rslora"] = s.rslora;
  return j;
}

void peft_save_adapters(const ModelConfig& cfg, const std::vector<StTensorOut>& tensors, const std::string& folder,
                        const std::string& base) {
  fs::create_directories(folder);
  safetensors_write((fs::path(folder) / kAdapterWeights).string(), tensors, DType::f32, {{"format", "pt"}});
  write_file_atomic((fs::path(folder) / kAdapterConfig).string(), peft_adapter_config(cfg, base).dump(2) + "\n");
}

std::string peft_weights_file(const std::string& folder) {
  const fs::path p = fs::path(folder) / kAdapterWeights;
  std::error_code ec;
  ZT_CHECK(fs::is_regular_file(p, ec), folder, ": no ", kAdapterWeights,
           "; --adapter_name_or_path names a PEFT adapter folder (adapter_config.json + adapter_model.safetensors)");
  return p.string();
}

namespace {
std::vector<std::string> names_of(const nlohmann::json& t) {
  std::vector<std::string> out;
  if (t.is_string())
    out = {t.get<std::string>()};
  else if (t.is_array())
    for (const auto& x : t) out.push_back(x.get<std::string>());
  return out;
}

template <class Field>
LoraSpec read_ia3(const std::string& path, Field field) {
  LoraSpec s;
  s.type = PeftType::ia3;
  ZT_CHECK(field("init_ia3_weights").is_null() || field("init_ia3_weights").is_boolean(), path,
           ": init_ia3_weights must be true or false");
  try {
    s.targets = names_of(field("target_modules"));
    s.feedforward = names_of(field("feedforward_modules"));
    s.feedforward_named = !field("feedforward_modules").is_null();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": target_modules or feedforward_modules has the wrong type (" + e.what() + ")");
  }
  ZT_CHECK(!s.targets.empty(), path, ": target_modules is empty");
  return s;
}
}  // namespace

LoraSpec peft_read_config(const std::string& folder) {
  const std::string path = (fs::path(folder) / kAdapterConfig).string();
  std::ifstream in(path);
  ZT_CHECK(in.good(), path,
           ": cannot be read; --adapter_name_or_path names a PEFT adapter folder "
           "(adapter_config.json + adapter_model.safetensors)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  ZT_CHECK(j.is_object(), path, ": not a JSON object");
  auto field = [&](const char* k) { return j.contains(k) ? j[k] : nlohmann::json(); };
  const nlohmann::json type = field("peft_type");
  ZT_CHECK(type.is_string() && (type.get<std::string>() == "LORA" || type.get<std::string>() == "IA3"), path,
           ": peft_type ", type.dump(), " is not supported; ztrain reads LORA and IA3 adapters");
  auto off = [&](const char* k, const nlohmann::json& ok) {
    const nlohmann::json v = field(k);
    ZT_CHECK(v.is_null() || v == ok || (v.is_object() && v.empty()), path, ": ", k, " = ", v.dump(),
             " is not supported (ztrain's adapters have none)");
  };
  off("modules_to_save", nullptr);
  if (type.get<std::string>() == "IA3") return read_ia3(path, field);
  off("bias", "none");
  off("rank_pattern", nlohmann::json::object());
  off("alpha_pattern", nlohmann::json::object());
  off("layers_to_transform", nullptr);
  LoraSpec s;
  try {
    s.r = field("r").get<int>();
    s.alpha = field("lora_alpha").is_null() ? 8.0 : field("lora_alpha").get<double>();
    s.dropout = field("lora_dropout").is_null() ? 0.0 : field("lora_dropout").get<double>();
    s.rslora = field("use_rslora").is_boolean() && field("use_rslora").get<bool>();
    s.dora = field("use_dora").is_boolean() && field("use_dora").get<bool>();
    s.targets = names_of(field("target_modules"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": r, lora_alpha, lora_dropout or target_modules has the wrong type (" + e.what() + ")");
  }
  ZT_CHECK(s.r >= 1 && s.r <= 65536, path, ": r = ", s.r, " must be at least 1");
  ZT_CHECK(s.dropout >= 0.f && s.dropout < 1.f, path, ": lora_dropout ", s.dropout, " must lie in [0, 1)");
  return s;
}

namespace {
std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}
}  // namespace

void peft_check_adapter(const ModelConfig& cfg, const std::string& folder) {
  const SafetensorsFile file(peft_weights_file(folder));
  const ModelLayout layout = model_layout(cfg);
  const std::string base = cfg.model_type + " base model (hidden " + std::to_string(cfg.n_embd) + ", " +
                           std::to_string(cfg.n_layer) + " layers)";
  for (const ParamInfo& p : layout.table.list()) {
    const StEntry* e = file.find(p.name);
    ZT_CHECK(e, folder, ": the adapter has no tensor ", p.name, ", which adapter_config.json's settings give this ",
             base, "; the adapter was made for a different base model or settings");
    ZT_CHECK(e->shape == p.global_shape, folder, ": tensor ", p.name, " has shape ", shape_text(e->shape), " but this ",
             base, cfg.lora.ia3() ? " with IA3" : " with r " + std::to_string(cfg.lora.r), " needs ",
             shape_text(p.global_shape), "; the adapter was made for a different base model");
  }
  std::unordered_set<std::string> names;
  for (const ParamInfo& p : layout.table.list()) names.insert(p.name);
  for (const StEntry& e : file.entries())
    ZT_CHECK(names.count(e.name), folder, ": tensor ", e.name, " has no place in this ", base,
             " (ztrain reads lora_A / lora_B or ia3_l of the modules target_modules names)");
}

namespace {
// IA3 merged: an output vector scales its rows of W (columns of GPT-2's (in, out) W) and its bias;
// an input vector scales W's columns (rows of an (in, out) W).
void merge_ia3(const ModelLayout& with, const ModelLayout& base, const float* adapters, float* w) {
  for (size_t l = 0; l < with.adapters.size(); ++l) {
    const BlockAdapters& ba = with.adapters[l];
    const BlockOffsets& bo = base.offsets.blocks[l];
    for (auto [parts, lin] :
         {std::pair{&ba.qkv, &bo.qkv}, {&ba.proj, &bo.proj}, {&ba.fc_in, &bo.fc_in}, {&ba.fc_out, &bo.fc_out}})
      for (const AdapterPart& p : *parts) {
        const float* v = adapters + p.a;
        float* W = w + lin->w;
        // Element (row i of in, output j) of W sits at i * out + j ((in, out)) or j * in + i.
        auto at = [&](int64_t i, int64_t j) -> float& {
          return lin->w_in_out ? W[i * lin->out + j] : W[j * lin->in + i];
        };
        for (int64_t i = 0; i < lin->in; ++i)
          for (int64_t j = p.feedforward ? 0 : p.out_begin; j < (p.feedforward ? lin->out : p.out_begin + p.out_size);
               ++j)
            at(i, j) *= p.feedforward ? v[i] : v[j - p.out_begin];
        if (!p.feedforward && lin->b >= 0)
          for (int j = 0; j < p.out_size; ++j) w[lin->b + p.out_begin + j] *= v[j];
      }
  }
}
}  // namespace

namespace {
// The routed experts' adapters merged: per expert W_gate / W_up (F, C) and W_down (C, F) += s B A
// (w + at: the first expert's [gate; up] rows, each expert 3 F C elements on).
void merge_experts(const ModelConfig& cfg, const ExpertAdapters& ex, const float* adapters, float* w, int64_t at) {
  if (!ex.on()) return;
  float* experts = w + at;
  nn::MoeExpertLora L;
  L.r = cfg.lora.r, L.gate = ex.gate, L.up = ex.up, L.down = ex.down;
  const int C = cfg.n_embd, F = cfg.moe.expert_ffn, r = L.r;
  const float s = cfg.lora.scale();
  for (int e = 0; e < cfg.moe.num_experts; ++e) {
    const float* P = adapters + ex.first + e * ex.stride;
    float* W = experts + int64_t(e) * 3 * F * C;
    for (int j = 0; j < L.parts_in(); ++j) {
      const int64_t row0 = (j == 0 && L.gate) ? 0 : F;  // the gate's rows, then the up's
      kernels::gemm_typed(DType::f32, false, false, F, C, r, s, P + L.b_in(C) + int64_t(j) * F * r, r,
                          P + int64_t(j) * r * C, C, 1.0f, W + row0 * C, C);
    }
    if (L.down)
      kernels::gemm_typed(DType::f32, false, false, C, F, r, s, P + L.b_down(C, F), r, P + L.a_down(C, F), F, 1.0f,
                          W + 2 * int64_t(F) * C, F);
  }
}
}  // namespace

Error peft_config_error(const std::string& folder, const Error& why) {
  const std::string w = why.what();
  const bool elsewhere = w.find("no module named") != std::string::npos;
  return Error(folder + "/adapter_config.json: " + w + (elsewhere ? " (the adapter was made for another model)" : ""));
}

void peft_merge_into(Transformer& model, const std::string& adapter_folder) {
  ModelConfig cfg = model.config();
  ZT_CHECK(!cfg.lora.enabled(), "merging adapters needs the base model without adapters");
  cfg.lora = peft_read_config(adapter_folder);
  try {
    lora_resolve_targets(cfg);
  } catch (const Error& e) {
    throw peft_config_error(adapter_folder, e);
  }
  peft_check_adapter(cfg, adapter_folder);
  const ModelLayout with = model_layout(cfg);
  std::vector<float> adapters(size_t(with.table.total()));
  HfWeights(peft_weights_file(adapter_folder), cfg).read(with.table, 0, with.table.total(), adapters.data());
  float* w = model.flat_params().as<float>();
  if (cfg.lora.ia3()) return merge_ia3(with, model.layout(), adapters.data(), w);
  const float scale = cfg.lora.scale();
  const int r = cfg.lora.r;
  // DoRA merges as PEFT: W' = (m / ||W + s B A||_row) (W + s B A), rows per output.
  auto dora_merge = [&](const LinearOffsets* lin, const AdapterPart& p) {
    if (!cfg.lora.dora) return;
    std::vector<float> n(size_t(p.out_size));
    float* W = w + lin->w;
    const int64_t wj = lin->w_in_out ? 1 : lin->in, wi = lin->w_in_out ? lin->out : 1;
    float* rows = W + int64_t(p.out_begin) * wj;
    kernels::row_norms_of_sum(n.data(), nullptr, rows, wj, wi, p.out_size, lin->in);
    for (int j = 0; j < p.out_size; ++j)
      for (int64_t i = 0; i < lin->in; ++i) rows[j * wj + i * wi] *= adapters[size_t(p.m + j)] / n[size_t(j)];
  };
  for (size_t l = 0; l < with.adapters.size(); ++l) {
    const BlockAdapters& ba = with.adapters[l];
    const BlockOffsets& bo = model.layout().offsets.blocks[l];
    const auto lins = linear_offsets(bo);
    merge_experts(cfg, ba.experts, adapters.data(), w, bo.moe.experts);
    for (int k = 0; k < kLinears; ++k)
      for (const AdapterPart& p : *ba.linears()[size_t(k)]) {
        const LinearOffsets* lin = lins[size_t(k)];
        const float* A = adapters.data() + p.a;  // (r, in)
        const float* B = adapters.data() + p.b;  // (out_size, r)
        if (lin->w_in_out)                       // W (in, out): columns [o, o + m) += scale A^T B^T
          kernels::gemm_typed(DType::f32, true, true, lin->in, p.out_size, r, scale, A, lin->in, B, r, 1.0f,
                              w + lin->w + p.out_begin, lin->out);
        else  // W (out, in): rows [o, o + m) += scale B A
          kernels::gemm_typed(DType::f32, false, false, p.out_size, lin->in, r, scale, B, r, A, lin->in, 1.0f,
                              w + lin->w + int64_t(p.out_begin) * lin->in, lin->in);
        dora_merge(lin, p);
      }
  }
}

}  // namespace zt
