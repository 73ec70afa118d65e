// test_ring_attention_mpi.cpp: ring attention (parallel/context_parallel.h) against the
// single-process flash attention (kernels/attention.h). ctest runs it under mpirun -np 2 and
// -np 4 (the world is the cp group) and alone (cp 1). Every rank makes the same whole
// sequence, runs the reference on all of it, and compares the rows it holds (zigzag chunks)
// after the ring's forward and backward; and the bytes the ring sent against the formula.
// The unmasked block kernel (kernels/attention_block.h) is checked on its own against a naive
// softmax, on one process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "dist/communicator.h"
#include "kernels/attention.h"
#include "kernels/attention_block.h"
#include "parallel/context_parallel.h"

using namespace zt;

namespace {

dist::Communicator* g_world = nullptr;

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

struct Case {
  int B, chunk, NH, KVH, HS;
  int window = 0;  // a sliding window (the reference's doc_start bound, the ring's AttnDims::window)
  float scale = 0.f, softcap = 0.f;
};

void check_ring(const Case& cs) {
  dist::Communicator& comm = *g_world;
  const int P = comm.size(), T = 2 * P * cs.chunk;
  std::vector<int32_t> doc(size_t(cs.B) * T, 0);
  if (cs.window > 0) kernels::attention_window_start(doc.data(), cs.B, T, cs.window);
  kernels::AttnDims full{cs.B, T, cs.NH, cs.KVH, cs.HS, cs.window > 0 ? doc.data() : nullptr, cs.scale, cs.softcap};
  const int64_t rs = full.row_stride(), os = int64_t(cs.NH) * cs.HS;
  const std::vector<float> qkv = randn(size_t(cs.B) * T * rs, 7);
  const std::vector<float> dout = randn(size_t(cs.B) * T * os, 11);
  std::vector<float> out(size_t(cs.B) * T * os), lse(size_t(cs.B) * cs.NH * T), dqkv(qkv.size());
  kernels::attention_forward(out.data(), lse.data(), qkv.data(), full);
  kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), full);

  parallel::ContextParallel cp(comm, T);
  const int Tl = cp.local_T();
  kernels::AttnDims loc = full;
  loc.T = Tl;
  loc.doc_start = nullptr;
  loc.window = cs.window;
  std::vector<float> lq(size_t(cs.B) * Tl * rs), ldo(size_t(cs.B) * Tl * os);
  for (int b = 0; b < cs.B; ++b)
    for (int t = 0; t < Tl; ++t) {
      const int g = cp.global_position(t);
      std::copy_n(qkv.data() + (int64_t(b) * T + g) * rs, rs, lq.data() + (int64_t(b) * Tl + t) * rs);
      std::copy_n(dout.data() + (int64_t(b) * T + g) * os, os, ldo.data() + (int64_t(b) * Tl + t) * os);
    }
  std::vector<float> lout(ldo.size()), llse(size_t(cs.B) * cs.NH * Tl), ldq(lq.size());
  comm.reset_stats();
  cp.attention_forward(lout.data(), llse.data(), lq.data(), loc);
  cp.attention_backward(ldq.data(), ldo.data(), lq.data(), lout.data(), llse.data(), loc);
  const double sent = comm.stats()[dist::Collective::send].bytes;
  EXPECT_EQ(sent, parallel::ContextParallel::ring_bytes_per_layer(cs.B, T, P, cs.KVH, cs.HS));

  const float tol_o = 2e-5f * max_abs(out), tol_g = 2e-5f * max_abs(dqkv);
  double worst_o = 0, worst_l = 0, worst_g = 0;
  for (int b = 0; b < cs.B; ++b)
    for (int t = 0; t < Tl; ++t) {
      const int g = cp.global_position(t);
      for (int64_t e = 0; e < os; ++e)
        worst_o = std::max(
            worst_o, double(std::fabs(lout[(int64_t(b) * Tl + t) * os + e] - out[(int64_t(b) * T + g) * os + e])));
      for (int h = 0; h < cs.NH; ++h)
        worst_l = std::max(worst_l, double(std::fabs(llse[(int64_t(b) * cs.NH + h) * Tl + t] -
                                                     lse[(int64_t(b) * cs.NH + h) * T + g])));
      for (int64_t e = 0; e < rs; ++e)
        worst_g = std::max(
            worst_g, double(std::fabs(ldq[(int64_t(b) * Tl + t) * rs + e] - dqkv[(int64_t(b) * T + g) * rs + e])));
    }
  EXPECT_LT(worst_o, tol_o) << "output, P " << P << " chunk " << cs.chunk << " HS " << cs.HS;
  EXPECT_LT(worst_l, 2e-5) << "lse";
  EXPECT_LT(worst_g, tol_g) << "dq / dk / dv";
}

