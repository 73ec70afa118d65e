// model_runtime_pass.cpp: the forward and backward pass in stage-able pieces, and their
// composition (see model_runtime.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "models/model_runtime.h"
#include "models/transformer.h"

namespace zt {

// Checks position ids (O(B*T), next to nothing beside a step) and turns them into what
// the layers use. Ids equal to 0..T-1 in every row take the unpacked path, so they give
// results bit-identical to positions = null; a row without a restart needs no mask.
nn::Packing ModelRuntime::prepare_packing(const int32_t* positions, SlotInput* in) {
  const int B = B_, T = T_;
  // A sliding window shorter than the row bounds every query's first key (t - W + 1), alone
  // or with the packing bound; rows no longer than the window take the paths below unchanged.
  const int W = layout_.offsets.shape.window;
  const bool window = W > 0 && T > W;
  auto window_bound = [&](nn::Packing pack) {
    if (!window) return pack;
    if (!pack.doc_start) {
      in->doc_start.assign(size_t(B) * T, 0);
      pack.doc_start = in->doc_start.data();
    }
    kernels::attention_window_start(in->doc_start.data(), B, T, W);
    return pack;
  };
  if (sequence_length_ > 0) {
    // Rows that are parts of longer sequences (context parallel): this rank's chunks of each row at their global
    // positions (ascending, with a jump between chunks); the region's attention masks causally over the whole row, and
    // by each layer's window (AttnDims::window) over the global positions.
    ZT_ASSERT(positions, "context parallelism takes global positions");
    int32_t max_pos = 0;
    for (int64_t r = 0; r < int64_t(B) * T; ++r) max_pos = std::max(max_pos, positions[r]);
    ZT_CHECK(max_pos < cfg_.max_position, "position ids: ", max_pos, " lies outside the model's context of ",
             cfg_.max_position);
    nn::Packing pack;
    pack.positions = positions;
    extend_rope(max_pos, in);
    return pack;
  }
  if (!positions) return window_bound({});
  bool identity = true, restarts = false;
  int32_t max_pos = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int32_t p = positions[int64_t(b) * T + t];
      ZT_CHECK(p >= 0 && p < cfg_.max_position, "position ids: row ", b, ", column ", t, " is ", p,
               "; ids must lie in [0, ", cfg_.max_position, "), the model's context");
      if (t > 0) {
        const int32_t prev = positions[int64_t(b) * T + t - 1];
        ZT_CHECK(p == prev + 1 || p == 0, "position ids: row ", b, ", column ", t, " is ", p, " after ", prev,
                 "; each id must be the previous one plus 1, or 0 where a new document starts");
        restarts |= p == 0;
      }
      identity &= p == t;
      max_pos = std::max(max_pos, p);
    }
  if (identity) return window_bound({});
  nn::Packing pack;
  pack.positions = positions;
  if (restarts) {
    in->doc_start.resize(size_t(B) * T);
    kernels::attention_doc_start(in->doc_start.data(), positions, B, T);
    pack.doc_start = in->doc_start.data();
  }
  extend_rope(max_pos, in);
  return window_bound(pack);
}

void ModelRuntime::extend_rope(int32_t max_pos, SlotInput* in) {
  if (!layout_.offsets.shape.rope || max_pos < T_) return;
  const int64_t half = cfg_.head_size / 2;
  if (max_pos >= rope_ext_rows_) {
    // Row t of a table depends only on t, so the longer table agrees with the planned one.
    // It covers the whole context at once: slots in flight keep pointers into it.
    const int rows = cfg_.max_position;
    rope_ext_ = Buffer(size_t(2 * rows * half) * sizeof(float), MemCategory::temporary, dev());
    fill_rope(model_.rope_, rope_ext_.as<float>(), rope_ext_.as<float>() + rows * half, rows);
    if (cfg_.rope_local_theta > 0.f) {
      rope_local_ext_ = Buffer(size_t(2 * rows * half) * sizeof(float), MemCategory::temporary, dev());
      fill_rope(model_.rope_local_, rope_local_ext_.as<float>(), rope_local_ext_.as<float>() + rows * half, rows);
    }
    rope_ext_rows_ = rows;
  }
  in->rope.cos = rope_ext_.as<float>();
  in->rope.sin = rope_ext_.as<float>() + rope_ext_rows_ * half;
  if (cfg_.rope_local_theta > 0.f)
    in->rope_local = {rope_local_ext_.as<float>(), rope_local_ext_.as<float>() + rope_ext_rows_ * half};
}

