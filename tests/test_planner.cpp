// test_planner.cpp: the layout planner (plan/planner.h) without MPI: the enumeration (what
// the trainer refuses is left out, the global batch is kept), the memory model against the
// memory estimator for data-parallel layouts and its direction under TP and PP, and the time
// model's shape (more ranks than cores share them; a bubble for pipelines).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "models/config.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "models/model_runtime.h"
#include "parallel/tensor_parallel.h"
#include "plan/memory_estimate.h"
#include "plan/planner.h"

namespace zt::parallel {
namespace {

PlanInputs gpt2_124m(int T = 256, int64_t G = 8) {
  PlanInputs in;
  in.cfg = config_from_json(nlohmann::json::parse(R"({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
      "n_embd": 768, "n_layer": 12, "n_head": 12})"),
                            "test");
  in.seq_len = T;
  in.global_batch = G;
  return in;
}

PlanMachine machine(int N, double cores = 2) {
  PlanMachine m;
  m.nproc = N;
  m.cores_per_host = cores;
  m.gemm_gflops_core = kDefaultGemmGflopsCore;
  m.gemm_half_rows = kDefaultGemmHalfRows;
  m.efficiency = kDefaultEfficiency;
  m.link_gbps = kDefaultLinkGbps;
  m.mem_gbps = kDefaultMemGbps;
  return m;
}

TEST(Planner, DataParallelMemoryIsTheEstimatorsRow) {
  const PlanInputs in = gpt2_124m();
  for (int dp : {1, 2, 4})
    for (int zero = 0; zero <= 3; ++zero)
      for (int B : {1, 4}) {
        const PlanLayout l{dp, 1, 1, false, zero, B, 1, false};
        const LayoutMemory got = layout_memory(in, l, 0);
        MemoryEstimateOptions opt;
        opt.num_ranks = dp;
        opt.hpz_partition_size = 1;
        const MemoryRow want = estimate_memory(memory_inputs(in.cfg, B, in.seq_len), opt).at(size_t(zero));
        EXPECT_EQ(got.training(), want.total()) << l.name();
        // The streamed export on the chief: the largest tensor (GPT-2's 50257 x 768 embedding) in
        // fp32 and one rank's pieces of it (a ZeRO shard).
        const int64_t wte = int64_t(50257) * 768 * 4;
        // (DDP: the chief writes every tensor from its own buffers.)
        EXPECT_EQ(got.export_extra, zero >= 1 ? wte + wte / dp : 0) << l.name();
        EXPECT_EQ(got.optim, want.optim) << l.name();
      }
  EXPECT_EQ(layout_memory(in, {1, 1, 1, false, 0, 1, 1, false}, 1000).runtime, 1000);
}

TEST(Planner, TensorAndPipelineMemoryShrinkPerRank) {
  const PlanInputs in = gpt2_124m();
  const int64_t one = layout_memory(in, {1, 1, 1, false, 0, 4, 1, false}, 0).total();
  const LayoutMemory tp2 = layout_memory(in, {1, 2, 1, false, 0, 4, 1, false}, 0);
  const LayoutMemory tp2sp = layout_memory(in, {1, 2, 1, true, 0, 4, 1, false}, 0);
  // Every split weight halves (the vocabulary too); norms and row-parallel biases stay whole.
  EXPECT_LT(tp2.params, 0.52 * layout_memory(in, {1, 1, 1, false, 0, 4, 1, false}, 0).params);
  EXPECT_GT(tp2.params, 0.49 * layout_memory(in, {1, 1, 1, false, 0, 4, 1, false}, 0).params);
  EXPECT_LT(tp2.total(), one);
  EXPECT_LT(tp2sp.activations, tp2.activations);  // SP splits the residual stream's rows
  // PP 2 with 4 micro-batches: stage 0 keeps 2 in flight (P - s), the last one.
  const LayoutMemory pp2 = layout_memory(in, {1, 1, 2, false, 1, 1, 4, false}, 0);
  EXPECT_LT(pp2.grads, layout_memory(in, {1, 1, 1, false, 0, 1, 4, false}, 0).grads);  // the tied copy stays
  EXPECT_GE(pp2.slots, 1);
  // PP 2 x DP 2: ZeRO-2 shards the stage's gradients, ZeRO-3 its parameters too (the estimator's rows
  // over the stage's units).
  const LayoutMemory z1 = layout_memory(in, {2, 1, 2, false, 1, 1, 4, false}, 0);
  const LayoutMemory z2 = layout_memory(in, {2, 1, 2, false, 2, 1, 4, false}, 0);
  const LayoutMemory z3 = layout_memory(in, {2, 1, 2, false, 3, 1, 4, false}, 0);
  EXPECT_NEAR(double(z2.grads), 0.5 * double(z1.grads), 0.01 * double(z1.grads));
  EXPECT_EQ(z2.params, z1.params);
  EXPECT_NEAR(double(z3.params), 0.5 * double(z1.params), 0.01 * double(z1.params));
  EXPECT_EQ(z3.optim, z1.optim);
  // Recomputation keeps less.
  EXPECT_LT(layout_memory(in, {1, 1, 1, false, 0, 4, 1, true}, 0).activations,
            layout_memory(in, {1, 1, 1, false, 0, 4, 1, false}, 0).activations);
}

TEST(Planner, EnumerationKeepsTheBatchAndLeavesOutRefusedLayouts) {
  const PlanInputs in = gpt2_124m(256, 8);
  const std::vector<PlanRow> rows = plan_layouts(in, machine(4));
  std::set<std::string> names;
  bool saw_tp = false, saw_pp = false, saw_zero3 = false, saw_pp_zero3 = false;
  for (const PlanRow& r : rows) {
    const PlanLayout& l = r.layout;
    EXPECT_EQ(l.dp * l.cp * l.tp * l.pp, 4);
    EXPECT_EQ(int64_t(l.dp) * l.micro_batch * l.accumulation, 8) << l.name();
    EXPECT_EQ(layout_refusal(in, l, 4), "");
    EXPECT_TRUE(names.insert(l.name()).second) << "twice: " << l.name();
    saw_tp |= l.tp > 1;
    saw_pp |= l.pp > 1;
    saw_zero3 |= l.zero == 3;
    saw_pp_zero3 |= l.pp > 1 && l.zero == 3;  // ZeRO-2/3 compose with pipeline stages
    EXPECT_GT(r.time.step_s, 0);
  }
  EXPECT_TRUE(saw_tp && saw_pp && saw_zero3 && saw_pp_zero3);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_LE(rows[i - 1].time.step_s, rows[i].time.step_s);
  // TP must divide the heads: 12 heads, 8 ranks -> tp 8 never appears.
  for (const PlanRow& r : plan_layouts(gpt2_124m(256, 8), machine(8))) EXPECT_NE(r.layout.tp, 8);
  EXPECT_EQ(layout_refusal(in, {2, 1, 2, false, 2, 1, 4, false}, 4), "");  // ZeRO-2 with PP runs
  EXPECT_NE(layout_refusal(in, {1, 8, 1, false, 0, 1, 8, false}, 8), "");  // 12 heads / 8
}

TEST(Planner, ConstraintsPinAndMemoryLimitOrders) {
  const PlanInputs in = gpt2_124m(256, 8);
  PlanConstraints c;
  c.tp = 2;
  c.zero = 1;
  for (const PlanRow& r : plan_layouts(in, machine(4), c)) {
    EXPECT_EQ(r.layout.tp, 2);
    EXPECT_EQ(r.layout.zero, 1);
  }
  PlanMachine m = machine(2);
  m.memory_per_rank = int64_t(1700) << 20;  // below DDP's 124M x 16 bytes: only split layouts fit
  const std::vector<PlanRow> rows = plan_layouts(in, m);
  ASSERT_TRUE(rows.front().fits);
  EXPECT_LE(rows.front().memory.total(), m.memory_per_rank);
  EXPECT_FALSE(rows.back().fits);
}

TEST(Planner, TimeModelSharesCoresAndCountsTheBubble) {
  const PlanInputs in = gpt2_124m(256, 8);
  // 4 ranks on 2 cores: each gets one thread, and the host's work over 2 cores bounds the step.
  const LayoutTime over = layout_time(in, {4, 1, 1, false, 0, 2, 1, false}, machine(4, 2));
  EXPECT_EQ(over.threads, 1);
  EXPECT_GE(over.step_s, over.cpu_bound_s);
  EXPECT_DOUBLE_EQ(over.core_share, 0.5);
  EXPECT_GE(over.cpu_bound_s, 2 * over.compute_s * 0.999);  // 4 ranks' work on 2 cores
  EXPECT_GT(over.cpu_bound_s, over.critical_s);
  const LayoutTime one = layout_time(in, {1, 1, 1, false, 0, 8, 1, false}, machine(1, 2));
  EXPECT_EQ(one.threads, 2);
  const LayoutTime pp = layout_time(in, {1, 1, 2, false, 0, 1, 8, false}, machine(2, 2));
  EXPECT_NEAR(pp.bubble, 1.0 / 9.0, 1e-12);
  EXPECT_GT(pp.critical_s, pp.compute_s);
  // Oversubscribed, a pipeline's bubble goes to other ranks: 4 stages on 2 cores are bound by the
  // work, not the bubble.
  const LayoutTime pp4 = layout_time(in, {1, 1, 4, false, 0, 1, 8, false}, machine(4, 2));
  EXPECT_GT(pp4.cpu_bound_s, pp4.critical_s);
  EXPECT_GT(layout_time(in, {1, 1, 1, false, 0, 8, 1, true}, machine(1, 2)).compute_s, one.compute_s);
}

TEST(Planner, BadRequestsAreOneLine) {
  PlanMachine m = machine(4);
  m.nodes = 3;
  EXPECT_THROW(plan_layouts(gpt2_124m(), m), Error);
  EXPECT_THROW(plan_layouts(gpt2_124m(2048), machine(2)), Error);                                  // beyond the context
  for (const PlanRow& r : plan_layouts(gpt2_124m(256, 3), machine(2))) EXPECT_EQ(r.layout.dp, 1);  // 3 % 2
}

// Context parallelism: a cp rank is a data-parallel rank of T / cp rows (dp x cp ranks share the
// gradients and ZeRO's shards) plus the ring's buffers.
TEST(Planner, ContextParallelMemoryIsHalfTheRowsPlusTheRing) {
  const PlanInputs in = gpt2_124m(256, 8);
  PlanInputs half = in;
  half.seq_len = 128;
  for (int dp : {1, 2})
    for (int zero = 0; zero <= 3; ++zero)
      for (int B : {1, 4}) {
        PlanLayout cp{dp, 1, 1, false, zero, B, 1, false, 2};
        const PlanLayout as_dp{2 * dp, 1, 1, false, zero, B, 1, false, 1};
        const LayoutMemory got = layout_memory(in, cp, 0), want = layout_memory(half, as_dp, 0);
        EXPECT_EQ(got.activations, want.activations) << cp.name();
        EXPECT_EQ(got.temporary, want.temporary) << cp.name();
        EXPECT_EQ(got.params, want.params) << cp.name();
        EXPECT_EQ(got.grads, want.grads) << cp.name();
        EXPECT_EQ(got.optim, want.optim) << cp.name();
        EXPECT_EQ(got.comm, want.comm) << cp.name();
        EXPECT_EQ(got.cp_ring, cp_ring_bytes(in.cfg, B, 256, 2, 1, 1)) << cp.name();
        EXPECT_EQ(got.training(), want.training() + got.cp_ring) << cp.name();
      }
  // A pipeline of cp ranks: the same stage cut and slots as the data-parallel one at T / cp.
  const LayoutMemory pp = layout_memory(in, {1, 1, 2, false, 1, 1, 4, false, 2}, 0);
  const LayoutMemory pp_dp = layout_memory(half, {2, 1, 2, false, 1, 1, 4, false, 1}, 0);
  EXPECT_EQ(pp.training(), pp_dp.training() + pp.cp_ring);
  EXPECT_EQ(pp.cp_ring, cp_ring_bytes(in.cfg, 1, 256, 2, 1, pp.slots));
  EXPECT_EQ(layout_memory(in, {2, 1, 1, false, 0, 1, 1, false}, 0).cp_ring, 0);
}

TEST(Planner, ContextParallelRingBytes) {
  // The small Llama of docs/parallelism-cp.md (4 query / 2 KV heads of 64) at T 8192, cp 2, B 1:
  // K / V blocks of 4096 x 2 x 2 x 64 floats, 4 of them, a block's output (4096 x 4 x 64), lse and
  // D (4 x 4096 each), the shard's 3 rows of 4096 int32: 21.1 MB as measured there (the ring).
  const ModelConfig c = config_from_json(nlohmann::json::parse(R"({"model_type": "llama", "vocab_size": 509,
      "max_position_embeddings": 8192, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 2})"),
                                         "test");
  const int64_t kv = int64_t(4096) * 2 * 2 * 64, out = int64_t(4096) * 4 * 64, lse = int64_t(4) * 4096;
  // RoPE adds the whole context's cos / sin table (8192 x 64 floats): the trainer's tracked
  // temporaries under cp 2 measured exactly 2 MiB above the planned arena's.
  const int64_t rope = int64_t(8192) * 64 * 4;
  EXPECT_EQ(cp_ring_bytes(c, 1, 8192, 2, 1, 1), 4 * (4 * kv + out + 2 * lse) + 3 * 4 * 4096 + rope);
  EXPECT_NEAR(double(cp_ring_bytes(c, 1, 8192, 2, 1, 1) - rope) / 1e6, 21.1, 0.1);
  EXPECT_EQ(cp_ring_bytes(c, 1, 8192, 1, 1, 1), 0);
  // Ring seconds without latency are the bytes the ring sends (ContextParallel's own formula, the
  // one its test checks against the communicator) over the link; recomputation adds a forward ring.
  PlanMachine m = machine(2);
  m.latency_us = 0;
  for (int P : {2, 4})
    for (int B : {1, 3}) {
      const double want = ContextParallel::ring_bytes_per_layer(B, 8192, P, 2, 64) / (m.link_gbps * 1e9);
      EXPECT_NEAR(cp_ring_seconds(c, B, 8192, P, 1, false, m), want, 1e-12 * want);
      EXPECT_NEAR(cp_ring_seconds(c, B, 8192, P, 1, true, m), want * 4 / 3, 1e-12 * want);
    }
  const double no_latency = cp_ring_seconds(c, 1, 8192, 2, 1, false, m);
  m.latency_us = 20;  // 3 messages a layer at cp 2
  EXPECT_NEAR(cp_ring_seconds(c, 1, 8192, 2, 1, false, m) - no_latency, 3 * 20e-6, 1e-12);
}

