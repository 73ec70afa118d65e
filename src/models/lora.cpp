// lora.cpp: where LoRA adapters sit (PEFT's LoraConfig over an HF model): which HF modules a
// block's Linears hold, target_modules resolved as PEFT matches them, and the adapter table
// (models/layout.h) laid out beside a frozen base.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "models/layout.h"

namespace zt {

float LoraSpec::scale() const { return float(rslora ? alpha / std::sqrt(double(r)) : alpha / double(r)); }

std::string module_in_block(const std::string& path) {
  size_t at = 0;
  for (int dots = 0; dots < 3; ++dots) at = path.find('.', at) + 1;
  return path.substr(at);
}

std::vector<ModuleSlot> block_modules(const ModelConfig& c, int l) {
  const int C = c.n_embd, F = c.ffn;
  if (c.arch == Arch::gpt2) {
    const std::string p = "transformer.h." + std::to_string(l);
    return {{p + ".attn.c_attn", 0, 0, 3 * C},
            {p + ".attn.c_proj", 1, 0, C},
            {p + ".mlp.c_fc", 2, 0, F},
            {p + ".mlp.c_proj", 3, 0, C}};
  }
  const std::string p = "model.layers." + std::to_string(l);
  const int q = c.n_head * c.head_size, kv = c.n_kv_head * c.head_size;
  return {{p + ".self_attn.q_proj", 0, 0, q},       {p + ".self_attn.k_proj", 0, q, kv},
          {p + ".self_attn.v_proj", 0, q + kv, kv}, {p + ".self_attn.o_proj", 1, 0, C},
          {p + ".mlp.gate_proj", 2, 0, F},          {p + ".mlp.up_proj", 2, F, F},
          {p + ".mlp.down_proj", 3, 0, C}};
}

namespace {
std::string last_part(const std::string& path) { return path.substr(path.rfind('.') + 1); }

// PEFT's rule for a list of names: a module matches when its name is the target or ends in
// "." + target.
bool target_matches(const std::string& path, const std::string& target) {
  return path == target ||
         (path.size() > target.size() && path.compare(path.size() - target.size(), target.size(), target) == 0 &&
          path[path.size() - target.size() - 1] == '.');
}
}  // namespace

std::vector<std::string> lora_resolve_targets(const ModelConfig& c) {
  ZT_CHECK(c.model_type != "phi3",
           "LoRA on Phi-3 is not supported yet: its HF modules fuse q/k/v (qkv_proj) and "
           "gate/up (gate_up_proj), which ztrain's adapters do not model");
  const std::vector<ModuleSlot> mods = block_modules(c, 0);
  std::vector<std::string> targets = c.lora.targets;
  // PEFT's defaults (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): c_attn for GPT-2,
  // q_proj and v_proj for the Llama-shaped families.
  if (targets.empty())
    targets = c.arch == Arch::gpt2 ? std::vector<std::string>{"c_attn"} : std::vector<std::string>{"q_proj", "v_proj"};
  std::string valid;
  for (const ModuleSlot& m : mods) valid += (valid.empty() ? "" : ", ") + last_part(m.path);
  std::vector<std::string> chosen;
  for (const std::string& t : targets) {
    ZT_CHECK(!t.empty(), "--lora_target_modules: an empty module name; valid names: ", valid, ", all-linear");
    if (t == "lm_head" || t.find("embed") != std::string::npos || t == "wte")
      throw Error("--lora_target_modules: " + t + " is not a linear layer ztrain adapts (the embedding and LM " +
                  "head stay frozen); valid names: " + valid + ", all-linear");
    bool found = t == "all-linear";
    for (const ModuleSlot& m : mods) {
      // A target may name the module's path within the block ("self_attn.q_proj", "mlp.c_proj").
      const std::string local = module_in_block(m.path);
      if (t == "all-linear" || target_matches(m.path, t) || target_matches(local, t)) {
        found = true;
        if (std::find(chosen.begin(), chosen.end(), local) == chosen.end()) chosen.push_back(local);
      }
    }
    ZT_CHECK(found, "--lora_target_modules: no module named '", t, "' in this ", c.model_type,
             " model; valid names: ", valid, ", all-linear");
  }
  // In block order, whatever order the targets came in.
  std::vector<std::string> ordered;
  for (const ModuleSlot& m : mods)
    if (std::find(chosen.begin(), chosen.end(), module_in_block(m.path)) != chosen.end())
      ordered.push_back(module_in_block(m.path));
  return ordered;
}

// Lays out the adapters of every block in `m` (whose base layout is in m.base_table / m.offsets):
// per block, per Linear, the chosen modules' A's back to back, then their B's.
void lora_layout(const ModelConfig& c, ModelLayout& m) {
  const std::vector<std::string> chosen = lora_resolve_targets(c);
  const int r = c.lora.r;
  m.adapters.resize(size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::vector<ModuleSlot> mods = block_modules(c, l);
    const BlockOffsets& bo = m.offsets.blocks[size_t(l)];
    BlockAdapters& ba = m.adapters[size_t(l)];
    ba.begin = m.table.total();
    std::vector<AdapterPart>* lists[4] = {&ba.qkv, &ba.proj, &ba.fc_in, &ba.fc_out};
    const LinearOffsets* lins[4] = {&bo.qkv, &bo.proj, &bo.fc_in, &bo.fc_out};
    for (int k = 0; k < 4; ++k) {
      for (const ModuleSlot& s : mods) {
        if (s.linear != k) continue;
        if (std::find(chosen.begin(), chosen.end(), module_in_block(s.path)) == chosen.end()) continue;
        AdapterPart p;
        p.module = s.path;
        p.out_begin = s.out_begin;
        p.out_size = s.out_size;
        p.a = m.table.add("base_model.model." + s.path + ".lora_A.weight", {r, lins[k]->in}, ParamInit::lora_a);
        lists[k]->push_back(p);
      }
      for (AdapterPart& p : *lists[k])
        p.b = m.table.add("base_model.model." + p.module + ".lora_B.weight", {p.out_size, r}, ParamInit::zeros);
    }
  }
}

}  // namespace zt
