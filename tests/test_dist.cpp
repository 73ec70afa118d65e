// test_dist.cpp: the pure parts of distribution, without MPI: shard ranges, DDP bucket
// plans, blockwise int8 quantization against a naive reference, the memory estimator,
// the counters' bus-bytes formulas and the size-1 local communicator. The MPI runs are in
// tests/dist/test_comm_mpi.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "models/config.h"
#include "models/layout.h"
#include "models/transformer.h"
#include "parallel/buckets.h"
#include "parallel/quantize.h"
#include "parallel/shard.h"
#include "plan/memory_estimate.h"
#include "plan/memory_fit.h"

using namespace zt;
using namespace zt::parallel;

namespace {

ModelConfig gpt2_124m() {
  return config_from_json(nlohmann::json::parse(R"({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
      "n_embd": 768, "n_layer": 12, "n_head": 12})"),
                          "test");
}

ParamTable tiny_table(ModelConfig* cfg_out = nullptr) {
  ModelConfig cfg = config_from_json(
      nlohmann::json::parse(R"({"model_type": "gpt2", "vocab_size": 100, "n_positions": 32, "n_embd": 16,
                               "n_layer": 3, "n_head": 2})"),
      "test");
  ParamTable t;
  gpt2_layout(cfg, t);
  if (cfg_out) *cfg_out = cfg;
  return t;
}

}  // namespace

TEST(DistShard, PaddedEqualShards) {
  ShardLayout l = shard_layout(10, 4);
  EXPECT_EQ(l.padded, 12);
  EXPECT_EQ(l.shard, 3);
  EXPECT_EQ(l.range(0), (Range{0, 3}));
  EXPECT_EQ(l.range(2), (Range{6, 9}));
  EXPECT_EQ(l.range(3), (Range{9, 10}));
  EXPECT_EQ(l.padded_range(3), (Range{9, 12}));
  EXPECT_EQ(l.owner(9), 3);
  // Fewer elements than ranks: the last ranks own nothing.
  ShardLayout tiny = shard_layout(3, 4);
  EXPECT_EQ(tiny.range(3).size(), 0);
  EXPECT_EQ(tiny.range(2), (Range{2, 3}));
  // Alignment: shards start on multiples of 16 elements.
  ShardLayout a = shard_layout(1000, 3, 16);
  EXPECT_EQ(a.padded % 48, 0);
  EXPECT_EQ(a.shard % 16, 0);
  EXPECT_GE(a.padded, 1000);
  EXPECT_LT(a.padded - 1000, 48);
  EXPECT_THROW(shard_layout(10, 0), Error);
}

TEST(DistShard, RangesTileTheBufferExactly) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    int64_t numel = rng() % 5000;
    int n = 1 + rng() % 9;
    int64_t align = int64_t(1) << (rng() % 5);
    ShardLayout l = shard_layout(numel, n, align);
    int64_t next = 0;
    for (int r = 0; r < n; ++r) {
      Range g = l.range(r);
      if (g.empty()) continue;
      EXPECT_EQ(g.begin, next);
      EXPECT_EQ(g.begin % align, 0);
      next = g.end;
      for (int64_t i : {g.begin, g.end - 1}) EXPECT_EQ(l.owner(i), r);
    }
    EXPECT_EQ(next, numel);
  }
}

TEST(DistShard, PiecesMapShardsToParameters) {
  ParamTable t = tiny_table();
  for (int n : {1, 2, 3, 7}) {
    ShardLayout l = shard_layout(t.total(), n, 16);
    int64_t covered = 0;
    for (int r = 0; r < n; ++r) {
      auto pieces = shard_pieces(t, l, r);
      int64_t pos = l.range(r).begin;
      for (auto& p : pieces) {
        const ParamInfo& info = t.list()[p.param];
        EXPECT_EQ(p.flat_begin, pos);
        EXPECT_EQ(p.flat_begin, info.offset + p.param_begin);
        EXPECT_LE(p.param_begin + p.count, info.numel);
        pos += p.count;
        covered += p.count;
      }
      EXPECT_EQ(pos, l.range(r).end);
    }
    EXPECT_EQ(covered, t.total());
  }
}