TEST(Planner, ContextParallelRefusalsMirrorTheTrainer) {
  PlanInputs in = gpt2_124m(260, 8);  // 260 = 4 x 65: cp 2 splits it, cp 4 (8 chunks) does not
  EXPECT_EQ(layout_refusal(in, {1, 1, 1, false, 0, 8, 1, false, 2}, 2), "");
  EXPECT_NE(layout_refusal(in, {1, 1, 1, false, 0, 8, 1, false, 4}, 4).find("not divisible by 8"), std::string::npos);
  EXPECT_NE(layout_refusal(in, {1, 1, 1, false, 0, 8, 1, false, 2}, 4), "");  // 2 ranks of 4
  std::set<int> cps;
  for (const PlanRow& r : plan_layouts(in, machine(4))) cps.insert(r.layout.cp);
  EXPECT_EQ(cps, (std::set<int>{1, 2}));
  in.seq_len = 258;  // not a multiple of 4: no cp at all
  for (const PlanRow& r : plan_layouts(in, machine(4))) EXPECT_EQ(r.layout.cp, 1);
  in.seq_len = 256;
  in.cfg.sliding_window = 128;  // windows shorter than the sequence compose (the ring masks them)
  EXPECT_EQ(layout_refusal(in, {1, 1, 1, false, 0, 8, 1, false, 2}, 2), "");
  in.packing = true;
  EXPECT_NE(layout_refusal(in, {1, 1, 1, false, 0, 8, 1, false, 2}, 2).find("--packing"), std::string::npos);
  in.packing = false;
  in.validation = true;
  EXPECT_EQ(layout_refusal(in, {1, 1, 1, false, 0, 8, 1, false, 2}, 2), "");
  EXPECT_NE(layout_refusal(in, {1, 1, 2, false, 0, 1, 8, false, 2}, 4).find("--validation_file"), std::string::npos);
}

