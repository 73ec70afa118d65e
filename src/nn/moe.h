// moe.h: the mixture-of-experts MLP that replaces a block's dense MLP (Mixtral's
// MixtralSparseMoeBlock, Qwen2-MoE / Qwen3-MoE's SparseMoeBlock):
//   p = softmax(x Wr^T) (fp32); the top-k experts per token with weights p (divided by their sum
//   when renorm); y = sum_k w_k expert_k(x) [+ sigmoid(x Wg^T) shared(x)  (Qwen2-MoE)]
// with expert(x) = W_out (silu(W_gate x) * W_up x). Tokens are grouped by expert (a counting sort)
// and each expert's rows go through one GEMM (kernels/moe.h), never a loop over tokens.
// The layer computes in fp32 on the CPU (kernels/dispatch.h refuses the GPU for now); the
// load-balancing and z-losses' gradients come in through MoeLossGrad, set by the model, which sums
// those losses over all layers (they couple the layers: Mixtral's formula takes its means over the
// concatenated layers). Expert parallelism reaches the layer through EpRegion (moe_ep.cpp: the
// exchange sits between the grouping and the grouped GEMMs); the layer never includes dist.
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/moe.h"
#include "nn/layers.h"

namespace zt::nn {

struct MoeShape {
  int C = 0;
  int E = 0;                     // experts (0: a dense MLP, no MoE)
  int K = 0;                     // experts per token
  int F = 0;                     // each expert's hidden width
  int Fs = 0;                    // the shared expert's hidden width (Qwen2-MoE); 0: none
  bool shared_gate = false;      // the shared expert's output times sigmoid(x Wg^T) (Qwen2-MoE)
  bool renorm = true;            // top-k weights divided by their sum (Mixtral; norm_topk_prob)
  double capacity_factor = 0.0;  // > 0: each expert keeps at most ceil(cf N K / E) rows; 0: dropless
  // Experts the layer's views hold: E (0 means E), or its rank's E / size under expert parallelism
  // or tensor parallelism (E / (tp ep) under both), the first of them held_begin. Under tensor
  // parallelism the layer computes its TP block's rows only (its held experts', or under TP x EP
  // those the expert group computes for it) and its output is a partial sum over the TP group.
  int held = 0, held_begin = 0;
  bool on() const { return E > 0; }
  int experts_held() const { return held > 0 ? held : E; }
  // Rows an expert keeps out of N tokens (0: all of them).
  int64_t capacity(int64_t N) const;
  kernels::MoeDims dims(int64_t N) const { return {N, C, E, K}; }
};

// Saved for backward (carved from the activation arena); R = N K grouped rows at most.
struct MoeActs {
  TensorView logits, probs;    // (N, E) router logits and softmax
  TensorView lse;              // (N) log-sum-exp of the logits (z-loss)
  TensorView idx, w;           // (N, K) i32 chosen experts, f32 their weights
  TensorView token_of;         // (R) i32
  TensorView slot_of;          // (N K) i32, -1: dropped
  TensorView offsets;          // (E + 1) i32
  TensorView counts;           // (E) i32: rows each expert kept
  TensorView dropped;          // (1) i64: assignments dropped by the capacity
  TensorView xp, h, act, yp;   // (R, C), (R, 2F), (R, F), (R, C)
  TensorView sh_h, sh_act;     // (N, 2 Fs), (N, Fs): the shared expert
  TensorView sh_out, sh_gate;  // (N, C), (N): its output before the gate, the gate's logits
  // What the model's auxiliary losses and statistics read after the forward (models/moe_loss.cpp),
  // f64 (2 E + 2): the assignments per expert (before any capacity drop), the sum of each expert's
  // probability over the rows, the sum of lse^2, the dropped assignments. Its own per layer even
  // when the rest is shared (full recomputation reruns the forward in backward, after the losses).
  TensorView summary;
};

struct MoeScratch {
  TensorView dyp;             // (R, C): the grouped rows' output gradients, then input gradients
  TensorView dact, dh;        // (R, F), (R, 2F)
  TensorView dlogits, dw;     // (N, E), (N, K)
  TensorView sh_do, sh_dact;  // (N, C), (N, Fs)
  TensorView sh_dh, sh_dg;    // (N, 2 Fs), (N)
  // bf16 runs: the expert GEMMs' bf16 operands, (R, max(C, 2F)) each (rows at their grouped index).
  TensorView lo1, lo2;
};

// The gradients of the model's auxiliary losses at this layer's router: dprob (E) is added to
// every token's d loss / d p (the load-balancing loss), z_grad times d lse^2 / d logits (z-loss).
struct MoeLossGrad {
  const float* dprob = nullptr;
  float z_grad = 0.f;
};

// Where expert parallelism meets the layer (parallel/expert_parallel.h implements it; nn never
// includes dist): the size() ranks of a group each compute El = E / size experts, [rank El, + El),
// for the tokens of all of them (under TP x EP, El = E / (tp size) of this TP rank's block: see
// Moe::spread). exchange_counts sends per_peer ints to each peer (peer order) and
// receives as many from each; exchange_rows sends send_rows[p] rows of C floats (contiguous, in peer
// order) to peer p and receives recv_rows[p] rows from each. Collectives over the group.
class EpRegion {
 public:
  virtual ~EpRegion() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void exchange_counts(const int32_t* send, int32_t* recv, int per_peer) = 0;
  virtual void exchange_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                             int C) = 0;
};