TEST(DistBuckets, ReverseOrderContiguousAndCapped) {
  ParamTable t = tiny_table();
  const auto& list = t.list();
  for (int64_t cap : {int64_t(64), int64_t(4096), int64_t(20000), int64_t(1) << 30}) {
    BucketPlan plan = plan_buckets(t, {cap, 0, 4});
    ASSERT_FALSE(plan.buckets.empty());
    // Bucket 0 ends at the end of the buffer; each next one ends where the previous begins.
    int64_t end = t.total();
    std::vector<int> seen(list.size(), 0);
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      const Bucket& k = plan.buckets[b];
      EXPECT_EQ(k.range.end, end);
      end = k.range.begin;
      int64_t sum = 0;
      int prev = INT32_MAX;
      for (int p : k.params) {
        EXPECT_LT(p, prev);  // backward order: later parameters first
        prev = p;
        sum += list[p].numel;
        seen[p]++;
        EXPECT_EQ(plan.bucket_of[p], int(b));
      }
      EXPECT_EQ(sum, k.range.size());
      // A bucket closes as soon as it reaches the cap: without its last parameter it was below.
      if (b + 1 < plan.buckets.size()) {
        EXPECT_GE(k.bytes(), cap);
        EXPECT_LT((k.range.size() - list[k.params.back()].numel) * 4, cap);
      }
    }
    EXPECT_EQ(end, 0);
    for (int s : seen) EXPECT_EQ(s, 1);
  }
  // A huge cap: one bucket. A tiny one: one parameter per bucket.
  EXPECT_EQ(plan_buckets(t, {int64_t(1) << 40}).buckets.size(), 1u);
  EXPECT_EQ(plan_buckets(t, {4}).buckets.size(), list.size());
  // A small first bucket (PyTorch's 1 MiB idea) starts the first all-reduce early.
  BucketPlan fb = plan_buckets(t, {int64_t(1) << 40, 64, 4});
  EXPECT_EQ(fb.buckets.size(), 2u);
  EXPECT_EQ(fb.buckets[0].params.size(), 1u);
}

// With no cap set, DDP uses PyTorch's 25 MiB and ZeRO DeepSpeed's 5e8 elements; an explicit cap
// (flag or DeepSpeed config) wins. GPT-2 124M under DDP gets many buckets, so reduction overlaps
// backward; 5e8 would be one bucket, reduced only when backward is over.
TEST(DistBuckets, DefaultCapPerStage) {
  EXPECT_EQ(reduce_bucket_elements(0, 0), (int64_t(25) << 20) / 4);
  for (int stage : {1, 2, 3}) EXPECT_EQ(reduce_bucket_elements(0, stage), 500000000);
  for (int stage : {0, 1, 2, 3}) EXPECT_EQ(reduce_bucket_elements(40000, stage), 40000);
  EXPECT_EQ(reduce_bucket_elements(-1, 0), -1);  // left for the option check to reject
  ParamTable t;
  gpt2_layout(gpt2_124m(), t);
  const size_t ddp = plan_buckets(t, {4 * reduce_bucket_elements(0, 0)}).buckets.size();
  EXPECT_GE(ddp, 10u);  // 475 MiB of gradients in buckets of about 25 MiB (the embedding alone)
  EXPECT_EQ(plan_buckets(t, {4 * reduce_bucket_elements(0, 1)}).buckets.size(), 1u);
}

TEST(DistBuckets, TrackerReportsCompleteBuckets) {
  ParamTable t = tiny_table();
  BucketPlan plan = plan_buckets(t, {4096});
  BucketTracker tr(plan);
  std::vector<int> completed;
  for (int p = int(t.list().size()) - 1; p >= 0; --p) {
    int b = tr.mark(p);
    if (b >= 0) completed.push_back(b);
  }
  ASSERT_EQ(completed.size(), plan.buckets.size());
  for (size_t i = 0; i < completed.size(); ++i) EXPECT_EQ(completed[i], int(i));
  EXPECT_THROW(tr.mark(0), Error);  // twice in one pass is a bug
  tr.reset();
  EXPECT_EQ(tr.mark(int(t.list().size()) - 1), plan.buckets[0].params.size() == 1 ? 0 : -1);
}

