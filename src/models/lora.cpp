// lora.cpp: where LoRA adapters sit (PEFT's LoraConfig over an HF model): which HF modules a
// block's Linears hold, target_modules resolved as PEFT matches them, and the adapter table
// (models/layout.h) laid out beside a frozen base.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "kernels/nf4.h"
#include "kernels/scale_columns.h"
#include "models/layout.h"

namespace zt {

float LoraSpec::scale() const { return float(rslora ? alpha / std::sqrt(double(r)) : alpha / double(r)); }

std::string module_in_block(const std::string& path) {
  size_t at = 0;
  for (int dots = 0; dots < 3; ++dots) at = path.find('.', at) + 1;
  return path.substr(at);
}

namespace {
// A mixture of experts' modules (transformers 4.x's Linears, as PEFT's all-linear finds them): the
// router (gate), each held routed expert's three (Mixtral's w1 / w3 / w2, Qwen-MoE's gate_proj /
// up_proj / down_proj), and Qwen2-MoE's shared expert, cut like a dense MLP, and its gate.
void moe_modules(const ModelConfig& c, const std::string& p, const LayerCut& cut, std::vector<ModuleSlot>& mods) {
  const MoeConfig& m = c.moe;
  const int C = c.n_embd, F = m.expert_ffn, E = m.num_experts;
  const bool mixtral = c.model_type == "mixtral";
  const std::string pre = p + (mixtral ? ".block_sparse_moe." : ".mlp.");
  auto plain = [&](std::string path, int lin, int o, int n, int in, int expert = -1) {
    return ModuleSlot{std::move(path), lin, o, n, n, in, 0, 1, 1, {}, nn::LinearKind::plain, expert};
  };
  mods.push_back(plain(pre + "gate", kLinRouter, 0, E, C));
  const int e0 = cut.experts > 0 ? cut.experts_begin : 0, e1 = cut.experts > 0 ? e0 + cut.experts : E;
  for (int e = e0; e < e1; ++e) {
    const std::string x = pre + "experts." + std::to_string(e) + ".";
    mods.push_back(plain(x + (mixtral ? "w1" : "gate_proj"), kExpertIn, 0, F, C, e));
    mods.push_back(plain(x + (mixtral ? "w3" : "up_proj"), kExpertIn, F, F, C, e));
    mods.push_back(plain(x + (mixtral ? "w2" : "down_proj"), kExpertDown, 0, C, F, e));
  }
  if (m.shared_ffn <= 0) return;
  const int Fs = m.shared_ffn, Fl = cut.shared_ffn > 0 ? cut.shared_ffn : Fs, f0 = cut.shared_ffn_begin;
  const std::string x = pre + "shared_expert.";
  mods.push_back({x + "gate_proj", kLinSharedIn, 0, Fl, Fs, C, f0, 1, 1, {}, nn::LinearKind::column});
  mods.push_back({x + "up_proj", kLinSharedIn, Fl, Fl, Fs, C, f0, 1, 1, {}, nn::LinearKind::column});
  mods.push_back({x + "down_proj", kLinSharedOut, 0, C, C, Fs, f0, 1, 1, {}, nn::LinearKind::row});
  if (m.shared_gate) mods.push_back(plain(pre + "shared_expert_gate", kLinSharedGate, 0, 1, C));
}
}  // namespace

std::vector<ModuleSlot> block_modules(const ModelConfig& c, int l, const LayerCut& cut_in) {
  const LayerCut cut = resolve_cut(c, cut_in);
  const int C = c.n_embd, F = c.ffn, HS = c.head_size;
  const int H = cut.heads * HS, KV = cut.kv_heads * HS, Fl = cut.ffn;
  // column: outputs [o, o + n) of n_whole, held from `begin`; row: the whole output, inputs held.
  auto col = [&](std::string p, int lin, int o, int n, int n_whole, int begin, int parts = 1) {
    return ModuleSlot{std::move(p), lin, o, n, n_whole, C, begin, parts, 1, {}, nn::LinearKind::column};
  };
  auto row = [&](std::string p, int lin, int in, int in_whole, int begin) {
    return ModuleSlot{std::move(p), lin, 0, C, C, in_whole, begin, 1, 1, {}, nn::LinearKind::row};
  };
  if (c.arch == Arch::gpt2) {
    const std::string p = "transformer.h." + std::to_string(l);
    return {col(p + ".attn.c_attn", 0, 0, 3 * H, 3 * C, cut.heads_begin * HS, 3),
            row(p + ".attn.c_proj", 1, H, C, cut.heads_begin * HS), col(p + ".mlp.c_fc", 2, 0, Fl, F, cut.ffn_begin),
            row(p + ".mlp.c_proj", 3, Fl, F, cut.ffn_begin)};
  }
  const std::string p = "model.layers." + std::to_string(l);
  const int q = c.n_head * HS, kv = c.n_kv_head * HS;
  // HF's Phi-3 fuses them as ztrain does: one module per fused Linear. Under tensor parallelism a rank
  // holds the same rows of each part (gate and up; q, k and v when there are as many KV heads as heads).
  if (c.model_type == "phi3") {
    std::vector<ModuleSlot> mods{col(p + ".self_attn.qkv_proj", 0, 0, H + 2 * KV, q + 2 * kv, cut.heads_begin * HS, 3),
                                 row(p + ".self_attn.o_proj", 1, H, q, cut.heads_begin * HS),
                                 col(p + ".mlp.gate_up_proj", 2, 0, 2 * Fl, 2 * F, cut.ffn_begin, 2),
                                 row(p + ".mlp.down_proj", 3, Fl, F, cut.ffn_begin)};
    if (c.n_kv_head != c.n_head) {  // q, k and v parts of different sizes
      const int qb = cut.heads_begin * HS, kb = cut.kv_heads_begin * HS;
      mods[0].part_list = {{q, H, qb}, {kv, KV, kb}, {kv, KV, kb}};
      mods[0].parts = 1;
    }
    return mods;
  }
  std::vector<ModuleSlot> mods{col(p + ".self_attn.q_proj", 0, 0, H, q, cut.heads_begin * HS),
                               col(p + ".self_attn.k_proj", 0, H, KV, kv, cut.kv_heads_begin * HS),
                               col(p + ".self_attn.v_proj", 0, H + KV, KV, kv, cut.kv_heads_begin * HS),
                               row(p + ".self_attn.o_proj", 1, H, q, cut.heads_begin * HS)};
  mods[1].replicas = mods[2].replicas = cut.kv_holders;
  if (c.moe.on()) {
    moe_modules(c, p, cut, mods);
    return mods;
  }
  mods.push_back(col(p + ".mlp.gate_proj", 2, 0, Fl, F, cut.ffn_begin));
  mods.push_back(col(p + ".mlp.up_proj", 2, Fl, Fl, F, cut.ffn_begin));
  mods.push_back(row(p + ".mlp.down_proj", 3, Fl, F, cut.ffn_begin));
  return mods;
}

namespace {
std::string last_part(const std::string& path) { return path.substr(path.rfind('.') + 1); }

}  // namespace

namespace {
// PEFT's default targets per family (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING and
// TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING / _FEEDFORWARD_MODULES_MAPPING); IA3 has no
// default for the families PEFT's table leaves out, and PEFT then asks for target_modules.
std::vector<std::string> default_targets(const ModelConfig& c, bool feedforward) {
  using V = std::vector<std::string>;
  if (!c.lora.ia3() && c.model_type == "phi3") return V{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  if (!c.lora.ia3()) return c.arch == Arch::gpt2 ? V{"c_attn"} : V{"q_proj", "v_proj"};
  if (c.arch == Arch::gpt2) return feedforward ? V{"mlp.c_proj"} : V{"c_attn", "mlp.c_proj"};
  for (const char* known : {"llama", "mistral", "gemma", "gemma2", "qwen2"})
    if (c.model_type == known) return feedforward ? V{"down_proj"} : V{"k_proj", "v_proj", "down_proj"};
  throw Error("--peft_type ia3: PEFT has no default target modules for " + c.model_type +
              "; name them with --target_modules (e.g. k_proj,v_proj,down_proj) and --feedforward_modules "
              "(e.g. down_proj)");
}

// `names` resolved against layer 0's modules: the chosen modules' paths within the block, in
// block order; an Error naming an unknown name and listing the valid ones. PEFT's rule for a list of
// names: a module matches when its path is the target or ends in "." + target. Linear in the modules and
// names (a mixture of experts has three modules per expert; an adapter_config.json may list each):
// every dotted suffix of every module's path is indexed once.
std::vector<std::string> resolve_modules(const ModelConfig& c, const std::vector<std::string>& names,
                                         const char* flag) {
  const std::vector<ModuleSlot> mods = block_modules(c, 0);
  std::unordered_set<std::string> names_seen;  // each last part once (every expert has the same three)
  std::string valid;
  std::unordered_map<std::string, std::vector<int>> by_suffix;  // PEFT's rule: a target is a dotted suffix
  for (size_t i = 0; i < mods.size(); ++i) {
    const std::string& path = mods[i].path;
    if (names_seen.insert(last_part(path)).second) valid += (valid.empty() ? "" : ", ") + last_part(path);
    by_suffix[path].push_back(int(i));
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1))
      by_suffix[path.substr(dot + 1)].push_back(int(i));
  }
  valid += ", all-linear";
  std::vector<char> chosen(mods.size(), 0);
  for (const std::string& t : names) {
    ZT_CHECK(!t.empty(), flag, ": an empty module name; valid names: ", valid);
    if (t == "lm_head" || t.find("embed") != std::string::npos || t == "wte")
      throw Error(std::string(flag) + ": " + t + " is not a linear layer ztrain adapts (the embedding and LM " +
                  "head stay frozen); valid names: " + valid);
    if (t == "all-linear") {
      std::fill(chosen.begin(), chosen.end(), 1);
      continue;
    }
    // A target may name the module's path within the block ("self_attn.q_proj", "mlp.c_proj").
    const auto hit = by_suffix.find(t);
    ZT_CHECK(hit != by_suffix.end(), flag, ": no module named '", t, "' in this ", c.model_type,
             " model; valid names: ", valid);
    for (int i : hit->second) chosen[size_t(i)] = 1;
  }
  std::vector<std::string> ordered;
  for (size_t i = 0; i < mods.size(); ++i)
    if (chosen[i]) ordered.push_back(module_in_block(mods[i].path));
  return ordered;
}
const char* targets_flag(const ModelConfig& c) { return c.lora.ia3() ? "--target_modules" : "--lora_target_modules"; }
}  // namespace

