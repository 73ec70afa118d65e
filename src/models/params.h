// params.h: the parameter table. Every parameter is a named, typed view description (HF
// name, shapes, dtype, how it is split across ranks, offset) into one flat buffer;
// gradients and optimizer state use the same offsets in their own flat buffers.
// Data-parallel buckets, ZeRO shards and checkpoints are ranges of these buffers, so the
// table is the single source of layout truth.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace zt {

// lora_a: PEFT's default for lora_A, kaiming_uniform_(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)).
// dora_magnitude: DoRA's magnitude vector, the row norms of the frozen base weight it adapts
// (Transformer::init_values computes them from the base).
enum class ParamInit { normal, residual_normal, zeros, ones, lora_a, dora_magnitude };

// How a parameter is cut across the ranks of a tensor-parallel group.
// none: every rank holds all of it; column: the output dimension is split (each rank
// computes a slice of the outputs); row: the input dimension is split (partial sums, reduced
// after the GEMM); vocab: the rows of an embedding / LM head. (Expert parallelism cuts no
// tensor: a rank holds some experts' tensors whole, ParamInfo::expert.)
enum class Split { none, column, row, vocab };

struct ParamInfo {
  std::string name;                   // HF name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;         // what this rank holds (local)
  std::vector<int64_t> global_shape;  // the whole tensor as HF stores it
  DType dtype = DType::f32;           // of the master copy in the flat buffer
  Split split = Split::none;
  int split_dim = -1;        // dimension of global_shape that is cut (-1: none)
  int64_t split_offset = 0;  // first index along split_dim that this rank holds
  // Fused tensors (GPT-2's c_attn: q, k and v stacked along split_dim) are cut per part: the
  // split dim is split_parts equal parts and this rank holds [split_offset, + local) of each.
  int split_parts = 1;
  // Grouped-query attention with more TP ranks than KV heads: runs of split_replicas
  // consecutive TP ranks hold the same slice (rank r holds slice r / split_replicas).
  int split_replicas = 1;
  // Fused tensors whose parts differ in size (Phi-3's qkv_proj adapters under grouped-query
  // attention): per part along split_dim, its whole size, the rows this rank holds and where they
  // start in the part. Empty: split_parts equal parts.
  struct Part {
    int64_t whole = 0, held = 0, begin = 0;
  };
  std::vector<Part> split_part_list;
  int64_t offset = 0;  // elements into the flat buffer
  int64_t numel = 0;   // local elements
  ParamInit init = ParamInit::normal;
  int unit = -1;  // index into the model's unit list (layout.h)
  // The tensor's index in the whole model's table (one device, every expert): its random stream,
  // so a layout holding some experts draws the values one process would.
  int stream = 0;
  // A routed expert's tensor: under expert parallelism only its expert's rank holds it (whole).
  bool expert = false;
  // AdamW decay applies to tensors of rank >= 2 only (HF Trainer / nanoGPT convention).
  bool decay() const { return shape.size() >= 2; }
  size_t bytes() const { return size_t(numel) * dtype_size(dtype); }
};

// Calls f(global element, local element, count) for each contiguous run of a rank's slice of
// p (cut as p says, starting at `offset` along the split dim: p.split_offset for this rank) that
// exists in the global tensor (vocabulary padding rows have none). Unsplit: one run, all of it.
template <class F>
void for_each_slice_run(const ParamInfo& p, int64_t offset, F f) {
  if (p.split == Split::none) {
    f(int64_t(0), int64_t(0), p.numel);
    return;
  }
  const size_t d = size_t(p.split_dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= p.global_shape[i];
  for (size_t i = d + 1; i < p.global_shape.size(); ++i) inner *= p.global_shape[i];
  if (!p.split_part_list.empty()) {  // unequal parts: each part's held rows, the offset is theirs
    for (int64_t o = 0; o < outer; ++o) {
      int64_t g = o * p.global_shape[d], l = o * p.shape[d];
      for (const ParamInfo::Part& q : p.split_part_list) {
        f((g + q.begin) * inner, l * inner, q.held * inner);
        g += q.whole;
        l += q.held;
      }
    }
    return;
  }
  const int64_t parts = p.split_parts, g_part = p.global_shape[d] / parts, l_part = p.shape[d] / parts;
  const int64_t rows = g_part - offset < 0 ? 0 : g_part - offset < l_part ? g_part - offset : l_part;
  if (rows == 0) return;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < parts; ++k)
      f(((o * parts + k) * g_part + offset) * inner, (o * parts + k) * l_part * inner, rows * inner);
}

class ParamTable {
 public:
  // Appends a parameter right after the previous one (no padding, so tensors added in
  // sequence form one contiguous matrix, e.g. Llama's q/k/v projections). With the
  // identity shard plan (one rank), the local shape is the global one.
  int64_t add(const std::string& name, std::vector<int64_t> shape, ParamInit init);
  // A tensor-parallel slice: `shape` is what this rank holds of `global_shape`, cut along
  // `dim` (in split_parts equal parts) starting at `split_offset` (see ParamInfo).
  int64_t add_split(const std::string& name, std::vector<int64_t> shape, std::vector<int64_t> global_shape, Split split,
                    int dim, int64_t split_offset, ParamInit init, int parts = 1);
  // Tensors of the whole model this table does not hold (other ranks' experts): the next tensor
  // added keeps the whole table's stream index.
  void skip(int tensors) { next_stream_ += tensors; }
  const ParamInfo* find(const std::string& name) const;
  const std::vector<ParamInfo>& list() const { return params_; }
  std::vector<ParamInfo>& mutable_list() { return params_; }
  int64_t total() const { return total_; }

 private:
  std::vector<ParamInfo> params_;
  // find's index (names are never changed through mutable_list): a large mixture of experts has tens
  // of thousands of tensors, and checkpoints look each piece up by name.
  std::unordered_map<std::string, size_t> by_name_;
  int64_t total_ = 0;
  int next_stream_ = 0;
};

}  // namespace zt