namespace {

// The definition, written out plainly: one scale per block, round half to even.
void naive_quantize(std::vector<int8_t>& q, std::vector<float>& s, const std::vector<float>& x, int block) {
  size_t nb = (x.size() + block - 1) / block;
  q.assign(x.size(), 0);
  s.assign(nb, 0);
  for (size_t b = 0; b < nb; ++b) {
    float amax = 0;
    for (size_t i = b * block; i < std::min(x.size(), (b + 1) * block); ++i) amax = std::max(amax, std::fabs(x[i]));
    s[b] = amax / 127.f;
    for (size_t i = b * block; i < std::min(x.size(), (b + 1) * block); ++i)
      q[i] = s[b] == 0 ? 0 : int8_t(std::nearbyint(x[i] / s[b]));
  }
}

}  // namespace

TEST(DistQuantize, MatchesNaiveReferenceWithinBound) {
  std::mt19937 rng(3);
  for (int block : {64, 256}) {
    for (int64_t n : {int64_t(1), int64_t(255), int64_t(1000), int64_t(1) << 18}) {
      std::vector<float> x(n);
      std::normal_distribution<float> nd(0, 1);
      for (auto& v : x) v = nd(rng) * (1 + (rng() % 1000) * 0.01f);
      if (n > 300) std::fill(x.begin() + block, x.begin() + 2 * block, 0.f);  // an all-zero block
      std::vector<int8_t> q(n), rq;
      std::vector<float> s(quant_num_blocks(n, block)), rs, y(n);
      quantize_int8(q.data(), s.data(), x.data(), n, block);
      naive_quantize(rq, rs, x, block);
      ASSERT_EQ(s, rs);
      ASSERT_EQ(q, rq);
      dequantize_int8(y.data(), q.data(), s.data(), n, block);
      for (int64_t i = 0; i < n; ++i) {
        float bound = s[i / block] * 0.5f * (1 + 1e-5f);  // max|x| / 254 per block
        ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "block " << block << " n " << n << " i " << i;
        ASSERT_GE(q[i], -127);
      }
      if (n > 300) {
        EXPECT_EQ(s[1], 0.f);
      }
      // The packed wire form round-trips to the same values; dequantize_add accumulates.
      std::vector<char> packed(quant_packed_bytes(n, block));
      std::vector<float> z(n), acc(n, 1.f);
      quantize_int8_packed(packed.data(), x.data(), n, block);
      dequantize_int8_packed(z.data(), packed.data(), n, block);
      ASSERT_EQ(z, y);
      dequantize_int8_add(acc.data(), q.data(), s.data(), n, block);
      for (int64_t i = 0; i < n; i += 97)
        ASSERT_NEAR(acc[i], 1.f + y[i], 1e-6f * (1 + std::fabs(y[i])));  // may be fused
    }
  }
}

TEST(DistQuantize, NonFiniteBlocksStayVisible) {
  std::vector<float> x(600, 0.5f);
  x[300] = std::numeric_limits<float>::quiet_NaN();
  x[10] = std::numeric_limits<float>::infinity();
  std::vector<int8_t> q(600);
  std::vector<float> s(3), y(600);
  quantize_int8(q.data(), s.data(), x.data(), 600, 256);
  dequantize_int8(y.data(), q.data(), s.data(), 600, 256);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[255]));    // block 0 had an inf
  EXPECT_TRUE(std::isnan(y[256]) && std::isnan(y[511]));  // block 1 had a NaN
  EXPECT_FLOAT_EQ(y[512], 0.5f);                          // block 2 is untouched
}