namespace {
bool is_moe_mlp_module(const ModuleSlot& s) { return s.linear >= kLinRouter; }

// The routed experts' chosen modules: every expert or none per module (the grouped GEMMs share one
// adapter layout); DoRA and IA3 take no mixture-of-experts MLP module yet.
void check_moe_targets(const ModelConfig& c, const std::vector<std::string>& chosen_list) {
  if (!c.moe.on()) return;
  const std::unordered_set<std::string> chosen(chosen_list.begin(), chosen_list.end());
  struct Kind {
    std::string picked, left;  // an expert's module of this name chosen / not chosen
  };
  std::unordered_map<std::string, Kind> kinds;  // by the module's last name (w1, gate_proj, ...)
  for (const ModuleSlot& s : block_modules(c, 0)) {
    if (!is_moe_mlp_module(s)) continue;
    const bool picked = chosen.count(module_in_block(s.path)) > 0;
    ZT_CHECK(!picked || (!c.lora.dora && !c.lora.ia3()), c.lora.ia3() ? "--peft_type ia3" : "--use_dora",
             " on a mixture-of-experts model's MLP module ", last_part(s.path),
             " is not supported yet (LoRA is); target the attention modules (q_proj, k_proj, v_proj, o_proj)");
    if (s.expert < 0) continue;
    Kind& k = kinds[last_part(s.path)];
    std::string& example = picked ? k.picked : k.left;
    if (example.empty()) example = module_in_block(s.path);
  }
  for (const auto& [name, k] : kinds)
    ZT_CHECK(k.picked.empty() || k.left.empty(), targets_flag(c), ": ", k.picked, " is chosen but not ", k.left,
             "; ztrain adapts a routed expert module in every expert or in none (name it as ", name, ")");
}

}  // namespace