TEST(Planner, ContextParallelEnumerationPinsAndTime) {
  const PlanInputs in = gpt2_124m(256, 8);
  bool saw_cp2 = false, saw_cp4 = false;
  for (const PlanRow& r : plan_layouts(in, machine(4))) {
    const PlanLayout& l = r.layout;
    EXPECT_EQ(l.dp * l.cp * l.tp * l.pp, 4) << l.name();
    EXPECT_EQ(int64_t(l.dp) * l.micro_batch * l.accumulation, 8) << l.name();  // cp ranks read the same rows
    EXPECT_EQ(r.time.cp_comm_s > 0, l.cp > 1) << l.name();
    saw_cp2 |= l.cp == 2;
    saw_cp4 |= l.cp == 4;
  }
  EXPECT_TRUE(saw_cp2 && saw_cp4);
  PlanConstraints c;
  c.cp = 2;
  for (const PlanRow& r : plan_layouts(in, machine(4), c)) {
    EXPECT_EQ(r.layout.cp, 2);
    EXPECT_NE(r.layout.flags().find("--context-parallel-size 2 "), std::string::npos);
    EXPECT_NE(r.layout.name().find(str_cat(" pp", r.layout.pp, " cp2 zero")), std::string::npos) << r.layout.name();
  }
  EXPECT_EQ(PlanLayout{}.flags().find("context"), std::string::npos);
  c.tp = 4;
  EXPECT_THROW(plan_layouts(in, machine(4), c), Error);  // 4 x 2 of 4 ranks
  // cp 2 with B 2 computes what dp 2 with B 1 does (T tokens a rank, attention at the whole T),
  // reduces over the same 2 ranks, and sends each layer's ring on top.
  const PlanMachine m = machine(2);
  const LayoutTime cp = layout_time(in, {1, 1, 1, false, 0, 2, 1, false, 2}, m);
  const LayoutTime dp = layout_time(in, {2, 1, 1, false, 0, 1, 1, false}, m);
  EXPECT_NEAR(cp.compute_s, dp.compute_s, 1e-12);
  EXPECT_NEAR(cp.dp_comm_s, dp.dp_comm_s, 1e-12);
  EXPECT_NEAR(cp.cp_comm_s, 12 * cp_ring_seconds(in.cfg, 2, 256, 2, 1, false, m), 1e-12);
  EXPECT_NEAR(cp.critical_s, dp.critical_s + cp.cp_comm_s, 1e-9);
}