TEST(RingAttention, MatchesOneProcessGqa) { check_ring({2, 40, 4, 2, 16}); }
TEST(RingAttention, MatchesOneProcessAcrossTiles) { check_ring({1, 70, 2, 1, 64}); }
TEST(RingAttention, MatchesOneProcessMha) { check_ring({1, 8, 2, 2, 32}); }
// Gemma / Mistral layers: windows within a chunk (most remote blocks hidden), across chunks and
// across tiles, a score scale and Gemma 2's soft-cap.
TEST(RingAttention, WindowShorterThanAChunk) { check_ring({2, 12, 4, 2, 16, 5}); }
TEST(RingAttention, WindowAcrossChunks) { check_ring({2, 12, 4, 2, 16, 20, 0.3f}); }
TEST(RingAttention, WindowAcrossTilesScaleSoftcap) { check_ring({1, 70, 2, 1, 64, 90, 0.2f, 1.5f}); }
TEST(RingAttention, ScaleSoftcapNoWindow) { check_ring({2, 8, 4, 2, 32, 0, 0.25f, 2.0f}); }

// The block kernel against a naive softmax over each row's visible keys (forward), and its
// gradients against the naive formula's pieces (backward via P and dS), on one process: all keys
// visible, or a window's first key per row (rows before, inside and past the key block), with a
// score scale and a soft-cap.
void check_block(float scale_in, float cap, bool window) {
  const int B = 2, NH = 4, KVH = 2, HS = 16, nq = 70, nk = 67, group = NH / KVH;
  const int64_t qs = int64_t(NH) * HS, ks = int64_t(KVH) * HS;
  const std::vector<float> q = randn(size_t(B) * nq * qs, 1), k = randn(size_t(B) * nk * ks, 2),
                           v = randn(size_t(B) * nk * ks, 3), dout = randn(size_t(B) * nq * qs, 4);
  std::vector<int32_t> first(nq, 0);
  if (window)  // rows 0..10 see every key, then later first keys (in the second key tile too); 44.. none
    for (int i = 0; i < nq; ++i) first[i] = std::max(0, 2 * i - 20);
  std::vector<float> out(q.size()), lse(size_t(B) * NH * nq);
  kernels::BlockDims bd{B, NH, KVH, HS, nq, nk, int64_t(NH) * nq, nq, scale_in, cap, window ? first.data() : nullptr};
  kernels::attention_block_forward({out.data(), nq * qs, qs}, lse.data(), {q.data(), nq * qs, qs},
                                   {k.data(), nk * ks, ks}, {v.data(), nk * ks, ks}, bd);
  std::vector<float> D(lse.size()), dq(q.size()), dk(k.size()), dv(v.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < nq; ++i) {
        float s = 0;
        for (int e = 0; e < HS; ++e) s += out[(b * nq + i) * qs + h * HS + e] * dout[(b * nq + i) * qs + h * HS + e];
        D[(b * NH + h) * nq + i] = s;
      }
  // With the lse of a row that sees nothing (-inf) the backward must add nothing for it; give it
  // a finite stand-in, as the merged lse of ring attention is.
  std::vector<float> lse_b = lse;
  for (float& x : lse_b)
    if (std::isinf(x)) x = 0.f;
  kernels::attention_block_backward({dq.data(), nq * qs, qs}, {dk.data(), nk * ks, ks}, {dv.data(), nk * ks, ks},
                                    {dout.data(), nq * qs, qs}, lse_b.data(), D.data(), {q.data(), nq * qs, qs},
                                    {k.data(), nk * ks, ks}, {v.data(), nk * ks, ks}, bd);
  // Naive, in double.
  const double scale = scale_in > 0.f ? scale_in : 1.0 / std::sqrt(double(HS));
  std::vector<double> rdq(q.size()), rdk(k.size()), rdv(v.size());
  double worst_o = 0, worst_l = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int g = h / group;
      for (int i = 0; i < nq; ++i) {
        const float* qi = &q[(b * nq + i) * qs + h * HS];
        const float* gi = &dout[(b * nq + i) * qs + h * HS];
        const int j0 = first[i];
        if (j0 >= nk) {  // sees no key: out 0, lse -inf
          for (int e = 0; e < HS; ++e)
            worst_o = std::max(worst_o, double(std::fabs(out[(b * nq + i) * qs + h * HS + e])));
          if (!std::isinf(lse[(b * NH + h) * nq + i])) worst_l = 1e30;
          continue;
        }
        std::vector<double> s(nk), p(nk), dcap(nk, 1.0);
        double mx = -1e300, sum = 0;
        for (int j = j0; j < nk; ++j) {
          double d = 0;
          for (int e = 0; e < HS; ++e) d += double(qi[e]) * k[(b * nk + j) * ks + g * HS + e];
          s[j] = d * scale;
          if (cap > 0.f) {
            const double t = std::tanh(s[j] / cap);
            s[j] = cap * t;
            dcap[j] = 1.0 - t * t;
          }
          mx = std::max(mx, s[j]);
        }
        for (int j = j0; j < nk; ++j) sum += (p[j] = std::exp(s[j] - mx));
        worst_l = std::max(worst_l, std::fabs(mx + std::log(sum) - lse[(b * NH + h) * nq + i]));
        double Di = 0;
        std::vector<double> o(HS, 0.0);
        for (int j = j0; j < nk; ++j) {
          p[j] /= sum;
          for (int e = 0; e < HS; ++e) o[e] += p[j] * v[(b * nk + j) * ks + g * HS + e];
        }
        for (int e = 0; e < HS; ++e) {
          worst_o = std::max(worst_o, std::fabs(o[e] - out[(b * nq + i) * qs + h * HS + e]));
          Di += o[e] * gi[e];
        }
        for (int j = j0; j < nk; ++j) {
          double d = 0;
          for (int e = 0; e < HS; ++e) d += double(gi[e]) * v[(b * nk + j) * ks + g * HS + e];
          const double ds = p[j] * (d - Di) * dcap[j] * scale;
          for (int e = 0; e < HS; ++e) {
            rdv[(b * nk + j) * ks + g * HS + e] += p[j] * gi[e];
            rdk[(b * nk + j) * ks + g * HS + e] += ds * qi[e];
            rdq[(b * nq + i) * qs + h * HS + e] += ds * k[(b * nk + j) * ks + g * HS + e];
          }
        }
      }
    }
  EXPECT_LT(worst_o, 1e-5);
  EXPECT_LT(worst_l, 1e-5);
  auto worst = [](const std::vector<float>& a, const std::vector<double>& r) {
    double w = 0;
    for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(a[i] - r[i]));
    return w;
  };
  EXPECT_LT(worst(dq, rdq), 1e-4);
  EXPECT_LT(worst(dk, rdk), 1e-4);
  EXPECT_LT(worst(dv, rdv), 1e-4);
}

TEST(AttentionBlock, MatchesNaive) { check_block(0.f, 0.f, false); }
TEST(AttentionBlock, WindowScaleSoftcapMatchNaive) {
  check_block(0.f, 0.f, true);
  check_block(0.2f, 1.5f, false);
  check_block(0.2f, 1.5f, true);
}

TEST(ContextParallel, SequenceNotDivisible) {
  try {
    parallel::check_cp_seq_len(30, 4);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("30 is not divisible by 8"), std::string::npos) << e.what();
  }
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<dist::Communicator> world = dist::make_world();
  g_world = world.get();
  int rc = RUN_ALL_TESTS();
  int64_t bad = rc != 0;
  world->all_reduce(&bad, 1, dist::ReduceOp::max);
  return bad ? 1 : 0;
}
