// tensor_parallel.h: Megatron-style tensor parallelism (and sequence parallelism on top of
// it) applied to the single-device Transformer from outside: the model is built with a rank's
// LayerCut (tensor_parallel_cut below; models/layout.h lays out the slices it gives), and
// TensorParallel is the TpRegion (nn/block.h) through which its pass meets the grid's tp group. Helpers move
// parameters between a whole (global) model and a rank's slices, and sum the gradients of
// replicated tensors whose gradient each rank only holds part of. docs/parallelism-tp.md
// has the scheme, the bytes per layer and the measurements.
// It deliberately is not: a data-parallel engine (DP / ZeRO run on the grid's dp group over
// each TP rank's local parameters), or a checkpoint format (TpStateAdapter only restates a
// rank's pieces in the global tensors' coordinates; the checkpointer stores them).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/state.h"
#include "dist/communicator.h"
#include "models/transformer.h"
#include "nn/block.h"
#include "nn/embedding_head.h"

namespace zt::parallel {

class TensorParallel final : public nn::TpRegion {
 public:
  // kv_replicas > 1 (grouped-query attention, TP > KV heads): runs of that many ranks share
  // each KV head; their group (kv_group()) sums those heads' gradients. A collective.
  TensorParallel(dist::Communicator& tp, bool sequence_parallel, int kv_replicas = 1);
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  bool sequence_parallel() const override { return sp_; }
  void column_parallel_input(TensorView full) override;
  void row_parallel_output(TensorView out, TensorView partial) override;
  void column_parallel_input_grad(TensorView out, TensorView grad) override;
  void row_parallel_output_grad(TensorView full, TensorView local) override;
  void all_reduce_max(float* x, int64_t n) override;
  void all_reduce_sum(float* x, int64_t n) override;
  dist::Communicator& comm() const { return comm_; }
  dist::Communicator* kv_group() const { return kv_.get(); }

 private:
  dist::Communicator& comm_;
  bool sp_;
  std::unique_ptr<dist::Communicator> kv_;
};

// The vocabulary-parallel ends of the model, swapped in for nn::Embedding / nn::LmHeadLoss:
// each rank holds rows [v0, v0 + nv) of the vocabulary (models/layout.h's cut; padded rows
// masked). The embedding looks up the tokens it holds rows for (zeros elsewhere), rank 0 adds
// the positions, and the group's sum (g) is the embedding. The LM head keeps the logits split
// and reduces their max and sum of exp over the group; its input passes through f.
class VocabParallelEmbedding final : public nn::Embedding {
 public:
  VocabParallelEmbedding(TensorParallel& region, int v0, int nv) : tp_(region), v0_(v0), nv_(nv) {}
  void forward(TensorView out, const float* wte, const float* wpe, const nn::EmbeddingPass& p) const override;
  void backward(float* dwte, float* dwpe, TensorView dy, const nn::EmbeddingPass& p) const override;

 private:
  TensorParallel& tp_;
  int v0_, nv_;
};

class VocabParallelLmHead final : public nn::LmHeadLoss {
 public:
  VocabParallelLmHead(TensorParallel& region, int v0, int nv) : tp_(region), v0_(v0), nv_(nv) {}
  TensorView local_rows(TensorView full) const override { return tp_.local_rows(full); }
  void input_ready(TensorView x) const override { tp_.column_parallel_input(x); }
  double forward(float* dx, float* dw, const float* x, const float* w, const int32_t* targets, const nn::LmHeadPass& p,
                 int64_t* count) const override;
  void input_grad(TensorView out, TensorView grad) const override { tp_.column_parallel_input_grad(out, grad); }

 private:
  TensorParallel& tp_;
  int v0_, nv_;
};

// A tensor-parallel rank's cut of the model (Megatron's scheme, docs/parallelism-tp.md):
// attention heads and the MLP's hidden units split across `size` ranks, the vocabulary in rows
// of ceil(V / size) (the last rank's padded with zero rows, masked), norms and row layers'
// biases whole (rank 0 adds those biases). More ranks than key/value heads: each rank holds the
// one KV head its query heads use, shared by runs of size / KV heads ranks. sequence_parallel:
// the residual stream's rows are split too. size 1: the whole model. Throws zt::Error naming
// the numbers when the model does not cut so.
LayerCut tensor_parallel_cut(const ModelConfig& c, int size, int rank, bool sequence_parallel);

// Parameters (indices into the local ParamTable) whose gradient each TP rank holds only a
// part of although the tensor is replicated: the per-head q/k norms (each rank's heads),
// and under sequence parallelism every norm (each rank's rows). Their gradients are summed
// over the tp group once per step (sum_partial_grads).
std::vector<int> tp_partial_grad_params(const ModelLayout& layout);
// Calls sum(param, grads, n) for each gradient piece a DP engine holds: the caller all-reduces
// the pieces of `params` over a group (one message): the tp group's partial sums, and expert
// parallelism's dense tensors over the expert group (parallelize.cpp).
using GradPieces = std::function<void(const std::function<void(int param, float* g, int64_t n)>&)>;
void sum_partial_grads(dist::Communicator& group, const std::vector<int>& params, const GradPieces& pieces);

// Parameters held by several TP ranks at once (split_replicas > 1: replicated KV heads); each
// rank computes part of their gradient (from its query heads), summed over kv_group().
std::vector<int> tp_replicated_params(const ParamTable& table);

// Weight of each parameter's squared gradient in the global norm on one TP rank: 1 for a
// split tensor (each rank holds a different part), 1 / tp for a replicated one (counted
// once over the group; 1 / replicas for a KV head held by that many ranks).
std::vector<double> tp_norm_weights(const ParamTable& local_table, int tp_size);

// Tensor parallelism's traffic per optimizer step, from the tp group's counters (it carries
// nothing else): calls, payload and bus bytes per collective kind, and bus_bytes_per_step
// (docs/parallelism-tp.md has the formulas the distributed tests check these against). Under a
// pipeline (`pp` not null, a collective over it) also every stage's bus bytes per step
// (bus_bytes_per_step_per_stage): a stage's TP group carries only its layers' traffic.
nlohmann::json tp_comm_report(const dist::Communicator& tp, dist::Communicator* pp, bool sp, int64_t steps);

// Checkpoints under tensor parallelism in the global layout: wraps a component so that each
// piece of a split tensor (this rank's slice, or a ZeRO shard of it: a range of the local
// tensor) is stored as the runs of the *global* tensor it covers, under the HF name and global
// shape, written by the first rank holding that slice; replicated tensors are written once, by
// TP rank 0. Loading maps back the same way, and the checkpoint reader assembles any slice from
// any stored pieces, so a checkpoint saved at one TP size (and DP size, ZeRO stage) resumes at
// any other, and one process's checkpoint resumes under TP. The TP size is recorded
// ("ztrain.tensor_parallel_size", write_meta) for information.
class TpStateAdapter final : public Stateful {
 public:
  TpStateAdapter(Stateful& inner, const ParamTable& local, int tp_rank, int tp_size, bool write_meta);
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;
  // Whether this rank writes tensor `name`'s pieces; a piece of the local tensor as pieces of
  // the global one (itself when the tensor is not split).
  bool writes(const std::string& name) const;
  void to_global(const StatePiece& piece, const std::function<void(const StatePiece&)>& f) const;

 private:
  const ParamInfo* split_param(const std::string& name) const;
  Stateful& inner_;
  const ParamTable& table_;
  int rank_, size_;
  bool meta_;
};
constexpr const char* kTpSizeKey = "ztrain.tensor_parallel_size";

}  // namespace zt::parallel