// An expert-parallel layer's expert side, kept from forward to backward: the rows this rank's
// experts received (Rr, sized by what arrived, so held here rather than in the activation arena),
// grouped by local expert, and the orders between that grouping and the peers' blocks.
struct MoeExpertSide {
  std::vector<int64_t> send_rows, recv_rows;  // (P) rows to / from each peer
  std::vector<int32_t> offsets;               // (El + 1): the local experts' row groups
  std::vector<int32_t> to_peer, from_peer;    // (Rr): expert-grouped row <-> the peers' order
  std::vector<float> xe, h, act;              // (Rr, C), (Rr, 2F), (Rr, F): what backward reads
  std::vector<float> stage, ye, dact, dh;     // working rows: (Rr, C) twice, (Rr, F), (Rr, 2F)
  std::vector<uint16_t> lo1, lo2;             // bf16 runs: the GEMMs' bf16 operands, (Rr, max(C, 2F))
};

// LoRA on the routed experts (PEFT's adapters on each expert's w1 / w3 / w2, or gate_proj / up_proj /
// down_proj): per held expert one block of stride() floats, [A_in (parts_in() r, C): the gate's A then
// the up's | B_gate (F, r) | B_up (F, r) | A_down (r, F) | B_down (C, r)], the modules not adapted
// absent. The adapters' GEMMs are fp32 (bf16 runs too: the layer's inputs and outputs are fp32 and
// r is small). The temporaries live in `scratch` (sized by the rows of each call, which under
// expert parallelism is what arrived).
struct MoeLoraScratch {
  std::vector<float> h, g, xd, dxd;
  float* take(std::vector<float>& v, int64_t n);
};
struct MoeExpertLora {
  int r = 0;
  float scale = 0.f, dropout = 0.f;  // dropout: this pass's (0 in evaluation)
  uint64_t seed = 0;                 // the dropout masks', fixed for a pass and a layer
  bool gate = false, up = false, down = false;
  TensorView p, g;  // (held experts, stride): the adapters and their gradients (empty: none)
  MoeLoraScratch* scratch = nullptr;
  bool on() const { return r > 0; }
  int parts_in() const { return int(gate) + int(up); }
  int64_t b_in(int C) const { return int64_t(parts_in()) * r * C; }
  int64_t a_down(int C, int F) const { return b_in(C) + int64_t(parts_in()) * F * r; }
  int64_t b_down(int C, int F) const { return a_down(C, F) + (down ? int64_t(r) * F : 0); }
  int64_t stride(int C, int F) const { return b_down(C, F) + (down ? int64_t(C) * r : 0); }
};

struct Moe {
  MoeShape shape{};
  Linear router;  // (E, C), no bias
  // The held experts (shape.experts_held(): all, or this expert-parallel rank's), each
  // [W_gate; W_up] (2F, C) then W_out (C, F).
  TensorView experts, dexperts;
  // bf16 runs: the held experts' bf16 compute copy (the GEMMs read it, as Linear's read wc); empty:
  // fp32 GEMMs (fp32 and fp16 runs).
  TensorView experts_c;
  // QLoRA: the held experts' frozen weights in NF4, two per expert ([W_gate; W_up] (2F, C), W_out
  // (C, F)); experts / experts_c are then empty and each expert's weights are dequantized into
  // nf4_scratch (3 F C values in the GEMMs' dtype: bf16 runs bf16, else fp32) before its GEMMs.
  const kernels::Nf4View* experts_nf4 = nullptr;
  TensorView nf4_scratch;
  Linear sh_in, sh_out;  // the shared expert: [gate; up] (2 Fs, C), down (C, Fs)
  Linear sh_gate_lin;    // (1, C)
  MoeExpertLora lora{};  // the experts' adapters (router and shared expert: their Linears' own)
  MoeLossGrad loss_grad{};
  // Whether the auxiliary losses' gradients enter here: under tensor parallelism every rank computes
  // the same routing and the router's gradient is summed over the group, so one rank adds them.
  bool adds_loss_grads = true;
  DeviceKind dev = DeviceKind::cpu;