TEST(DistMemoryEstimate, Gpt2ModelStates) {
  ModelConfig cfg = gpt2_124m();
  auto in = memory_inputs(cfg, 8, 256);
  EXPECT_EQ(in.num_params, 124439808);  // GPT-2 small, LM head tied to wte
  // The largest unit is the model's embedding unit (wte + wpe), which ZeRO-3 gathers whole.
  EXPECT_EQ(in.largest_unit, "embedding");
  EXPECT_EQ(in.largest_unit_params, 50257 * 768 + 1024 * 768);
  size_t acts = 0, temp = 0;
  ModelRuntime::planned_bytes(cfg, 8, 256, &acts, &temp);
  EXPECT_EQ(in.activation_bytes, int64_t(acts));
  EXPECT_EQ(in.temporary_bytes, int64_t(temp));

  const int64_t P = in.num_params;
  MemoryEstimateOptions opt;
  opt.num_ranks = 4;
  opt.hpz_partition_size = 2;
  auto rows = estimate_memory(in, opt);
  ASSERT_EQ(rows.size(), 6u);
  auto shard = [&](int n) { return (P + n - 1) / n; };
  EXPECT_EQ(rows[0].params + rows[0].grads + rows[0].optim, 16 * P);  // DDP: everything replicated
  EXPECT_EQ(rows[1].optim, 8 * shard(4));                             // ZeRO-1: Adam moments sharded
  EXPECT_EQ(rows[1].grads, 4 * P);
  EXPECT_EQ(rows[2].grads, 4 * shard(4));  // ZeRO-2: + gradients
  EXPECT_EQ(rows[2].params, 4 * P);
  EXPECT_EQ(rows[3].params, 4 * shard(4));  // ZeRO-3: + parameters
  // Two largest gathering units (the tied embedding and a block), parameters + gradients.
  const int64_t block = 12 * 768 * 768 + 13 * 768;
  EXPECT_EQ(in.unit_params[1], block);
  EXPECT_EQ(rows[3].comm, 2 * 4 * (in.largest_unit_params + block));
  // Default caps, the trainer's: DDP one 25 MiB bucket; ZeRO's 5e8 elements make GPT-2 one
  // bucket, so ZeRO-2 holds the whole unsharded gradient; ZeRO-1 only the ring's scratch.
  EXPECT_EQ(rows[0].comm, int64_t(25) << 20);
  EXPECT_EQ(rows[1].comm, int64_t(16) << 20);
  EXPECT_EQ(rows[2].comm, 4 * P);
  // An explicit 25 MiB cap: ZeRO-2 holds three buckets + the largest unit's gradient buffer.
  opt.bucket_bytes = int64_t(25) << 20;
  auto capped = estimate_memory(in, opt);
  EXPECT_EQ(capped[1].comm, int64_t(16) << 20);
  EXPECT_EQ(capped[2].comm, 4 * in.largest_unit_params + 3 * (int64_t(25) << 20));
  opt.bucket_bytes = 0;
  EXPECT_EQ(rows[4].params, 4 * shard(4) + 4 * shard(2));  // hpZ: secondary copy over G
  EXPECT_EQ(rows[5].optim, 8 * shard(2));                  // hybrid: ZeRO-3 within G
  for (auto& r : rows) {
    EXPECT_EQ(r.activations, in.activation_bytes);
    EXPECT_EQ(r.total(), r.params + r.grads + r.optim + r.activations + r.temporary + r.comm);
  }
  for (size_t i = 1; i < 4; ++i)
    EXPECT_LT(rows[i].params + rows[i].grads + rows[i].optim,
              rows[i - 1].params + rows[i - 1].grads + rows[i - 1].optim);
  // N = 2 and the default G: no hpZ / hybrid rows; N = 1: no communication.
  opt.num_ranks = 2;
  opt.hpz_partition_size = 0;
  EXPECT_EQ(estimate_memory(in, opt).size(), 4u);
  opt.num_ranks = 1;
  for (auto& r : estimate_memory(in, opt)) EXPECT_EQ(r.comm, 0);
  opt.num_ranks = 6;
  opt.hpz_partition_size = 4;
  EXPECT_THROW(estimate_memory(in, opt), Error);
  EXPECT_EQ(in.unit_params.size(), 14u);      // embedding, 12 blocks, head
  EXPECT_EQ(in.unit_params.back(), 2 * 768);  // the head: ln_f only (tied LM head)
}