// Expert parallelism (a Mixtral-shaped MoE): EP 1, 2, 4 on 4 ranks are enumerated; a rank's state
// is the estimator's row for its layout (dense + E / ep experts) over the dp / ep holders, plus the
// dense gradients' buffer and the experts' side; the all-to-all is priced; dense models and EP not
// dividing the experts are refused.
TEST(Planner, ExpertParallelShardsTheExpertsAndPaysTheAllToAll) {
  PlanInputs in;
  in.cfg = config_from_json(nlohmann::json::parse(R"({"model_type": "mixtral", "vocab_size": 1024,
      "max_position_embeddings": 512, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
      "num_attention_heads": 8, "num_key_value_heads": 4, "num_local_experts": 8, "num_experts_per_tok": 2})"),
                            "test");
  in.seq_len = 128;
  in.global_batch = 8;
  const PlanMachine m = machine(4, 4);
  std::set<int> eps;
  std::set<std::pair<int, int>> tp_ep;
  for (const PlanRow& r : plan_layouts(in, m)) {
    eps.insert(r.layout.ep);
    tp_ep.insert({r.layout.tp, r.layout.ep});
    EXPECT_EQ(r.time.ep_comm_s > 0, r.layout.ep > 1) << r.layout.name();
    EXPECT_EQ(8 % (r.layout.tp * r.layout.ep), 0) << r.layout.name();  // TP x EP divides the experts
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4}));
  EXPECT_TRUE(tp_ep.count({2, 2}) && tp_ep.count({4, 1})) << "TP (x EP) layouts for experts";
  for (int zero : {0, 1, 3}) {
    int64_t last = INT64_MAX;
    for (int ep : {1, 2, 4}) {
      const PlanLayout l{4, 1, 1, false, zero, 2, 1, false, 1, ep};
      ASSERT_EQ(layout_refusal(in, l, 4), "") << l.name();
      EXPECT_NE(l.flags().find(ep > 1 ? "--expert-model-parallel-size " + std::to_string(ep) : "--zero_stage"),
                std::string::npos);
      const LayoutMemory got = layout_memory(in, l, 0);
      LayerCut cut;
      expert_parallel_cut(in.cfg, ep, 0, cut);
      MemoryEstimateOptions opt;
      opt.num_ranks = 4 / ep;
      opt.hpz_partition_size = 1;
      const ModelMemoryInputs mi = memory_inputs(in.cfg, 2, in.seq_len, {}, cut);
      const MemoryRow want = estimate_memory(mi, opt).at(size_t(zero));
      EXPECT_EQ(got.params + got.grads + got.optim, want.params + want.grads + want.optim) << l.name();
      EXPECT_EQ(got.activations, mi.activation_bytes) << l.name();  // the experts' side included
      if (zero == 0) {                                              // DDP: E / ep experts
        EXPECT_LT(got.params + got.grads + got.optim, last) << l.name();
      }
      last = got.params + got.grads + got.optim;
    }
  }
  // TP alone exchanges no rows: a TP 2 layout's activations are the runtime's plan of its cut, no
  // expert side; TP 2 x EP 2 adds the side of its TP block's rows (half of them).
  const PlanLayout tp2{2, 2, 1, false, 0, 2, 1, false, 1, 1}, tp2ep2{2, 2, 1, false, 0, 2, 1, false, 1, 2};
  size_t acts = 0, tmp = 0, copy = 0;
  ModelRuntime::planned_bytes(in.cfg, 2, in.seq_len, &acts, &tmp, 1, {}, &copy,
                              tensor_parallel_cut(in.cfg, 2, 0, false));
  EXPECT_EQ(layout_memory(in, tp2, 0).activations, int64_t(acts));
  const int64_t side = int64_t(in.cfg.n_layer) * 2 * in.seq_len * 2 / 2 * (3 * 256 + 6 * 512) * 4;
  EXPECT_EQ(layout_memory(in, tp2ep2, 0).activations, int64_t(acts) + side);
  EXPECT_NE(layout_refusal(in, {4, 1, 1, false, 0, 2, 1, false, 1, 3}, 4), "");  // 3 does not divide 8 experts
  EXPECT_EQ(layout_refusal(in, {2, 4, 1, false, 0, 2, 1, false, 1, 2}, 8), "");  // TP 4 x EP 2: one expert each
  EXPECT_NE(layout_refusal(in, {4, 4, 1, false, 0, 2, 1, false, 1, 4}, 16).find("does not divide the model's 8"),
            std::string::npos);  // TP 4 x EP 4 of 8 experts

  const PlanInputs dense = gpt2_124m();
  EXPECT_NE(layout_refusal(dense, {4, 1, 1, false, 0, 2, 1, false, 1, 2}, 4).find("has no experts"), std::string::npos);
  for (const PlanRow& r : plan_layouts(dense, machine(4))) EXPECT_EQ(r.layout.ep, 1);
  PlanConstraints pin;
  pin.ep = 2;
  for (const PlanRow& r : plan_layouts(in, m, pin)) EXPECT_EQ(r.layout.ep, 2);
}

}  // namespace
}  // namespace zt::parallel