  int64_t expert_stride() const { return 3 * int64_t(shape.F) * shape.C; }
  static MoeActs carve_acts(Carver& c, const MoeShape& s, int64_t N);
  static TensorView carve_summary(Carver& c, const MoeShape& s);
  // lowp: bf16 runs (the expert GEMMs' bf16 operands).
  static MoeScratch carve_scratch(Carver& c, const MoeShape& s, int64_t N, bool lowp = false);
  // y (N, C) = the layer of x (N, C); saves into a. ep (null or size 1: every expert here): expert
  // parallelism, whose expert side lives in `side` until backward. lo: bf16 runs, the scratch's lo1.
  void forward(TensorView y, TensorView x, const MoeActs& a, EpRegion* ep = nullptr, MoeExpertSide* side = nullptr,
               uint16_t* lo = nullptr) const;
  // dx (N, C) = d loss / dx; parameter gradients +=.
  void backward(TensorView dx, TensorView dy, TensorView x, const MoeActs& a, const MoeScratch& s,
                EpRegion* ep = nullptr, MoeExpertSide* side = nullptr) const;

 private:
  void summarize(const MoeActs& a, int64_t N) const;
  void shared_forward(TensorView y, TensorView x, const MoeActs& a) const;
  void shared_backward(TensorView dx, TensorView dy, TensorView x, const MoeActs& a, const MoeScratch& s) const;
  // One group of experts (E_count of them from W / dW) on rows grouped by offsets: the forward
  // into h, act, y; the backward from dy (overwritten with the input gradient) through dact, dh.
  // Rows [off[0], off[E_count]) of the buffers; W the first expert's weights (of experts), `first`
  // its element in experts / experts_c; lo1, lo2 the bf16 operands' rows (bf16 runs; else null).
  struct ExpertRun {
    const int32_t* off;
    int E_count;
    int64_t first;
    uint16_t *lo1, *lo2;
    bool dequantized = false;  // QLoRA: one expert, its weights already in nf4_scratch
  };
  void run_experts(const ExpertRun& r, const float* x, float* h, float* act, float* y) const;
  void run_experts_backward(const ExpertRun& r, const float* x, const float* h, const float* act, float* dy,
                            float* dact, float* dh) const;
  bool lowp() const {
    return experts_nf4 ? nf4_scratch.dtype == DType::bf16 : experts_c && experts_c.dtype == DType::bf16;
  }
  // QLoRA: a run over several experts as one run per expert, each through its dequantized weights;
  // true when it did (the caller returns).
  template <class F>
  bool per_expert(const ExpertRun& r, F run_one) const;
  // The experts' adapters (nn/moe_lora.cpp) around run_experts' two GEMMs: h += s x' A_in^T B^T per
  // adapted part, y += s act' A_down^T B_down^T; in backward dact and (after the base's input GEMM) dx
  // take the adapters' shares, and their gradients +=.
  void lora_forward_in(const ExpertRun& r, const float* x, float* h) const;
  void lora_forward_down(const ExpertRun& r, const float* act, float* y) const;
  void lora_backward_down(const ExpertRun& r, const float* act, const float* dy, float* dact) const;
  void lora_backward_in(const ExpertRun& r, const float* x, const float* dh, float* dx) const;
  const void* operand(const ExpertRun& r, const float* src, uint16_t* lo, int64_t ld) const;
  const void* weights(int64_t at) const;
  // The experts an expert group spreads over its ranks, [begin, begin + count), El per rank: all E,
  // or under TP x EP this TP rank's block, which its expert group's ranks split (the layout's cut:
  // held_begin = block begin + ep rank El). first: where this rank's experts start in `experts` (0
  // when the views hold only them; unit tests give every expert).
  struct Spread {
    int begin, count, El;
    int64_t first;
  };
  Spread spread(const EpRegion& ep) const;
  // Expert parallelism: this rank's rows out to the experts' ranks, the local experts on what
  // arrived, and the outputs back into yp (forward) / the gradients back into dyp (backward).
  void ep_forward(const MoeActs& a, const Spread& sp, EpRegion& ep, MoeExpertSide& x) const;
  void ep_backward(const MoeActs& a, const MoeScratch& s, const Spread& sp, EpRegion& ep, MoeExpertSide& x) const;
};

}  // namespace zt::nn