void ModelRuntime::prepare_local(SlotInput* in) {
  in->pack_local = in->pack;
  const int W = cfg_.sliding_window, B = B_, T = T_;
  // Rows that are parts of longer sequences: the blocks' attention region masks each layer's
  // window itself (AttnDims::window).
  if (cfg_.sliding_layers.empty() || W <= 0 || T <= W || sequence_length_ > 0) return;
  if (in->pack.doc_start)
    in->doc_start_local.assign(in->pack.doc_start, in->pack.doc_start + int64_t(B) * T);
  else
    in->doc_start_local.assign(size_t(B) * T, 0);
  kernels::attention_window_start(in->doc_start_local.data(), B, T, W);
  in->pack_local.doc_start = in->doc_start_local.data();
}

void ModelRuntime::scale_embedding(TensorView x) const {
  if (!cfg_.embed_scale) return;
  kernels::scale(dev(), x.as<float>(), x.numel(), model_.embed_multiplier());
}

void ModelRuntime::begin_pass(bool backward) {
  ZT_ASSERT(acts_.data(), "plan(B, T) must come first");
  ZT_ASSERT(!backward || (training_ && (model_.grads_.data() || provider_)),
            "plan(B, T, training=true) must come first");
  backward_ = backward;
  ++pass_;
  if (backward) ++dropout_passes_;
  provider().begin_pass(backward);
}

void ModelRuntime::begin_slot(int slot, const int32_t* inputs, const int32_t* positions) {
  SlotInput& in = inputs_[slot];
  in.inputs = inputs;
  in.rope = {scratch_views_.rope_cos.as<const float>(), scratch_views_.rope_sin.as<const float>()};
  in.rope_local = {scratch_views_.rope_local_cos.as<const float>(), scratch_views_.rope_local_sin.as<const float>()};
  in.pack = prepare_packing(positions, &in);
  prepare_local(&in);
  if (dev() == DeviceKind::cuda) upload_slot(&in, inputs);
}

void ModelRuntime::upload_slot(SlotInput* in, const int32_t* inputs) {
  const int64_t N = int64_t(B_) * T_;
  const size_t bytes = size_t(N) * sizeof(int32_t);
  int32_t* ids = in->ids.as<int32_t>();
  kernels::copy_in(dev(), ids, inputs, bytes);
  in->inputs = ids;
  if (in->pack.positions) {
    kernels::copy_in(dev(), ids + N, in->pack.positions, bytes);
    in->pack.positions = ids + N;
  }
  if (in->pack.doc_start) {
    kernels::copy_in(dev(), ids + 2 * N, in->pack.doc_start, bytes);
    in->pack.doc_start = ids + 2 * N;
  }
  // The sliding layers' view (Gemma): the device's pack, with its own doc_start row (ids' fourth,
  // planned with per-layer windows) when prepare_local cut one.
  const bool own_local = !in->doc_start_local.empty() && in->pack_local.doc_start == in->doc_start_local.data();
  in->pack_local = in->pack;
  if (own_local) {
    kernels::copy_in(dev(), ids + 3 * N, in->doc_start_local.data(), bytes);
    in->pack_local.doc_start = ids + 3 * N;
  }
}

nn::EmbeddingPass ModelRuntime::embedding_pass(const SlotInput& in) const {
  nn::EmbeddingPass p;
  p.ids = in.inputs;
  p.positions = in.pack.positions;
  p.N = int64_t(B_) * T_;
  p.T = T_;
  p.C = cfg_.n_embd;
  p.dev = dev();
  p.all_rows = scratch_views_.block.full;
  return p;
}

void ModelRuntime::embed_forward(int slot, const int32_t* inputs, const int32_t* positions) {
  begin_slot(slot, inputs, positions);
  const SlotInput& in = inputs_[slot];
  const int u = layout_.embedding_unit;
  // LoRA: the embeddings are the frozen base's (the unit is empty, acquired for the call order).
  const bool frozen = layout_.frozen_base;
  const TensorView U = provider().acquire(u, false);
  const TensorView E = frozen ? model_.frozen_params() : U;
  // Mixed precision with a tied LM head: the head's GEMMs read this unit's compute copy,
  // made here at the unit's first acquire of the pass.
  if (layout_.tied_head && !frozen) compute_view(u, E);
  const int64_t base = frozen ? 0 : layout_.units[u].begin;
  const ModelOffsets& s = layout_.offsets;
  const float* wpe = s.wpe >= 0 ? E.as<const float>() + (s.wpe - base) : nullptr;
  const float* wte = E.as<const float>() + (s.wte - base);
  embedding_layer().forward(slots_[slot].res[0], wte, wpe, embedding_pass(in));
  scale_embedding(slots_[slot].res[0]);
  provider().release(u);
}