std::vector<std::string> lora_resolve_targets(const ModelConfig& c) {
  const std::vector<std::string>& given = c.lora.targets;
  std::vector<std::string> chosen =
      resolve_modules(c, given.empty() ? default_targets(c, false) : given, targets_flag(c));
  check_moe_targets(c, chosen);
  return chosen;
}

std::vector<std::string> ia3_feedforward_modules(const ModelConfig& c) {
  const std::vector<std::string> targets = lora_resolve_targets(c);
  // As PEFT: named feedforward modules must be targets; the family's default applies to the
  // targets it covers.
  const bool named = c.lora.feedforward_named;
  std::vector<std::string> ff;
  for (const std::string& f :
       resolve_modules(c, named ? c.lora.feedforward : default_targets(c, true), "--feedforward_modules")) {
    const bool target = std::find(targets.begin(), targets.end(), f) != targets.end();
    ZT_CHECK(target || !named, "--feedforward_modules: ", f,
             " is not among the target modules; feedforward modules must be a subset of --target_modules");
    if (target) ff.push_back(f);
  }
  for (const std::string& f : ff) {
    // The input is scaled before the GEMM, so the Linear must hold this module alone.
    int sharing = 0, linear = -1;
    for (const ModuleSlot& m : block_modules(c, 0))
      if (module_in_block(m.path) == f) linear = m.linear;
    for (const ModuleSlot& m : block_modules(c, 0)) sharing += m.linear == linear;
    ZT_CHECK(sharing == 1, "--feedforward_modules: ", f,
             " shares its fused GEMM with other modules in ztrain (q/k/v, gate/up), so its input cannot be "
             "scaled alone; IA3 scales the input of a layer's output projection (down_proj, c_proj, o_proj)");
  }
  return ff;
}

