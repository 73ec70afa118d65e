// test_task_eval.cpp: the pieces of multiple-choice scoring and probes (observe/task_eval.h): the
// LM head's target ranks against a count over the logits, and score_requests' rows: each
// request's log-likelihood is its own single-row forward's, whatever the batch it shares, and a
// request longer than the row is cut from the left as the harness cuts it.
// (ztrain eval's numbers against PyTorch: tests/parity/task_parity.py.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/cross_entropy.h"
#include "models/config.h"
#include "models/transformer.h"
#include "observe/task_eval.h"
#include "test_util.h"

namespace zt {
namespace {

TEST(LmHeadTokenRank, CountsTheLogitsAboveTheTarget) {
  const int64_t N = 29;
  const int C = 16, V = 50;
  const auto x = test::randn(size_t(N) * C, 4), w = test::randn(size_t(V) * C, 5, 0.3);
  std::vector<int32_t> tg(static_cast<size_t>(N));
  Rng r(6);
  for (auto& t : tg) t = r.below(5) == 0 ? kernels::kIgnoreIndex : int32_t(r.below(V));
  std::vector<float> scratch(size_t(8) * V);
  std::vector<int64_t> rank(static_cast<size_t>(N), -1);
  kernels::LmHeadDims d{N, C, V, 8};
  int64_t c0 = 0, c1 = 0;
  const double plain = kernels::lmhead_ce(nullptr, nullptr, x.data(), w.data(), tg.data(), d, 1.f, scratch.data(), &c0);
  d.token_rank = rank.data();
  const double with = kernels::lmhead_ce(nullptr, nullptr, x.data(), w.data(), tg.data(), d, 1.f, scratch.data(), &c1);
  EXPECT_EQ(plain, with);  // the rank leaves the loss as it was
  EXPECT_EQ(c0, c1);
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = tg[size_t(i)];
    if (t == kernels::kIgnoreIndex) {
      EXPECT_EQ(rank[size_t(i)], 0);
      continue;
    }
    std::vector<double> z(static_cast<size_t>(V));  // the row's logits, in double
    for (int v = 0; v < V; ++v)
      for (int c = 0; c < C; ++c) z[size_t(v)] += double(x[size_t(i * C + c)]) * w[size_t(v * C + c)];
    int64_t above = 0;
    for (int v = 0; v < V; ++v) above += z[size_t(v)] > z[size_t(t)];
    EXPECT_EQ(rank[size_t(i)], above + 1) << "row " << i;
  }
}

ModelConfig tiny_gpt2() {
  return config_from_json(
      {{"model_type", "gpt2"}, {"vocab_size", 67}, {"n_embd", 32}, {"n_layer", 2}, {"n_head", 4}, {"n_positions", 32}},
      "test");
}

LoglikRequest request(const std::vector<int32_t>& ctx, const std::vector<int32_t>& cont) {
  LoglikRequest r;
  r.context = ctx;
  r.continuation = cont;
  r.where = "test:1";
  return r;
}

// The continuation's log-likelihood from one row holding exactly the request's tokens.
double single_row(Transformer& m, const std::vector<int32_t>& whole, int cont) {
  const int T = int(whole.size()) - 1;
  m.plan(1, T, false);
  std::vector<int32_t> in(whole.begin(), whole.end() - 1), tg(size_t(T), kernels::kIgnoreIndex);
  for (int i = T - cont; i < T; ++i) tg[size_t(i)] = whole[size_t(i) + 1];
  int64_t c = 0;
  return -m.forward_loss(in.data(), tg.data(), &c);
}

TEST(ScoreRequests, EachRowIsItsOwnForwardWhateverTheBatch) {
  Transformer m(tiny_gpt2());
  m.init_random(3);
  const std::vector<LoglikRequest> reqs = {request({1, 2, 3}, {4}), request({5}, {6, 7, 8, 9}),
                                           request({10, 11, 12, 13, 14, 15}, {16, 17}), request({18, 19}, {20})};
  const int T = 12;
  std::vector<double> by_batch[2];
  int k = 0;
  for (int B : {1, 3}) {
    m.plan(B, T, false);
    for (const LoglikScore& s : score_requests(m, reqs, B, T, true)) by_batch[k].push_back(s.loglik);
    ++k;
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> whole = reqs[i].context;
    whole.insert(whole.end(), reqs[i].continuation.begin(), reqs[i].continuation.end());
    const double want = single_row(m, whole, int(reqs[i].continuation.size()));
    EXPECT_NEAR(by_batch[0][i], want, 1e-4) << "request " << i;
    EXPECT_NEAR(by_batch[1][i], want, 1e-4) << "request " << i;
    EXPECT_LT(by_batch[0][i], 0.0);
  }
}

TEST(ScoreRequests, LongRowsLoseTheirStartAndLongContinuationsAreRefused) {
  Transformer m(tiny_gpt2());
  m.init_random(4);
  std::vector<int32_t> ctx;
  for (int i = 0; i < 20; ++i) ctx.push_back(int32_t(1 + i % 60));
  const std::vector<int32_t> cont = {30, 31, 32};
  const int T = 8;
  m.plan(2, T, false);
  const std::vector<LoglikScore> s = score_requests(m, {request(ctx, cont)}, 2, T, false);
  std::vector<int32_t> whole = ctx;
  whole.insert(whole.end(), cont.begin(), cont.end());
  const std::vector<int32_t> kept(whole.end() - (T + 1), whole.end());  // the last T + 1 tokens
  EXPECT_NEAR(s[0].loglik, single_row(m, kept, 3), 1e-4);
  m.plan(2, T, false);
  const std::string e =
      test::error_of([&] { score_requests(m, {request({1}, std::vector<int32_t>(9, 5))}, 2, T, false); });
  EXPECT_NE(e.find("test:1: the continuation is 9 tokens, more than the 8 positions"), std::string::npos) << e;
}

}  // namespace
}  // namespace zt