void ModelRuntime::blocks_forward(int slot, int first, int last) {
  SlotActs& a = slots_[slot];
  if (first == 0 && cfg_.moe.on()) set_moe_incoming(slot, nullptr);  // no layers before the first
  const SlotInput& in = inputs_[slot];
  for (int l = first; l < last; ++l) {
    const int u = layout_.block_units[l];
    const TensorView P = provider().acquire(u, false);
    bind_block(l, P, {}, compute_view(u, P));
    blocks_[l].forward(a.res[l + 1], a.res[l], a.blocks[l], scratch_views_.block, B_, T_, rope_of(in, l),
                       pack_of(in, l));
    provider().release(u);
  }
  if (cfg_.moe.on()) {  // the chunk the slot's losses sum from (after its incoming totals)
    if (moe_first_.size() <= size_t(slot)) moe_first_.resize(size_t(slot) + 1, 0);
    moe_first_[size_t(slot)] = first;
    if (backward_) add_moe_layer_stats(first, last, a);
  }
}

double ModelRuntime::head_forward_backward(int slot, const int32_t* targets, float grad_scale, int64_t* count,
                                           bool backward) {
  SlotActs& a = slots_[slot];
  const int head = layout_.head_unit, L = cfg_.n_layer;
  const int64_t N = int64_t(B_) * T_;
  ParamProvider& source = provider();
  const TensorView H = source.acquire(head, false);
  const TensorView HG = backward ? source.grads(head) : TensorView();
  bind_head(H, HG);
  // The LM-head weight lives in the head unit, or (tied) in the embedding unit, which is
  // then acquired a second time: part of the provider's call order.
  const int lm_unit = layout_.lm_head_unit();
  const bool tied = layout_.tied_head;
  const TensorView acquired = tied ? source.acquire(lm_unit, false) : H;
  // LoRA: the LM head is the frozen base's, and takes no gradient.
  const bool frozen = layout_.frozen_base;
  const TensorView lm_unit_view = frozen ? model_.frozen_params() : acquired;
  const TensorView lm_w = lm_head_slice(lm_unit_view, lm_unit);
  const TensorView lm_g =
      backward && !frozen ? lm_head_slice(tied ? source.grads(lm_unit) : HG, lm_unit) : TensorView();
  const nn::Precision prec = act_plan_.precision;
  // The final norm's output is the LM head's GEMM input: computed in fp32 (into dlnf, free
  // until the head's backward), then lowered to the compute dtype.
  // The head may compute a share of the rows (sequence parallel): this rank normalizes those,
  // and the head's input_ready gathers the rest.
  const nn::LmHeadLoss& head_layer = lm_head_layer();
  auto mine = [&](TensorView full) { return head_layer.local_rows(full); };
  const TensorView land = a.lnf_out.dtype == DType::f32 ? mine(a.lnf_out) : mine(scratch_views_.dlnf);
  lnf_.forward(land, a.lnf_mean, a.lnf_rstd, a.res[L]);
  nn::lower(prec, mine(a.lnf_out), land, dev());
  head_layer.input_ready(a.lnf_out);
  kernels::LmHeadDims hd{N, cfg_.n_embd, layout_.vocab_rows, scratch_views_.lm_chunk, cfg_.final_softcap};
  hd.token_rank = token_ranks_;
  if (sample_seed_) hd.sample_seed = sample_seed_ ^ (++sample_passes_ * 0xD1B54A32D192ED03ull);
  kernels::LmHeadCompute lc;
  if (prec != nn::Precision::fp32) {
    lc.t = nn::compute_dtype(prec);
    lc.x = a.lnf_out.data;
    lc.w = lm_head_slice(frozen ? frozen_compute() : compute_view(lm_unit, lm_unit_view), lm_unit).data;
    lc.dlogits = scratch_views_.dlogits_c.data;
    lc.round_f16 = prec == nn::Precision::fp16;
  }
  double loss;
  {
    ZT_PROFILE("lmhead_ce");
    if (dev() == DeviceKind::cuda) {
      kernels::copy_in(dev(), targets_.data(), targets, size_t(N) * sizeof(int32_t));
      targets = targets_.as<const int32_t>();
    }
    nn::LmHeadPass hp;
    hp.dims = hd;
    hp.grad_scale = grad_scale;
    hp.logits = scratch_views_.logits.as<float>();
    hp.lowp = prec == nn::Precision::fp32 ? nullptr : &lc;
    hp.token_losses = token_losses_;
    hp.dev = dev();
    loss = head_layer.forward(backward ? scratch_views_.dlnf.as<float>() : nullptr, lm_g.as<float>(),
                              prec == nn::Precision::fp32 ? a.lnf_out.as<const float>() : nullptr,
                              lm_w.as<const float>(), targets, hp, count);
  }
  if (tied) source.release(lm_unit);
  loss += moe_losses(slot, grad_scale, count ? *count : 0, backward);
  if (!backward) {
    source.release(head);
    return loss;
  }
  kernels::fill_zero(dev(), scratch_views_.dres.data,
                     scratch_views_.dres.bytes());  // the final norm's backward adds into it
  // The LM head's input gradient in this rank's rows (a vocabulary-parallel head sums the
  // partial gradients over its group).
  const TensorView dlnf = mine(scratch_views_.dlnf);
  head_layer.input_grad(dlnf, scratch_views_.dlnf);
  lnf_.backward(scratch_views_.dres, dlnf, a.res[L], a.lnf_mean, a.lnf_rstd);
  source.release(head);
  source.grads_done(head);
  return loss;
}