namespace {
// The table's last tensor cut with a column module's outputs: held by runs of the module's replicas
// TP ranks (k / v with more ranks than KV heads), whose gradients the tensor-parallel group sums;
// a fused module's unequal parts (Phi-3's qkv_proj under GQA) described part by part.
void replicate_last(ModelLayout& m, bool column_cut, const ModuleSlot& s) {
  if (!column_cut) return;
  ParamInfo& p = m.table.mutable_list().back();
  p.split_replicas = s.replicas;
  if (p.split != Split::none) p.split_part_list = s.part_list;
}

// IA3: per adapted module one vector, ones at the start: (out, 1) scaling its outputs, or (1, in)
// scaling its input (feedforward modules), PEFT's shapes and names.
void ia3_layout(const ModelConfig& c, const std::unordered_set<std::string>& chosen, ModelLayout& m) {
  const std::vector<std::string> ff = ia3_feedforward_modules(c);
  m.adapters.resize(size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const BlockOffsets& bo = m.offsets.blocks[size_t(l)];
    BlockAdapters& ba = m.adapters[size_t(l)];
    ba.begin = m.table.total();
    std::vector<AdapterPart>* lists[4] = {&ba.qkv, &ba.proj, &ba.fc_in, &ba.fc_out};
    const LinearOffsets* lins[4] = {&bo.qkv, &bo.proj, &bo.fc_in, &bo.fc_out};
    for (const ModuleSlot& s : block_modules(c, l, m.cut)) {
      const std::string local = module_in_block(s.path);
      if (!chosen.count(local)) continue;
      AdapterPart p;
      p.module = s.path;
      p.out_begin = s.out_begin;
      p.out_size = s.out_size;
      p.feedforward = std::find(ff.begin(), ff.end(), local) != ff.end();
      p.kind = s.kind;
      const LinearOffsets& lin = *lins[s.linear];
      const bool row = lin.kind == nn::LinearKind::row, split = !m.cut.whole;
      const std::string name = "base_model.model." + s.path + ".ia3_l";
      // Tensor parallel: an input vector is cut with a row layer's inputs, an output vector with a
      // column layer's outputs; otherwise whole on every rank (its gradient then a partial sum).
      if (p.feedforward)
        p.a = split && row
                  ? m.table.add_split(name, {1, lin.in}, {1, s.in_whole}, Split::row, 1, s.held_begin, ParamInit::ones)
                  : m.table.add(name, {1, lin.in}, ParamInit::ones);
      else
        p.a = split && !row ? m.table.add_split(name, {s.out_size, 1}, {s.out_whole, 1}, Split::column, 0, s.held_begin,
                                                ParamInit::ones, s.parts)
                            : m.table.add(name, {s.out_size, 1}, ParamInit::ones);
      replicate_last(m, split && !row && !p.feedforward, s);
      lists[s.linear]->push_back(p);
    }
  }
}
}  // namespace