// The pre-allocation check uses the estimator's row for the stage (hybrid: N = G), and sizes
// whose exact plan would overflow give a bound of 2^60 instead of a wrapped-around number.
TEST(DistMemoryFit, TrainingNeedIsTheEstimatorsRow) {
  ModelConfig cfg = gpt2_124m();
  auto in = memory_inputs(cfg, 8, 256);
  MemoryEstimateOptions opt;
  opt.num_ranks = 2;
  opt.bucket_bytes = 4 * in.num_params;
  auto rows = estimate_memory(in, opt);
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_EQ(training_bytes_per_rank(cfg, {8, 256, stage, 2, 1, int64_t(5e8)}), rows[size_t(stage)].total());
  opt.num_ranks = 2;  // 4 ranks in hybrid groups of 2 hold what 2 ranks hold
  EXPECT_EQ(training_bytes_per_rank(cfg, {8, 256, 3, 4, 2, int64_t(5e8)}), estimate_memory(in, opt)[3].total());
  cfg.n_layer = 1 << 16;
  cfg.n_embd = 1 << 20;
  cfg.ffn = 1 << 20;
  EXPECT_EQ(training_bytes_per_rank(cfg, {1 << 20, 1024, 0, 1, 1, 1}), int64_t(1) << 60);
  EXPECT_NO_THROW(check_memory_fits(1, 1, "x", "", ""));
  try {
    check_memory_fits(int64_t(1) << 60, 2, "training this model", "p", "do less");
    ADD_FAILURE() << "2 EiB fit";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("training this model needs an estimated 2147483648.00 GiB for the 2 ranks on this host"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(" is available ("), std::string::npos) << m;
  }
}

TEST(DistCounters, BusBytesFormulas) {
  using dist::Collective;
  EXPECT_DOUBLE_EQ(dist::bus_bytes(Collective::all_reduce, 1000, 4), 1500);
  EXPECT_DOUBLE_EQ(dist::bus_bytes(Collective::reduce_scatter, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(dist::bus_bytes(Collective::all_gather, 1000, 2), 500);
  EXPECT_DOUBLE_EQ(dist::bus_bytes(Collective::all_to_all, 1000, 8), 875);
  EXPECT_DOUBLE_EQ(dist::bus_bytes(Collective::broadcast, 1000, 8), 1000);
  EXPECT_DOUBLE_EQ(dist::bus_bytes(Collective::send, 1000, 2), 1000);
  EXPECT_DOUBLE_EQ(dist::bus_bytes(Collective::barrier, 1000, 8), 0);
  EXPECT_DOUBLE_EQ(dist::bus_bytes(Collective::all_reduce, 1000, 1), 0);
}

TEST(DistLocal, SerialPathIsTheParallelCode) {
  auto c = dist::make_world(dist::Backend::local);
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> g(100, 2.f), shard(100);
  c->all_reduce(g.data(), g.size());
  EXPECT_EQ(g[5], 2.f);
  c->reduce_scatter(g.data(), shard.data(), 100);
  EXPECT_EQ(shard, g);
  std::vector<uint16_t> bf(10, 0x3f80), out(10);
  c->iall_gather(bf.data(), out.data(), 20).wait();
  EXPECT_EQ(out, bf);
  auto s = c->stats();
  EXPECT_EQ(s[dist::Collective::all_reduce].calls, 1);
  EXPECT_EQ(s[dist::Collective::reduce_scatter].bytes, 400.0);
  EXPECT_EQ(s.total().bus_bytes, 0.0);
  EXPECT_THROW(c->broadcast(g.data(), 4, 1), Error);
  c->set_timeout(5);
  EXPECT_EQ(c->timeout(), 5);
}
