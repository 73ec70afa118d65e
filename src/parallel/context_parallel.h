// context_parallel.h: context parallelism (Megatron's --context-parallel-size) on the grid's
// cp group: each of its P ranks holds 2 of the 2P equal chunks of every sequence, chunk r and
// chunk 2P - 1 - r (zigzag), so every rank has the same causal attention work. Everything but
// attention is per token and runs unchanged on the rank's T / P rows; attention is ring
// attention: the K / V blocks travel around the cp ring (non-blocking send / receive
// overlapping the block compute), each block's partial output is merged into the rows' output
// by its log-sum-exp (online softmax), and in backward the dK / dV of each block travel on
// around the ring back to their owner. docs/parallelism-cp.md has the scheme, the bytes per
// layer and the measurements.
// It deliberately is not: a data-parallel engine (the cp ranks act as extra data-parallel
// ranks for the parameter gradients: the DP / ZeRO engines reduce and shard over the grid's
// dp x cp groups), a data loader (every rank of a cp group reads the same rows; shard() keeps
// this rank's chunks), or a packing mask (refused with cp > 1). A layer's sliding window
// (AttnDims::window) is masked by global positions: the diagonal block through attention.h's
// doc_start, each remote block through attention_block.h's first visible key per query; a block
// the window hides wholly is skipped (its K / V still pass on).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "dist/communicator.h"
#include "kernels/attention.h"
#include "nn/block.h"

namespace zt::parallel {

// Evaluation under context parallelism: the model runs on this rank's part of each row, so each
// batch of (B, T) rows is cut to it before the forward (shard replaces the pointers), and the
// loss sum and token count, {sum, tokens}, are summed over the cp group (reduce) at the end.
struct EvalShard {
  std::function<void(const int32_t** inputs, const int32_t** targets, const int32_t** positions)> shard;
  std::function<void(double* sum_tokens)> reduce;
};

class ContextParallel final : public nn::CpRegion {
 public:
  // T: the whole sequence's tokens per row; 2 cp.size() must divide it (check_cp_seq_len).
  ContextParallel(dist::Communicator& cp, int T);
  int size() const { return comm_.size(); }
  int rank() const { return comm_.rank(); }
  int local_T() const { return T_ / size(); }
  // The global position of this rank's row t of a sequence (0 <= t < local_T()).
  int global_position(int t) const;
  // This rank's part of a (B, T) micro-batch: its rows of inputs and targets and their global
  // positions, (B, T / P) each, valid until the next shard() of the same slot (a pipeline keeps
  // one slot per micro-batch in flight). targets may be null.
  struct Shard {
    const int32_t* inputs;
    const int32_t* targets;
    const int32_t* positions;
  };
  Shard shard(const int32_t* inputs, const int32_t* targets, int B, int slot = 0);

  void attention_forward(float* out, float* lse, const float* qkv, const kernels::AttnDims& d) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                          const kernels::AttnDims& d) override;

  // Bytes one rank sends (and receives) over the cp group per layer and micro-batch of B rows
  // of T tokens: 3 (P - 1) K / V blocks of B (T / P) 2 KVH HS fp32 values (forward: P - 1
  // K / V blocks; backward: P - 1 K / V blocks and P - 1 dK / dV blocks).
  static double ring_bytes_per_layer(int B, int T, int P, int KVH, int HS);
  int sequence_length() const override { return T_; }

 private:
  // A sliding window W's bounds (window_ > 0): diag_ (B, local T) the first local key each local
  // row sees among this rank's own rows (attention.h's doc_start), built per (W, B); first_ the
  // first key of `owner`'s block each of the block's query rows sees. Returns null when the
  // window hides none of that block's keys; *hidden: it hides all of them.
  const int32_t* diag_bounds(int W, int B);
  const int32_t* block_bounds(int W, int owner, int q0, int nq, int nk, bool* hidden);
  // The ring's buffers, grown on first use and kept (the pass's largest layer sizes them):
  // two K / V blocks; forward: a block's output and lse; backward: two dK / dV accumulators, D.
  void ensure(size_t kv_elems, size_t out_elems, size_t lse_elems, bool backward);
  dist::Communicator& comm_;
  int T_;
  struct Rows {
    std::vector<int32_t> in, tg, pos;
  };
  std::vector<Rows> rows_;  // per slot
  std::vector<float> kv_[2], acc_[2], out_blk_, lse_blk_, D_;
  std::vector<int32_t> diag_, first_;
  int diag_W_ = 0, diag_B_ = 0;
};

// One clear error when T does not split into 2 cp equal chunks.
void check_cp_seq_len(int T, int cp);
// What context parallelism does not run with yet, one error line each: T not in 2 cp equal chunks,
// --packing, evaluation with pipeline stages. The trainer's check_cp_args and the planner's
// layout_refusal both ask it.
void check_cp_composes(int T, int cp, bool packing, bool validation, int pp);

}  // namespace zt::parallel