void dora_magnitudes(const ModelLayout& m, const float* base, int64_t begin, int64_t n, float* dst,
                     const std::function<void(float*, int64_t)>* slice_sum, const std::vector<kernels::Nf4View>* nf4) {
  for (size_t l = 0; l < m.adapters.size(); ++l) {
    const BlockAdapters& ba = m.adapters[l];
    const BlockOffsets& bo = m.offsets.blocks[l];
    const std::vector<AdapterPart>* lists[4] = {&ba.qkv, &ba.proj, &ba.fc_in, &ba.fc_out};
    const LinearOffsets* lins[4] = {&bo.qkv, &bo.proj, &bo.fc_in, &bo.fc_out};
    for (int k = 0; k < 4; ++k)
      for (const AdapterPart& p : *lists[k]) {
        const int64_t lo = std::max(begin, p.m), hi = std::min(begin + n, p.m + p.out_size);
        if (p.m < 0 || lo >= hi) continue;
        const LinearOffsets* lin = lins[k];
        std::vector<float> norms(size_t(p.out_size));
        const bool sliced = !m.cut.whole && lin->kind == nn::LinearKind::row;
        ZT_ASSERT(!sliced || slice_sum, "DoRA on a row layer's slices needs the sum over the other slices");
        if (nf4) {  // QDoRA: the norms of the dequantized weight's rows, as PEFT starts them
          const kernels::Nf4View& q = (*nf4)[l * 4 + size_t(k)];
          std::vector<float> rows(size_t(p.out_size) * size_t(q.cols));
          kernels::nf4_dequantize_rows(q, p.out_begin, p.out_begin + p.out_size, DType::f32, rows.data());
          kernels::row_norms_of_sum(norms.data(), nullptr, rows.data(), q.cols, 1, p.out_size, q.cols, sliced);
        } else if (lin->w_in_out) {  // (in, out): output j is column out_begin + j
          kernels::row_norms_of_sum(norms.data(), nullptr, base + lin->w + p.out_begin, 1, lin->out, p.out_size,
                                    lin->in, sliced);
        } else {
          kernels::row_norms_of_sum(norms.data(), nullptr, base + lin->w + int64_t(p.out_begin) * lin->in, lin->in, 1,
                                    p.out_size, lin->in, sliced);
        }
        if (sliced) {
          (*slice_sum)(norms.data(), p.out_size);
          for (float& v : norms) v = std::sqrt(v);
        }
        std::copy(norms.begin() + (lo - p.m), norms.begin() + (hi - p.m), dst + (lo - begin));
      }
  }
}

