// layout.h: where each layer's parameters sit in the flat buffer, per architecture, and
// the model's units. gpt2.cpp and llama.cpp fill a ParamTable with HF names and return
// the slots; model_layout() adds the unit list. Offsets are in elements; -1 = "absent".
//
// Units are the granularity everything outside the model cuts along: DP buckets, ZeRO
// shards and gathers, checkpoints, the memory estimator, and (later) pipeline stages and
// offload windows. A unit is a contiguous range of the flat layout holding whole
// parameters: the embeddings, one block each, and the head (final norm + untied LM head).
// Code finds a unit by its kind and layer, never by index arithmetic.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

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
struct BlockOffsets {
  NormOffsets ln1, ln2;
  LinearOffsets qkv, proj, fc_in, fc_out;
  NormOffsets q_norm, k_norm;  // Qwen3: per-head RMSNorm of q and k, (HS); OLMo-2: (NH HS), (KVH HS)
  NormOffsets post1, post2;    // OLMo-2: RMSNorm on attention's / the MLP's output, (C); absent otherwise
  int64_t begin = -1;          // the block's first element (its first norm's, or OLMo-2's q_proj)
};
struct ModelOffsets {
  int64_t wte = -1, wpe = -1;
  int64_t lm_head = -1;  // -1: tied to wte
  NormOffsets lnf;
  std::vector<BlockOffsets> blocks;
  nn::BlockShape shape{};
};

// How a tensor-parallel rank cuts the model (Megatron's scheme, docs/parallelism-tp.md):
// attention heads and the MLP's hidden units split across `size` ranks, the vocabulary split
// in rows of vocab_local() (the last rank's slice padded), norms and row-parallel biases
// replicated. With size 1 (the identity plan) the layouts are the single-device ones.
// sp: sequence parallel (the residual stream's rows are split across the ranks too).
struct TpPlan {
  int size = 1, rank = 0;
  bool sp = false;
  // Rows of the vocabulary each rank holds: ceil(V / size) (padded rows are zeros and masked).
  int vocab_local(int V) const { return (V + size - 1) / size; }
  int vocab_begin(int V) const { return rank * vocab_local(V); }
  // Of those, the real ones (the last rank may hold fewer, or none).
  int vocab_valid(int V) const { return std::max(0, std::min(V - vocab_begin(V), vocab_local(V))); }
  // Grouped-query attention: KV heads per rank, and how many consecutive ranks share each
  // (more ranks than KV heads: each rank holds the one head its query heads use, replicated).
  int kv_heads_local(int KVH) const { return KVH >= size ? KVH / size : 1; }
  int kv_replicas(int KVH) const { return KVH >= size ? 1 : size / KVH; }
};
// Checks that a plan can cut the model; throws zt::Error naming the numbers.
void check_tp_plan(const ModelConfig& c, const TpPlan& tp);

ModelOffsets gpt2_layout(const ModelConfig& c, ParamTable& t, const TpPlan& tp = {});
ModelOffsets llama_layout(const ModelConfig& c, ParamTable& t, const TpPlan& tp = {});

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
  TpPlan tp;            // the tensor-parallel cut this layout is (identity: one rank)
  int vocab_local = 0;  // rows of the embedding / LM head held (V at tp 1)
};
ModelLayout model_layout(const ModelConfig& c, const TpPlan& tp = {});

}  // namespace zt
