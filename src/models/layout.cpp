// layout.cpp: the unit list over an architecture's parameter table (see layout.h).
#include "models/layout.h"

#include "core/error.h"

namespace zt {

const char* unit_kind_name(UnitKind k) {
  switch (k) {
    case UnitKind::embedding:
      return "embedding";
    case UnitKind::block:
      return "block";
    case UnitKind::head:
      return "head";
  }
  return "?";
}

LayerCut whole_layers(const ModelConfig& c) {
  LayerCut w;
  w.heads = c.n_head;
  w.kv_heads = c.n_kv_head;
  w.ffn = c.ffn;
  w.vocab_rows = c.vocab_size;
  w.experts = c.moe.num_experts;
  return w;
}

LayerCut resolve_cut(const ModelConfig& c, const LayerCut& given) {
  LayerCut r = given.whole ? whole_layers(c) : given;
  if (given.experts > 0) r.experts = given.experts, r.experts_begin = given.experts_begin;
  if (r.experts == 0) r.experts = c.moe.num_experts;
  return r;
}

void lora_layout(const ModelConfig& c, ModelLayout& m);  // lora.cpp

namespace {
// LoRA: the adapter table's units (the base's table is frozen and has none): the embedding and
// head units empty, each block unit its layer's adapters.
void adapter_units(ModelLayout& m) {
  ParamTable& t = m.table;
  m.units.push_back({UnitKind::embedding, -1, {}, 0, 0});
  m.embedding_unit = 0;
  const int64_t total = t.total();
  for (size_t l = 0; l < m.adapters.size(); ++l) {
    const int64_t begin = m.adapters[l].begin;
    const int64_t end = l + 1 < m.adapters.size() ? m.adapters[l + 1].begin : total;
    m.units.push_back({UnitKind::block, int(l), {}, begin, end});
    m.block_units.push_back(int(m.units.size()) - 1);
  }
  m.units.push_back({UnitKind::head, -1, {}, total, total});
  m.head_unit = int(m.units.size()) - 1;
  // The adapter units tie nothing: the base's LM head (tied or not, by its offsets) is frozen and
  // read from the frozen buffer, so no unit is acquired twice and no stage pair shares gradients.
  m.tied_head = false;
  auto& list = t.mutable_list();
  size_t u = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    while (list[i].offset >= m.units[u].end) ++u;
    list[i].unit = int(u);
    m.units[u].params.push_back(int(i));
  }
}
}  // namespace

ModelLayout model_layout(const ModelConfig& c, const LayerCut& cut) {
  ModelLayout m;
  m.cut = resolve_cut(c, cut);
  m.vocab_rows = m.cut.vocab_rows;
  m.frozen_base = c.lora.enabled();
  ParamTable& base = m.frozen_base ? m.base_table : m.table;
  m.offsets = c.arch == Arch::gpt2 ? gpt2_layout(c, base, m.cut) : llama_layout(c, base, m.cut);
  ModelOffsets& s = m.offsets;
  // What each GEMM is (Megatron's pairing, which a cut follows): the first of each sub-layer
  // a column layer (its outputs can be cut), the second a row layer (its inputs), so one
  // reduction ends each.
  for (BlockOffsets& b : s.blocks) {
    b.qkv.kind = b.fc_in.kind = nn::LinearKind::column;
    b.proj.kind = b.fc_out.kind = nn::LinearKind::row;
  }
  if (m.frozen_base) {
    lora_layout(c, m);
    adapter_units(m);
    return m;
  }
  // Both layouts add the embeddings, then block after block (each starting at its
  // begin: its first norm), then the final norm and an untied LM head: units are contiguous ranges.
  const int64_t total = m.table.total();
  auto add = [&](UnitKind kind, int layer, int64_t begin, int64_t end) {
    ZT_ASSERT(begin <= end && end <= total);
    m.units.push_back({kind, layer, {}, begin, end});
    return int(m.units.size()) - 1;
  };
  auto begin = [&](size_t l) { return s.blocks[l].begin >= 0 ? s.blocks[l].begin : s.blocks[l].ln1.w; };
  const int64_t first_block = s.blocks.empty() ? s.lnf.w : begin(0);
  m.embedding_unit = add(UnitKind::embedding, -1, 0, first_block);
  for (size_t l = 0; l < s.blocks.size(); ++l)
    m.block_units.push_back(add(UnitKind::block, int(l), begin(l), l + 1 < s.blocks.size() ? begin(l + 1) : s.lnf.w));
  m.head_unit = add(UnitKind::head, -1, s.lnf.w, total);
  m.tied_head = s.lm_head < 0;
  auto& list = m.table.mutable_list();
  size_t u = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    while (list[i].offset >= m.units[u].end) ++u;
    list[i].unit = int(u);
    m.units[u].params.push_back(int(i));
  }
  return m;
}

}  // namespace zt