namespace {
// The routed experts' adapters of block l (held experts only), laid out as nn::MoeExpertLora reads
// them: per expert the chosen of [gate's A, up's A, gate's B, up's B, down's A, down's B], PEFT's names.
void expert_layout(const ModelConfig& c, const std::vector<ModuleSlot>& mods,
                   const std::unordered_set<std::string>& chosen, ModelLayout& m, ExpertAdapters& ex) {
  const int r = c.lora.r, C = c.n_embd, F = c.moe.expert_ffn;
  std::vector<const ModuleSlot*> in, down;  // of the first held expert, in block order
  int first_expert = -1;
  for (const ModuleSlot& s : mods) {
    if (s.expert < 0 || !chosen.count(module_in_block(s.path))) continue;
    if (first_expert < 0) first_expert = s.expert;
    if (s.expert != first_expert) continue;
    (s.linear == kExpertIn ? in : down).push_back(&s);
    if (s.linear == kExpertIn) (s.out_begin == 0 ? ex.gate : ex.up) = true;
    if (s.linear == kExpertDown) ex.down = true;
  }
  if (!ex.on()) return;
  const int per_expert = 2 * int(in.size() + down.size());  // tensors
  const int e0 = m.cut.experts > 0 ? m.cut.experts_begin : 0;
  const int e1 = m.cut.experts > 0 ? e0 + m.cut.experts : c.moe.num_experts;
  m.table.skip(per_expert * e0);  // the other experts' tensors keep one process's random streams
  auto add = [&](const std::string& name, std::vector<int64_t> shape, ParamInit init) {
    const int64_t at = m.table.add(name, shape, init);
    m.table.mutable_list().back().expert = true;
    return at;
  };
  for (int e = e0; e < e1; ++e) {
    // This expert's module paths: the first held expert's with its number replaced.
    auto path = [&](const ModuleSlot* s) {
      const std::string from = ".experts." + std::to_string(first_expert) + ".",
                        to = ".experts." + std::to_string(e) + ".";
      std::string p = s->path;
      return "base_model.model." + p.replace(p.find(from), from.size(), to);
    };
    const int64_t begin = m.table.total();
    for (const ModuleSlot* s : in) add(path(s) + ".lora_A.weight", {r, C}, ParamInit::lora_a);
    for (const ModuleSlot* s : in) add(path(s) + ".lora_B.weight", {F, r}, ParamInit::zeros);
    for (const ModuleSlot* s : down) add(path(s) + ".lora_A.weight", {r, F}, ParamInit::lora_a);
    for (const ModuleSlot* s : down) add(path(s) + ".lora_B.weight", {C, r}, ParamInit::zeros);
    if (e == e0) ex.first = begin;
    ex.stride = m.table.total() - begin;
  }
  m.table.skip(per_expert * (c.moe.num_experts - e1));
}

// One Linear's chosen modules (slots, all of Linear k): their A's back to back, then their B's, then
// (DoRA) their magnitudes. Under a tensor-parallel cut a column module's A and a row module's B are
// whole, the others cut with the module's outputs / inputs.
void linear_layout(const ModelConfig& c, const LinearOffsets& lin, const std::vector<ModuleSlot>& slots, bool split,
                   ModelLayout& m, std::vector<AdapterPart>& parts) {
  const int r = c.lora.r;
  for (const ModuleSlot& s : slots) {
    AdapterPart p;
    p.module = s.path;
    p.out_begin = s.out_begin;
    p.out_size = s.out_size;
    p.in_whole = s.in_whole;
    p.kind = s.kind;
    p.in_begin = s.kind == nn::LinearKind::row ? s.held_begin : 0;
    const std::string name = "base_model.model." + s.path + ".lora_A.weight";
    p.a = split && s.kind == nn::LinearKind::row
              ? m.table.add_split(name, {r, lin.in}, {r, s.in_whole}, Split::row, 1, s.held_begin, ParamInit::lora_a)
              : m.table.add(name, {r, lin.in}, ParamInit::lora_a);
    parts.push_back(p);
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    AdapterPart& p = parts[i];
    const bool col = split && slots[i].kind == nn::LinearKind::column;
    const std::string name = "base_model.model." + p.module + ".lora_B.weight";
    p.b = col ? m.table.add_split(name, {p.out_size, r}, {slots[i].out_whole, r}, Split::column, 0, slots[i].held_begin,
                                  ParamInit::zeros, slots[i].parts)
              : m.table.add(name, {p.out_size, r}, ParamInit::zeros);
    replicate_last(m, col, slots[i]);
  }
  // DoRA (PEFT's key; its ".weight" dropped when saved, as PEFT saves it): a column layer's
  // magnitudes are cut with its outputs, a row layer's whole (their gradient a partial sum).
  if (!c.lora.dora) return;
  for (size_t i = 0; i < slots.size(); ++i) {
    AdapterPart& p = parts[i];
    const bool col = split && slots[i].kind == nn::LinearKind::column;
    const std::string name = "base_model.model." + p.module + ".lora_magnitude_vector";
    p.m = col ? m.table.add_split(name, {p.out_size}, {slots[i].out_whole}, Split::column, 0, slots[i].held_begin,
                                  ParamInit::dora_magnitude, slots[i].parts)
              : m.table.add(name, {p.out_size}, ParamInit::dora_magnitude);
    replicate_last(m, col, slots[i]);
  }
}
}  // namespace

// Lays out the adapters of every block in `m` (whose base layout is in m.base_table / m.offsets):
// per block, per Linear, the chosen modules' A's back to back, then their B's; then the routed
// experts' (expert_layout).
void lora_layout(const ModelConfig& c, ModelLayout& m) {
  const std::vector<std::string> targets = lora_resolve_targets(c);
  const std::unordered_set<std::string> chosen(targets.begin(), targets.end());
  ZT_CHECK(m.cut.whole || c.model_type != "phi3" || m.cut.kv_holders == 1, "LoRA on a Phi-3 under tensor parallelism",
           " with more ranks (", c.n_kv_head * m.cut.kv_holders, ") than key/value heads (", c.n_kv_head,
           ") is not supported yet (the fused qkv_proj's k and v rows would be shared, its q rows not); use at most ",
           c.n_kv_head, " tensor-parallel ranks");
  if (c.lora.ia3()) return ia3_layout(c, chosen, m);
  m.adapters.resize(size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::vector<ModuleSlot> mods = block_modules(c, l, m.cut);
    BlockAdapters& ba = m.adapters[size_t(l)];
    ba.begin = m.table.total();
    const auto lists = ba.linears();
    const auto lins = linear_offsets(m.offsets.blocks[size_t(l)]);
    for (int k = 0; k < kLinears; ++k) {
      std::vector<ModuleSlot> slots;  // the chosen modules of Linear k
      for (const ModuleSlot& s : mods)
        if (s.linear == k && chosen.count(module_in_block(s.path))) slots.push_back(s);
      linear_layout(c, *lins[size_t(k)], slots, !m.cut.whole, m, *lists[size_t(k)]);
    }
    expert_layout(c, mods, chosen, m, ba.experts);
  }
}

}  // namespace zt