void ModelRuntime::blocks_backward(int slot, int first, int last) {
  SlotActs& a = slots_[slot];
  const SlotInput& in = inputs_[slot];
  for (int l = last - 1; l >= first; --l) {
    const int u = layout_.block_units[l];
    const TensorView P = provider().acquire(u, true);
    bind_block(l, P, provider().grads(u), compute_view(u, P));
    if (cfg_.moe.on()) {
      const float* g = moe_loss_grads(slot);
      blocks_[l].moe.loss_grad = {g, g[cfg_.moe.num_experts]};
    }
    blocks_[l].backward(scratch_views_.dres, a.res[l], a.blocks[l], scratch_views_.block, B_, T_, rope_of(in, l),
                        pack_of(in, l), act_plan_.of(l));
    provider().release(u);
    provider().grads_done(u);
  }
}

void ModelRuntime::forward_acquires(int first, int last, bool embed, bool head, AcquireOrder* out) const {
  if (embed) out->push_back({layout_.embedding_unit, false});
  for (int l = first; l < last; ++l) out->push_back({layout_.block_units[l], false});
  if (!head) return;
  out->push_back({layout_.head_unit, false});
  if (layout_.tied_head) out->push_back({layout_.lm_head_unit(), false});
}

void ModelRuntime::backward_acquires(int first, int last, AcquireOrder* out) const {
  for (int l = last - 1; l >= first; --l) out->push_back({layout_.block_units[l], true});
}

void ModelRuntime::lm_head_grads_done() {
  if (layout_.tied_head) provider().grads_done(layout_.lm_head_unit());
}

void ModelRuntime::embed_backward(int slot) {
  const SlotInput& in = inputs_[slot];
  const int u = layout_.embedding_unit;
  const TensorView G = provider().grads(u);
  const int64_t base = layout_.units[u].begin;
  const ModelOffsets& s = layout_.offsets;
  if (!layout_.frozen_base) {  // LoRA: the embeddings are frozen
    ZT_PROFILE("embedding_bwd");
    scale_embedding(scratch_views_.dres);  // d(m e)/de = m: the stream's gradient, no longer needed, scaled in place
    float* dwpe = s.wpe >= 0 ? G.as<float>() + (s.wpe - base) : nullptr;
    embedding_layer().backward(G.as<float>() + (s.wte - base), dwpe, scratch_views_.dres, embedding_pass(in));
  }
  provider().grads_done(u);
}

// The composition on slot 0. Its call sequence is the ParamProvider contract (providers
// prefetch by it): forward units embedding, blocks, head (+ the embedding again when the
// LM head is tied), then backward blocks L-1..0 and the embedding's gradients.
double ModelRuntime::forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale, int64_t* count,
                                      const int32_t* positions) {
  begin_pass(true);
  embed_forward(0, inputs, positions);
  blocks_forward(0, 0, cfg_.n_layer);
  const double loss = head_forward_backward(0, targets, grad_scale, count, true);
  blocks_backward(0, 0, cfg_.n_layer);
  embed_backward(0);
  return loss;
}

double ModelRuntime::forward_loss(const int32_t* inputs, const int32_t* targets, int64_t* count,
                                  const int32_t* positions) {
  begin_pass(false);
  embed_forward(0, inputs, positions);
  blocks_forward(0, 0, cfg_.n_layer);
  return head_forward_backward(0, targets, 0.f, count, false);
}

}  // namespace zt
