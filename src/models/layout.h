// layout.h: where each layer's parameters sit in the flat buffer, per architecture, and
// the model's units. gpt2.cpp and llama.cpp fill a ParamTable with HF names and return
// the slots; model_layout() adds the unit list. Offsets are in elements; -1 = "absent".
//
// Units are the granularity everything outside the model cuts along: DP buckets, ZeRO
// shards and gathers, checkpoints, the memory estimator, pipeline stages and offload windows. A unit is a contiguous
// range of the flat layout holding whole parameters: the embeddings, one block each, and the head (final norm + untied
// LM head). Code finds a unit by its kind and layer, never by index arithmetic.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/nf4.h"
#include "models/config.h"
#include "models/params.h"
#include "nn/block.h"

namespace zt {

struct LinearOffsets {
  int64_t w = -1, b = -1;
  int in = 0, out = 0;
  bool w_in_out = false;
  nn::LinearKind kind = nn::LinearKind::plain;
};
struct NormOffsets {
  int64_t w = -1, b = -1;
};
// A mixture-of-experts MLP (nn/moe.h): the router, the experts back to back (expert e's [gate; up]
// (2F, C) then down (C, F) at experts + e * 3 F C), and Qwen2-MoE's shared expert and its gate.
struct MoeOffsets {
  LinearOffsets router;
  int64_t experts = -1;
  LinearOffsets shared_in, shared_out, shared_gate;  // absent (w = -1) without a shared expert
};
struct BlockOffsets {
  NormOffsets ln1, ln2;
  LinearOffsets qkv, proj, fc_in, fc_out;
  NormOffsets q_norm, k_norm;  // Qwen3: per-head RMSNorm of q and k, (HS); OLMo-2: (NH HS), (KVH HS)
  NormOffsets post1, post2;    // OLMo-2: RMSNorm on attention's / the MLP's output, (C); absent otherwise
  MoeOffsets moe;              // MoE families (config.moe.on()): the MLP; fc_in / fc_out absent
  int64_t begin = -1;          // the block's first element (its first norm's, or OLMo-2's q_proj)
};
struct ModelOffsets {
  int64_t wte = -1, wpe = -1;
  int64_t lm_head = -1;  // -1: tied to wte
  NormOffsets lnf;
  std::vector<BlockOffsets> blocks;
  nn::BlockShape shape{};
};

// The part of each layer a layout holds, by what the layer is: column layers (LinearKind::column)
// hold some of their outputs, row layers the matching inputs, the embedding and LM head some
// rows of the vocabulary. The default is every layer whole (one device). A strategy that cuts
// layers across devices computes a device's part (parallel/tensor_parallel.h); the layouts lay
// out exactly the sizes given here, and never compute a cut themselves.
struct LayerCut {
  bool whole = true;  // every layer whole; the fields below are then filled from the config
  // Held: query heads [heads_begin, + heads), key/value heads [kv_heads_begin, + kv_heads), MLP
  // hidden units [ffn_begin, + ffn). kv_holders: consecutive parts holding the same key/value
  // heads (more parts than key/value heads).
  int heads = 0, heads_begin = 0, kv_heads = 0, kv_heads_begin = 0, kv_holders = 1, ffn = 0, ffn_begin = 0;
  // Embedding / LM head rows [vocab_begin, + vocab_rows); rows past the vocabulary are zero padding.
  int vocab_rows = 0, vocab_begin = 0;
  // Whether this part adds the row layers' biases (they are whole: one part adds them, once in
  // the sum of the parts' outputs).
  bool adds_row_biases = true;
  int rows_split = 1;  // the residual stream's rows are split this many ways (nn::BlockShape::sp)
  // Of the held vocabulary rows, the real ones (none past the vocabulary).
  int vocab_valid(int V) const { return std::max(0, std::min(V - vocab_begin, vocab_rows)); }
  // Expert parallelism (independent of `whole`, which is tensor parallelism's): each MoE layer's
  // routed experts [experts_begin, + experts) are held; 0: every expert.
  int experts = 0, experts_begin = 0;
  // Tensor parallelism of a mixture-of-experts layer (parallel/tensor_parallel.h): the shared
  // expert's hidden units [shared_ffn_begin, + shared_ffn) held (0: all of them).
  int shared_ffn = 0, shared_ffn_begin = 0;
};
// The whole model's cut: every layer whole (the sizes of `c`), rows unsplit.
LayerCut whole_layers(const ModelConfig& c);
// `given`, or when it is whole the sizes of `c` with given's experts: what a layout lays out.
LayerCut resolve_cut(const ModelConfig& c, const LayerCut& given);

// The architectures' tables (model_layout adds the units); `cut` whole: the one-device layout.
ModelOffsets gpt2_layout(const ModelConfig& c, ParamTable& t, const LayerCut& cut = {});
ModelOffsets llama_layout(const ModelConfig& c, ParamTable& t, const LayerCut& cut = {});

// LoRA (models/lora.cpp): one HF module's adapter inside a layer's Linear, which may fuse several
// modules (Llama's q/k/v, gate/up): its outputs [out_begin, + out_size). A (r, in) and B
// (out_size, r) are offsets into the adapter table; a Linear's parts' A's are back to back, so
// one GEMM computes every part's x A^T.
struct AdapterPart {
  std::string module;              // the HF module path, e.g. "model.layers.0.self_attn.q_proj"
  int64_t a = -1, b = -1;          // IA3: a is the vector ia3_l, b unused
  int64_t m = -1;                  // DoRA: the magnitude vector (out_size)
  int in_whole = 0, in_begin = 0;  // a row-parallel cut's inputs within the whole layer's
  int out_begin = 0, out_size = 0;
  bool feedforward = false;  // IA3: the vector scales the module's input (1, in), not its outputs
  // Its tensor-parallel role (ModuleSlot::kind): column modules hold some outputs, row modules some
  // inputs, plain ones (a mixture of experts' router and shared-expert gate) are whole everywhere.
  nn::LinearKind kind = nn::LinearKind::plain;
};
// LoRA on a mixture of experts' routed experts (nn::MoeExpertLora's layout): per held expert one block
// of `stride` elements, the first held expert's at `first`; gate / up / down: the modules adapted
// (Mixtral's w1 / w3 / w2, Qwen-MoE's gate_proj / up_proj / down_proj), every expert alike.
struct ExpertAdapters {
  bool gate = false, up = false, down = false;
  int64_t first = -1, stride = 0;
  bool on() const { return gate || up || down; }
};
// Which Linear a ModuleSlot's `linear` names: a block's four, then a mixture of experts' router,
// shared expert [gate; up], its down and its gate; then the routed experts' [gate; up] and down.
enum : int {
  kLinQkv,
  kLinProj,
  kLinFcIn,
  kLinFcOut,
  kLinRouter,
  kLinSharedIn,
  kLinSharedOut,
  kLinSharedGate,
  kLinears
};
enum : int { kExpertIn = kLinears, kExpertDown };
struct BlockAdapters {
  std::vector<AdapterPart> qkv, proj, fc_in, fc_out;
  std::vector<AdapterPart> router, sh_in, sh_out, sh_gate;  // mixture of experts (all-linear, or named)
  ExpertAdapters experts;
  int64_t begin = 0;  // the block's first adapter element
  // The adapted Linears' parts, indexed as ModuleSlot::linear (kLinQkv ... kLinSharedGate).
  std::array<const std::vector<AdapterPart>*, kLinears> linears() const {
    return {&qkv, &proj, &fc_in, &fc_out, &router, &sh_in, &sh_out, &sh_gate};
  }
  std::array<std::vector<AdapterPart>*, kLinears> linears() {
    return {&qkv, &proj, &fc_in, &fc_out, &router, &sh_in, &sh_out, &sh_gate};
  }
};
// A block's Linears' offsets in the same order (absent MoE ones have w = -1).
inline std::array<const LinearOffsets*, kLinears> linear_offsets(const BlockOffsets& b) {
  return {&b.qkv, &b.proj, &b.fc_in, &b.fc_out, &b.moe.router, &b.moe.shared_in, &b.moe.shared_out, &b.moe.shared_gate};
}
// The modules a block's Linears hold, in HF's order: (module name, which Linear: 0 qkv, 1 proj,
// 2 fc_in, 3 fc_out, out_begin, out_size), for layer l.
struct ModuleSlot {
  std::string path;
  int linear;
  int out_begin, out_size;
  // Under a tensor-parallel cut (block_modules' `cut`): a column layer's module holds outputs
  // [held_begin, + out_size) of its out_whole (GPT-2's c_attn: that of each of its 3 parts); a row
  // layer's holds inputs [held_begin, + in) of in_whole. Whole: held_begin 0, the sizes the same.
  int out_whole = 0, in_whole = 0, held_begin = 0, parts = 1;
  // Runs of `replicas` consecutive tensor-parallel ranks hold the same outputs (k / v with more
  // ranks than key/value heads: ParamInfo::split_replicas).
  int replicas = 1;
  // Parts of unequal size (Phi-3's qkv_proj under grouped-query attention): ParamInfo's list.
  std::vector<ParamInfo::Part> part_list;
  nn::LinearKind kind = nn::LinearKind::plain;  // the module's tensor-parallel role
  int expert = -1;                              // a routed expert's module (kExpertIn / kExpertDown): which
};
std::vector<ModuleSlot> block_modules(const ModelConfig& c, int l, const LayerCut& cut = {});
// A module's path within its block: after "transformer.h.<l>." or "model.layers.<l>.".
std::string module_in_block(const std::string& path);
// PEFT's target_modules resolved against layer 0's modules: the last dotted parts chosen (in
// block order); an Error naming an unknown target and listing the valid names.
std::vector<std::string> lora_resolve_targets(const ModelConfig& c);
// IA3 (cfg.lora.ia3()): the targets whose input is scaled (feedforward_modules, PEFT's default for
// the family when no targets are named), checked to be targets that own their Linear alone.
std::vector<std::string> ia3_feedforward_modules(const ModelConfig& c);

enum class UnitKind { embedding, block, head };
const char* unit_kind_name(UnitKind k);

struct Unit {
  UnitKind kind = UnitKind::block;
  int layer = -1;              // blocks: 0..L-1; -1 otherwise
  std::vector<int> params;     // indices into ParamTable::list(), in table order
  int64_t begin = 0, end = 0;  // elements of the flat layout, [begin, end)
  int64_t size() const { return end - begin; }
};

// Everything about a model's parameters that does not need their values: the table, the
// slots the layers bind to, and the units in forward order (embedding, blocks, head).
struct ModelLayout {
  ParamTable table;
  ModelOffsets offsets;
  std::vector<Unit> units;
  int embedding_unit = -1, head_unit = -1;
  std::vector<int> block_units;  // unit index of block l
  // The LM head reuses the token embedding (GPT-2; Llama with tie_word_embeddings): the head
  // unit then has no LM-head weight and the embedding unit is used again after the blocks.
  bool tied_head = true;
  // The unit whose parameters hold the LM-head weight.
  int lm_head_unit() const { return tied_head ? embedding_unit : head_unit; }
  LayerCut cut;        // the part of each layer this layout holds (whole: all of it)
  int vocab_rows = 0;  // rows of the embedding / LM head held (V when whole)
  // LoRA (ModelConfig::lora): the base model's parameters sit in base_table, frozen (no
  // gradients, no optimizer state), and `offsets` index it; `table` and the units hold only
  // the adapters (a block unit: its layer's; the embedding and head units are empty).
  bool frozen_base = false;
  ParamTable base_table;
  std::vector<BlockAdapters> adapters;  // per block
};
// `cut` whole (the default): the one-device layout.
ModelLayout model_layout(const ModelConfig& c, const LayerCut& cut = {});
// DoRA: the magnitude vectors' starting values (the frozen base's weight rows' norms, B being zero)
// at flat adapter elements [begin, begin + n) into dst; `base` the fp32 frozen base.
// A cut layout's row layers hold slices of every weight row: slice_sum (null: whole rows) sums their
// squared norms over the ranks holding the other slices, a collective (they call with the same ranges).
// QLoRA (nf4: 4 per block, Transformer's): the norms of the NF4 weights' dequantized rows.
void dora_magnitudes(const ModelLayout& m, const float* base, int64_t begin, int64_t n, float* dst,
                     const std::function<void(float*, int64_t)>* slice_sum = nullptr,
                     const std::vector<kernels::Nf4View>* nf4 = nullptr);

}  // namespace zt
